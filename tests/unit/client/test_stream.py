"""Streams: the SSE reader (WHATWG event-stream rules), the router's events as typed
events, and `Client.stream` over scripted answers: events in order, the connection closed
when the iterator is, a broken stream an error, a job or a buffered answer as outputs."""

from __future__ import annotations

import random

import httpx
import pytest

import floodway as fw
from floodway.client import ConnectionFailed, RequestRefused, StreamChunk, StreamError, StreamOutput
from floodway.client.stream import EventReader, SSEReader, event_of
from tests.unit.client.fakes import FakeTime, error, mock_http, sse


def test_sse_reader_joins_data_lines_and_skips_comments_and_other_fields():
    r = SSEReader()
    lines = [": keep-alive", "event: message", "id: 7", "data: {\"a\":", "data:1}", "",
             "", "retry: 10", "data:  two spaces", ""]
    assert [d for line in lines if (d := r.feed(line)) is not None] == \
        ['{"a":\n1}', " two spaces"]


def test_router_events_become_typed_events():
    assert event_of('{"index": 1, "chunk": {"text": "Hi", "tokens": 1}}') == \
        StreamChunk(1, {"text": "Hi", "tokens": 1})
    assert event_of('{"index": 0, "output": "Hello"}') == StreamOutput(0, "Hello")
    ev = event_of('{"index": 2, "error": {"type": "input_error", "message": "too long", '
                  '"field": "inputs[2].prompt"}}')
    assert isinstance(ev, StreamError) and isinstance(ev.error, RequestRefused)
    assert (ev.error.status, ev.error.field, str(ev.error)) == (422, "inputs[2].prompt",
                                                                "too long")
    late = event_of('{"index": 0, "error": {"type": "deadline_exceeded", "message": "x"}}')
    assert isinstance(late.error, TimeoutError)
    for bad in ('{"chunk": 1}', "[1]", '{"index": "0", "chunk": 1}', '{"index": 0}', "nope"):
        with pytest.raises(fw.client.BadResponse):
            event_of(bad)
    reader = EventReader()
    assert [reader.feed(x) for x in ("data: [DONE]", "")] == [None, None] and reader.done


class Body(httpx.SyncByteStream):
    """An answer's body in parts, recording whether the client closed it."""

    def __init__(self, parts: list[bytes]):
        self.parts, self.sent, self.closed = parts, 0, False

    def __iter__(self):
        for part in self.parts:
            self.sent += 1
            yield part

    def close(self) -> None:
        self.closed = True


def streaming(body: Body, t: FakeTime, before: list[httpx.Response] | None = None):
    seen: list[httpx.Request] = []
    queued = list(before or [])

    def handler(request):
        seen.append(request)
        if queued:
            return queued.pop(0)
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              stream=body)

    c = fw.Client("http://router", http=mock_http(handler), clock=t.monotonic, sleep=t.sleep,
                  rng=random.Random(1))
    return c, seen


def test_a_stream_yields_chunks_then_outputs_and_ends_at_done():
    t = FakeTime()
    body = Body([sse({"index": 0, "chunk": "Hel"}, {"index": 1, "chunk": "a"},
                     {"index": 0, "chunk": "lo"}, {"index": 0, "output": "Hello"},
                     {"index": 1, "error": {"type": "slow_client", "message": "too slow"}})])
    shed = error(503, "overloaded", "busy", headers={"Retry-After": "1"})
    c, seen = streaming(body, t, before=[shed])
    with c.stream("generate", [{"prompt": "Hi"}, {"prompt": "Yo"}], deadline_ms=5000) as s:
        events = list(s)
    assert events[:4] == [StreamChunk(0, "Hel"), StreamChunk(1, "a"), StreamChunk(0, "lo"),
                          StreamOutput(0, "Hello")]
    assert isinstance(events[4], StreamError) and events[4].error.status == 400
    assert len(events) == 5 and body.closed
    assert [r.headers["accept"] for r in seen] == ["text/event-stream"] * 2
    assert len({r.headers["idempotency-key"] for r in seen}) == 1 and t.sleeps[0] >= 1.0


def test_closing_the_iterator_early_closes_the_connection():
    t = FakeTime()
    body = Body([sse({"index": 0, "chunk": i}, done=False) for i in range(100)])
    c, _ = streaming(body, t)
    s = c.stream("generate", [{"prompt": "Hi"}])
    assert next(s) == StreamChunk(0, 0) and next(s) == StreamChunk(0, 1)
    s.close()
    assert body.closed and body.sent < 100   # not read to the end
    with pytest.raises(StopIteration):
        next(s)


def test_a_stream_that_ends_without_done_or_breaks_raises_connection_failed():
    t = FakeTime()
    c, _ = streaming(Body([sse({"index": 0, "chunk": "a"}, done=False)]), t)
    s = c.stream("generate", [{"prompt": "Hi"}])
    assert next(s) == StreamChunk(0, "a")
    with pytest.raises(ConnectionFailed, match=r"\[DONE\]"):
        next(s)

    class Broken(Body):
        def __iter__(self):
            yield sse({"index": 0, "chunk": "a"}, done=False)
            raise httpx.ReadError("connection reset")

    c, seen = streaming(Broken([]), t)
    s = c.stream("generate", [{"prompt": "Hi"}])
    assert next(s) == StreamChunk(0, "a")
    with pytest.raises(ConnectionFailed, match="ReadError"):
        next(s)
    assert len(seen) == 1   # a stream under way is never sent again


def test_a_stream_answered_by_a_job_or_buffered_yields_outputs():
    t = FakeTime()
    answers = [httpx.Response(202, headers={"Location": "/v1/jobs/j1"},
                              json={"id": "j1", "status": "queued"}),
               httpx.Response(200, json={"id": "j1", "status": "succeeded",
                                         "outputs": ["Hello", "Yo"]})]
    c, _ = streaming(Body([]), t, before=answers)
    assert list(c.stream("generate", [{"prompt": "Hi"}, {"prompt": "Yo"}])) == \
        [StreamOutput(0, "Hello"), StreamOutput(1, "Yo")]
    c, _ = streaming(Body([]), t, before=[httpx.Response(200, json={"outputs": [3]})])
    assert list(c.stream("numbers", [3])) == [StreamOutput(0, 3)]
    c, _ = streaming(Body([]), t, before=[error(406, "invalid_request", "Accept", "Accept")])
    with pytest.raises(RequestRefused) as e:
        c.stream("numbers", [3])
    assert e.value.field == "Accept"
