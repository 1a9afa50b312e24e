"""The Modal unit tests build Modal objects with `to_modal`: ``FLOODWAY_NO_MODAL`` (which
`floodway serve` and `floodway build` set in their own process) is cleared for each test, so
a test that ran one of those commands in-process before cannot make `to_modal` return None."""

from __future__ import annotations

import pytest

from floodway.modal.extra import NO_MODAL_ENV


@pytest.fixture(autouse=True)
def _modal_objects_are_made(monkeypatch):
    monkeypatch.delenv(NO_MODAL_ENV, raising=False)
