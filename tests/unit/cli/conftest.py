"""Fixtures of the command's tests."""

import pytest


@pytest.fixture
def serve_state(monkeypatch):
    """What `floodway serve` sets in this process (environment, logger levels): restored."""
    import logging

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "FLOODWAY_NO_MODAL"):
        monkeypatch.delenv(name, raising=False)
    loggers = [logging.getLogger(n) for n in ("floodway", "httpx")]
    before = [lg.level for lg in loggers]
    yield
    for lg, level in zip(loggers, before, strict=True):
        lg.setLevel(level)
