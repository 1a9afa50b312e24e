"""A streaming endpoint over HTTP, in process: SSE, NDJSON and the buffered answer, a 406
for an Accept it cannot answer, a 422 for a bad item, the deadline on the first chunk, and a
client that disconnects mid-stream cancelling its sequences. The stream is played by the
test through the runtime's StreamPending, on a manual clock; the ASGI app is driven message
by message (`Call`), so a test sees each frame as it is sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.runtime.pending import StreamPending
from tests.app.scripted import ScriptedBackend, client, settle, until

app = fw.App("st")


@app.endpoint(route=fw.Route(timeout_s=1.0, spill=()))
async def words(model, text: str):
    yield text


@app.endpoint(route=fw.Route(timeout_s=1.0, spill=()))
async def numbers(model, n: int):
    yield n


class StreamBackend(ScriptedBackend):
    """Streaming endpoints get a StreamPending the test plays (`streams`)."""

    def __init__(self, a: fw.App, clock: ManualClock):
        super().__init__(a, clock)
        self.streams: list[StreamPending] = []

    def enqueue(self, endpoint: str, inputs: list, *, timeout_s: float, priority: int = 1,
                tenant: str = "anonymous") -> Any:
        ep = self.app[endpoint]
        self.calls.append((endpoint, inputs, timeout_s))
        p = StreamPending(endpoint, len(inputs), clock=self.clock, timeout_s=timeout_s,
                          max_stream_s=ep.generation.max_stream_s)
        loop = asyncio.get_running_loop()
        p.attach([loop.create_future() for _ in inputs], lambda: False)
        self.streams.append(p)
        return p


def end(p: StreamPending, index: int = 0) -> None:
    p.futures[index].set_result(None)


class Call:
    """One request to an ASGI app, its answer read message by message; `disconnect()`
    plays a client that goes away."""

    def __init__(self, asgi: Any, path: str, body: bytes, headers: dict[str, str]):
        self.out: asyncio.Queue[dict] = asyncio.Queue()
        self.gone = asyncio.Event()
        self._body: bytes | None = body
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in
                             {"content-type": "application/json", **headers}.items()],
                 "client": ("127.0.0.1", 1234), "server": ("t", 80)}
        self.task = asyncio.ensure_future(asgi(scope, self._receive, self._send))

    async def _receive(self) -> dict:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, msg: dict) -> None:
        self.out.put_nowait(msg)

    async def start(self) -> tuple[int, dict[str, str]]:
        msg = await self.out.get()
        assert msg["type"] == "http.response.start"
        return msg["status"], {k.decode(): v.decode() for k, v in msg["headers"]}

    async def part(self) -> bytes:
        """The next non-empty part of the body (b"" at its end)."""
        while True:
            msg = await self.out.get()
            if msg["body"] or not msg.get("more_body", False):
                return msg["body"]

    async def rest(self) -> bytes:
        parts = []
        while part := await self.part():
            parts.append(part)
        return b"".join(parts)

    def disconnect(self) -> None:
        self.gone.set()


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def backend(clock):
    return StreamBackend(app, clock)


def asgi(backend):
    return make_asgi_app(app, backend, clock=backend.clock)


def body(*inputs: Any) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()


def test_sse_sends_each_chunk_as_it_comes_then_the_output_and_done(backend, clock):
    async def go():
        a = asgi(backend)
        call = Call(a, "/v1/words", body("hi"), {"accept": "text/event-stream"})
        await until(lambda: backend.streams)
        p = backend.streams[0]
        clock.advance(0.25)
        p.on_chunk(0, "Hel")
        status, headers = await call.start()
        first = await call.part()   # before the stream went on: sent as it came
        clock.advance(0.5)
        p.on_chunk(0, "lo")
        end(p)
        rest = await call.rest()
        await call.task
        metrics = await _metrics(a)
        return status, headers, first, rest, metrics

    status, headers, first, rest, metrics = asyncio.run(go())
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert first == b'data: {"index":0,"chunk":"Hel"}\n\n'
    assert rest == (b'data: {"index":0,"chunk":"lo"}\n\n'
                    b'data: {"index":0,"output":"Hello"}\n\n'
                    b"data: [DONE]\n\n")
    assert 'floodway_time_to_first_chunk_seconds_sum{endpoint="words"} 0.25' in metrics
    assert 'floodway_inter_chunk_seconds_sum{endpoint="words"} 0.5' in metrics
    assert 'floodway_generated_tokens_total{endpoint="words"} 2.0' in metrics


async def _metrics(a) -> str:
    async with client(a) as c:
        return (await c.get("/metrics")).text


def test_ndjson_lines_with_a_failed_input_among_them(backend):
    async def go():
        call = Call(asgi(backend), "/v1/words", body("a", "b"),
                    {"accept": "application/x-ndjson"})
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(1, {"text": "x", "tokens": 2})
        p.futures[0].set_exception(fw.EndpointError("endpoint 'words' raised ValueError: no"))
        end(p, 1)
        status, headers = await call.start()
        return status, headers, await call.rest()

    status, headers, raw = asyncio.run(go())
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in raw.splitlines()]
    assert lines == [
        {"index": 1, "chunk": {"text": "x", "tokens": 2}},
        {"index": 0, "error": {"type": "endpoint_error",
                               "message": "endpoint 'words' raised ValueError: no"}},
        {"index": 1, "output": {"text": "x", "tokens": 2}},
        {"done": True}]


def test_a_client_that_asks_no_stream_gets_the_combined_outputs(backend):
    async def go():
        async with client(asgi(backend)) as c:
            answer = asyncio.ensure_future(c.post("/v1/words", content=body("a", "b")))
            await until(lambda: backend.streams)
            p = backend.streams[0]
            for i, part in ((0, "He"), (1, "wo"), (0, "llo"), (1, "rld")):
                p.on_chunk(i, part)
            end(p, 0)
            end(p, 1)
            return await answer

    r = asyncio.run(go())
    assert r.status_code == 200 and r.json() == {"outputs": ["Hello", "world"]}


def test_an_accept_it_cannot_answer_is_406_and_a_bad_item_422_before_any_work(backend):
    async def go():
        async with client(asgi(backend)) as c:
            bad_accept = await c.post("/v1/words", content=body("a"),
                                      headers={"Accept": "text/html"})
            bad_item = await c.post("/v1/numbers", content=body(1, "two"),
                                    headers={"Accept": "text/event-stream"})
            return bad_accept, bad_item

    bad_accept, bad_item = asyncio.run(go())
    assert bad_accept.status_code == 406
    assert bad_accept.json()["error"]["field"] == "Accept"
    assert bad_item.status_code == 422 and bad_item.json()["error"]["field"] == "inputs[1]"
    assert backend.calls == []


def test_no_first_chunk_within_the_deadline_is_a_504(backend, clock):
    async def go():
        async with client(asgi(backend)) as c:
            answer = asyncio.ensure_future(c.post(
                "/v1/words", content=body("a"), headers={"Accept": "text/event-stream",
                                                         "X-Deadline-Ms": "300"}))
            await until(lambda: backend.streams)
            await settle()
            clock.advance(0.3)
            return await answer, backend.streams[0]

    r, p = asyncio.run(go())
    assert r.status_code == 504 and r.json()["error"]["type"] == "deadline_exceeded"
    assert "no first chunk within 0.3 s" in r.json()["error"]["message"]
    # where the bound came from, and what it bounds
    assert "X-Deadline-Ms" in r.json()["error"]["message"]
    assert "bounds the time to the first chunk" in r.json()["error"]["message"]
    assert p.futures[0].cancelled()


def test_a_client_that_disconnects_mid_stream_cancels_its_sequences(backend):
    async def go():
        a = asgi(backend)
        call = Call(a, "/v1/words", body("a", "b"), {"accept": "text/event-stream"})
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(0, "x")
        await call.start()
        await call.part()
        end(p, 0)
        await call.part()   # input 0's output
        call.disconnect()
        await asyncio.wait_for(call.task, 5)
        return p, await _metrics(a)

    p, metrics = asyncio.run(go())
    assert p.futures[1].cancelled() and not p.futures[0].cancelled()
    assert 'floodway_cancelled_sequences_total{endpoint="words"} 1.0' in metrics


def test_a_buffered_client_that_disconnects_is_client_closed_not_an_error(backend):
    """No stream Accept: the handler collects the outputs while watching the client; one
    that leaves mid-stream gets ClientClosed (499, for the metrics), its sequences
    cancelled, and no exception escapes the app."""
    async def go():
        a = asgi(backend)
        call = Call(a, "/v1/words", body("forever"), {})
        await until(lambda: backend.streams)
        p = backend.streams[0]
        p.on_chunk(0, "tick ")   # the first chunk: the handler now collects
        await settle()
        call.disconnect()
        await asyncio.wait_for(call.task, 5)   # raised InvalidStateError before
        status, _ = await call.start()
        return status, p, await _metrics(a)

    status, p, metrics = asyncio.run(go())
    assert status == 499 and p.futures[0].cancelled()
    assert 'floodway_cancelled_sequences_total{endpoint="words"} 1.0' in metrics


def test_no_first_chunk_near_the_deadline_hands_off_to_a_job_of_the_combined_output(tmp_path):
    from floodway.jobs.local import LocalJobs
    from tests.app.test_admission_http import poll_job, running

    spilling = fw.App("sp")
    spilling.endpoint(name="words", route=fw.Route(timeout_s=1.0, spill=("async",)))(
        words.fn)
    clock = ManualClock()
    backend = StreamBackend(spilling, clock)
    jobs = LocalJobs(spilling, backend, tmp_path / "jobs.sqlite3", clock=clock)
    a = make_asgi_app(spilling, backend, jobs=jobs, clock=clock)

    async def go():
        async with client(a) as c:
            answer = asyncio.ensure_future(c.post("/v1/words", content=body("a"),
                                                  headers={"Accept": "text/event-stream"}))
            await until(lambda: backend.streams)
            await settle()
            clock.advance(0.95)   # past the hand-off (0.9 s), before the 1 s deadline
            r = await answer
            first = backend.streams[0]
            async with running(jobs):
                await until(lambda: len(backend.streams) == 2)
                p = backend.streams[1]
                p.on_chunk(0, {"text": "Hel", "tokens": 1})
                p.on_chunk(0, {"text": "lo", "tokens": 1, "finish_reason": "stop"})
                end(p)
                done = await poll_job(c, r.headers["location"], "succeeded")
            return r, first, done

    r, first, done = asyncio.run(go())
    assert r.status_code == 202 and r.headers["x-floodway-handoff"] == "deadline"
    assert first.futures[0].cancelled()   # never on a container: the job ran it anew
    assert done["outputs"] == [{"text": "Hello", "tokens": 2, "finish_reason": "stop"}]
