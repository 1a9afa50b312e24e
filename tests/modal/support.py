"""Shared steps of the fake-control-plane tests: deploy the example, fake embeddings, POST
to a router app in-process.

    mod = deploy_example(fake_modal)          # modal_app.py deployed through the real client
    fake_modal.handle("Embed.predict", embed_rows)
    status, body = await asgi_post(mod.router.local(), "/v1/talk", {"inputs": [...]}, headers)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from floodway.modal.deploy import ROUTER_KEYS_SECRET
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


async def asgi_post(app: Any, path: str, body: dict, headers: dict[str, str],
                     gone: asyncio.Event | None = None,
                     on_body: Any = None) -> tuple[int, bytes]:
    """POST `body` as JSON to the ASGI `app`; (status, the body as sent). The client
    disconnects once `gone` is set (never when None); `on_body(bytes so far)` sees each
    part of the body as it is sent."""
    import json

    data = json.dumps(body).encode()
    sent, status, gone = [False], [0], gone or asyncio.Event()
    parts: list[bytes] = []

    async def receive() -> dict:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": data, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(msg: dict) -> None:
        if msg["type"] == "http.response.start":
            status[0] = msg["status"]
        elif msg["type"] == "http.response.body":
            parts.append(msg.get("body", b""))
            if on_body is not None:
                on_body(b"".join(parts))

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("router", 80),
             "headers": [(k.lower().encode(), v.encode()) for k, v in
                         {"content-type": "application/json",
                          "content-length": str(len(data)), **headers}.items()]}
    await app(scope, receive, send)
    return status[0], b"".join(parts)


def sse_events(body: bytes) -> list[Any]:
    import json

    frames = [f.removeprefix(b"data: ") for f in body.split(b"\n\n") if f]
    assert frames[-1] == b"[DONE]", body
    return [json.loads(f) for f in frames[:-1]]
