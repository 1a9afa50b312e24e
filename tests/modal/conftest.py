"""Fixtures for the tests that drive the real modal client against the fake control plane.

    def test_x(fake_modal):                      # a started FakeModalServer, env pointed at it
        fake_modal.state.add_secret(...); fake_modal.handle(...)
        app = load_modal_app()                   # modal_app.py, freshly imported

The modal client caches one client per process (``modal.client._Client._client_from_env``)
and the environment it resolved (``modal._environments.ENVIRONMENT_CACHE``): both are reset
before each test, and the client a test opened is closed before its server stops, so no
test inherits a client bound to a dead server.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import MODAL_APP
from tests.modal_fake import FakeModalServer

_loads = itertools.count(1)


def reset_modal_client() -> None:
    """Close and forget the client Modal cached, and the environment it resolved."""
    import modal
    from modal._environments import ENVIRONMENT_CACHE
    from modal._utils.async_utils import synchronizer
    from modal.client import _Client

    cached = _Client._client_from_env
    _Client._set_env_client(None)
    ENVIRONMENT_CACHE.clear()
    if cached is not None and not cached.is_closed():
        client: modal.Client = synchronizer._translate_out(cached)
        client.close()


@pytest.fixture
def fake_modal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeModalServer]:
    """A started `FakeModalServer` with the environment pointing the modal client at it
    (and no user config file); stopped after the test."""
    server = FakeModalServer().start()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for key in ("MODAL_PROFILE", "MODAL_OAUTH_REFRESH_TOKEN", "MODAL_OAUTH_CLIENT_ID",
                "MODAL_OAUTH_CLIENT_SECRET", "MODAL_OAUTH_JWT_KEY"):
        monkeypatch.delenv(key, raising=False)
    reset_modal_client()
    try:
        yield server
    finally:
        reset_modal_client()
        server.stop()


def load_modal_app(path: Path = MODAL_APP) -> ModuleType:
    """Import `path` (default the example ``modal_app.py``) as a fresh module of its own
    name, so each test deploys objects no other test hydrated."""
    name = f"{path.stem}_fake_{next(_loads)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
