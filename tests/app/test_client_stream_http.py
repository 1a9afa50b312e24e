"""`AsyncClient.stream` against the real router app in process: the router's SSE events
reach the client as typed events as they are sent, the iterator ends at ``[DONE]``, and
closing it mid-stream disconnects, which cancels the inputs still running in the router.

httpx's ASGITransport hands over an answer only once the app finished it, so `Live` below
passes each body part on as the app sends it and tells the app when the client closed."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx

import floodway as fw
from floodway.client import StreamChunk, StreamError, StreamOutput
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from tests.app.scripted import settle, until
from tests.app.test_streaming_http import StreamBackend, app, end
from tests.unit.client.fakes import FakeTime


class LiveBody(httpx.AsyncByteStream):
    def __init__(self, parts: asyncio.Queue, gone: asyncio.Event):
        self.parts, self.gone = parts, gone

    async def __aiter__(self):
        while (part := await self.parts.get()) is not None:
            yield part

    async def aclose(self) -> None:
        self.gone.set()   # the client closed the connection: the app sees a disconnect


class Live(httpx.AsyncBaseTransport):
    """An ASGI transport that streams: the answer starts as soon as the app starts it."""

    def __init__(self, asgi: Any):
        self.asgi = asgi
        self.tasks: list[asyncio.Task] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        parts: asyncio.Queue = asyncio.Queue()
        gone, started = asyncio.Event(), asyncio.get_running_loop().create_future()
        pending = [body]

        async def receive() -> dict:
            if pending:
                return {"type": "http.request", "body": pending.pop(), "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                started.set_result(msg)
            elif msg["type"] == "http.response.body":
                parts.put_nowait(msg.get("body", b""))
                if not msg.get("more_body", False):
                    parts.put_nowait(None)

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1.1", "method": request.method, "scheme": "http",
                 "path": request.url.path, "raw_path": request.url.raw_path,
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1234),
                 "server": ("router", 80),
                 "headers": [(k.lower(), v) for k, v in request.headers.raw]}
        task = asyncio.ensure_future(self.asgi(scope, receive, send))
        self.tasks.append(task)
        await asyncio.wait({started, task}, return_when=asyncio.FIRST_COMPLETED)
        msg = started.result()
        return httpx.Response(msg["status"], headers=msg["headers"],
                              stream=LiveBody(parts, gone), request=request)


def run(coro):
    """`coro` to its end; the timeout only fails a test that would otherwise hang."""
    return asyncio.run(asyncio.wait_for(coro, 20))


def setup():
    clock = ManualClock()
    backend = StreamBackend(app, clock)
    live = Live(make_asgi_app(app, backend, clock=clock))
    t = FakeTime()
    c = fw.AsyncClient("http://router", http=httpx.AsyncClient(transport=live),
                       clock=t.monotonic, sleep=t.asleep, rng=random.Random(0))
    return backend, live, c


def test_the_stream_yields_each_event_as_the_router_sends_it_then_ends():
    backend, live, c = setup()

    async def go():
        opening = asyncio.ensure_future(c.stream("words", ["a", "b"], deadline_ms=1000))
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(0, "Hel")   # the first event: the router starts its answer
        s = await opening
        first = await s.__anext__()   # read before the stream went on
        p.on_chunk(1, "x")
        p.on_chunk(0, "lo")
        end(p, 0)
        p.futures[1].set_exception(fw.EndpointError("inputs[1]: too long", status=422,
                                                    field="inputs[1]", kind="input_error"))
        rest = [ev async for ev in s]
        await asyncio.gather(*live.tasks)
        return first, rest, backend.calls

    first, rest, calls = run(go())
    assert first == StreamChunk(0, "Hel")
    assert rest[:3] == [StreamChunk(1, "x"), StreamChunk(0, "lo"), StreamOutput(0, "Hello")]
    assert len(rest) == 4 and isinstance(rest[3], StreamError) and rest[3].index == 1
    assert (rest[3].error.status, rest[3].error.field) == (422, "inputs[1]")
    assert isinstance(rest[3].error, fw.RequestError)
    (endpoint, inputs, timeout_s), = calls
    assert (endpoint, inputs, timeout_s) == ("words", ["a", "b"], 1.0)   # the deadline sent


def test_closing_the_stream_mid_way_cancels_what_runs_in_the_router():
    backend, live, c = setup()

    async def go():
        opening = asyncio.ensure_future(c.stream("words", ["a", "b"]))
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(0, "x")
        s = await opening
        got = await s.__anext__()
        await s.aclose()   # the caller is done with it
        await asyncio.wait_for(asyncio.gather(*live.tasks), 5)
        await settle()
        return got, p

    got, p = run(go())
    assert got == StreamChunk(0, "x")
    assert p.futures[0].cancelled() and p.futures[1].cancelled()


def test_the_router_sends_what_the_client_reads():
    """The request itself: SSE asked for, the inputs as JSON, a deadline and a key."""
    backend, live, c = setup()
    seen: list[httpx.Request] = []
    inner = live.handle_async_request

    async def recording(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await inner(request)

    live.handle_async_request = recording

    async def go():
        opening = asyncio.ensure_future(c.stream("words", ["hi"], deadline_ms=800))
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(0, "hi")
        end(p)
        async with await opening as s:
            return [ev async for ev in s]

    assert run(go()) == [StreamChunk(0, "hi"), StreamOutput(0, "hi")]
    r = seen[0]
    assert r.headers["accept"] == "text/event-stream" and r.headers["x-deadline-ms"] == "800"
    assert json.loads(r.content) == {"inputs": ["hi"]} and r.headers["idempotency-key"]
