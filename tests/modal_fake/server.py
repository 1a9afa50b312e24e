"""The fake control plane's servicer and its lifecycle on loopback.

    server = FakeModalServer().start()        # own thread + event loop, free ports
    os.environ.update(server.env())           # MODAL_SERVER_URL, a token it issued, ...
    server.state.add_secret("keys", {...})    # tests.modal_fake.state.State
    server.handle("Embed.predict", fn)        # tests.modal_fake.calls
    server.set_timing("Embed", Timing(service_s=0.05, cold_start_s=0.3))
    server.run(coro)                          # run a coroutine on the server's loop
    server.stop()

`FakeModal` is the grpclib servicer: the parts (`ContainerSide`, `DeploySide`, `CallSide`,
`GeneratorSide`, `ObjectsSide`) over ``modal_proto.api_grpc.ModalClientBase``, every other
RPC answering UNIMPLEMENTED (`tests.modal_fake.stubs.complete`). Blob uploads and downloads
go to a small aiohttp server on another loopback port (``PUT``/``GET /blobs/<id>``, ETag = md5
as S3 does). Every RPC's credentials are checked first (`tests.modal_fake.auth`): only the
token pairs the fake issued get an answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from aiohttp import web
from grpclib.events import RecvRequest, listen
from grpclib.server import Server
from modal_proto.api_grpc import ModalClientBase

from tests.modal_fake.auth import Tokens
from tests.modal_fake.calls import CallSide, Handler
from tests.modal_fake.container import ContainerSide
from tests.modal_fake.deploy import DeploySide
from tests.modal_fake.generators import GeneratorSide
from tests.modal_fake.objects import ObjectsSide
from tests.modal_fake.pools import Pool, Timing
from tests.modal_fake.state import State
from tests.modal_fake.stubs import complete

T = TypeVar("T")
HOST = "127.0.0.1"


@complete
class FakeModal(ContainerSide, DeploySide, CallSide, GeneratorSide, ObjectsSide,
                ModalClientBase):
    """The servicer. Attributes the parts share: `state`, `handlers` (key -> callable),
    `timings` (function tag or class name -> Timing), `pools` (function id -> Pool),
    `blob_url` (``http://127.0.0.1:<port>/blobs``), `tokens` (the credentials it accepts)."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State()
        self.handlers: dict[str, Handler] = {}
        self.timings: dict[str, Timing] = {}
        self.pools: dict[str, Pool] = {}
        self.blob_url = ""
        self.tokens = Tokens()


class FakeModalServer:
    """`FakeModal` served on loopback from a background thread (see the module doc)."""

    def __init__(self, servicer: FakeModal | None = None) -> None:
        self.servicer = servicer or FakeModal()
        self.token_id, self.token_secret = self.servicer.tokens.issue()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = self.blob_port = 0
        self._thread: threading.Thread | None = None
        self._grpc: Server | None = None
        self._http: web.AppRunner | None = None

    @property
    def state(self) -> State:
        return self.servicer.state

    @property
    def tokens(self) -> Tokens:
        return self.servicer.tokens

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment that points the real modal client here: server URL, the token
        pair this server issued (any other is refused), no config file profile."""
        return {"MODAL_SERVER_URL": self.url, "MODAL_TOKEN_ID": self.token_id,
                "MODAL_TOKEN_SECRET": self.token_secret, "MODAL_ENVIRONMENT": "main"}

    # ------------------------------------------------------------ setup

    def handle(self, key: str, fn: Handler) -> None:
        """Run `fn` for the inputs of ``key`` (``"<Class>.<method>"`` or a function tag);
        see `tests.modal_fake.calls`."""
        self.servicer.handlers[key] = fn

    def set_timing(self, key: str, timing: Timing) -> None:
        """Service and cold-start time of the function (tag) or class `key`; takes effect
        for pools made after this call (set it before the first call)."""
        self.servicer.timings[key] = timing

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 10.0) -> FakeModalServer:
        """Start both servers on free loopback ports; returns self once they listen."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as e:  # noqa: BLE001 - reported to start()
                failed.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name="fake-modal", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s) or failed:
            raise RuntimeError(f"fake Modal server did not start: {failed}")
        return self

    async def _serve(self) -> None:
        self._grpc = Server([self.servicer])
        listen(self._grpc, RecvRequest, self.servicer.tokens.on_request)
        await self._grpc.start(HOST, 0)
        self.port = self._grpc._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        app = web.Application(client_max_size=1 << 30)
        app.router.add_put("/blobs/{blob_id}", self._put_blob)
        app.router.add_get("/blobs/{blob_id}", self._get_blob)
        self._http = web.AppRunner(app)
        await self._http.setup()
        site = web.TCPSite(self._http, HOST, 0)
        await site.start()
        self.blob_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.servicer.blob_url = f"http://{HOST}:{self.blob_port}/blobs"

    async def _put_blob(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.state.blobs[request.match_info["blob_id"]] = body
        return web.Response(headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    async def _get_blob(self, request: web.Request) -> web.Response:
        body = self.state.blobs.get(request.match_info["blob_id"])
        return web.Response(status=404) if body is None else web.Response(body=body)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run `coro` on the server's loop from another thread; returns its result."""
        assert self.loop is not None, "server not started"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Close the pools and both servers, and end the thread. Idempotent."""
        if self.loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            for pool in list(self.servicer.pools.values()):
                await pool.close()
            if self._grpc is not None:
                self._grpc.close()
                await self._grpc.wait_closed()
            if self._http is not None:
                await self._http.cleanup()

        try:
            self.run(shutdown(), timeout_s=10.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10.0)
            self._thread = None
