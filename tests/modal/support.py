"""Shared steps of the fake-control-plane tests: deploy the example, fake embeddings.

    mod = deploy_example(fake_modal)          # modal_app.py deployed through the real client
    fake_modal.handle("Embed.predict", embed_rows)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from floodway.deploy.modal_deploy import ROUTER_KEYS_SECRET
from tests.conftest import MODAL_APP
from tests.modal.conftest import load_modal_app
from tests.modal_fake import FakeModalServer

T = TypeVar("T")
APP_NAME = "floodway-demo"
# The named Secret the example's router reads FLOODWAY_API_KEYS from.
ROUTER_SECRET = ROUTER_KEYS_SECRET
API_KEY = "fw-test-key-0123456789"
DIM = 384                  # all-MiniLM-L6-v2's embedding width


def deploy_example(server: FakeModalServer, *, with_secret: bool = True,
                   path: Path = MODAL_APP) -> ModuleType:
    """Import `path` (default modal_app.py) afresh and ``app.deploy()`` it against `server`
    (the router's Secret created first unless `with_secret` is False). Returns the module,
    whose Modal objects are then hydrated from the fake."""
    if with_secret:
        server.state.add_secret(ROUTER_SECRET, {"FLOODWAY_API_KEYS": API_KEY})
    mod = load_modal_app(path)
    mod.app.deploy()
    return mod


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, then cancel what the router left running in the loop (its
    stats refresh and arrivals flush), so that nothing is destroyed while pending."""

    async def main() -> T:
        try:
            return await coro
        finally:
            for _ in range(5):      # a cancelled arrivals flush schedules itself once more
                rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in rest:
                    t.cancel()
                await asyncio.gather(*rest, return_exceptions=True)

    return asyncio.run(main())


def embed_rows(rows: list[Any]) -> list[list[float]]:
    """The GPU class's batched ``predict`` as a fake: one fixed-size vector per row, its first
    entry the row's length so that tests can tell rows apart."""
    return [[float(len(str(r)))] + [0.0] * (DIM - 1) for r in rows]
