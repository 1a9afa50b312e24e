"""Streamed answers: one request's events, and their wire formats on ``POST /v1/<endpoint>``.

A streaming endpoint's request (`floodway.functions.endpoint.Endpoint.streaming`) yields, per
input i, chunks and then its end or failure (`floodway.core.stream_events`):

    ChunkEvent(index, data, t_s)   ->  {"index": i, "chunk": <data>}
    ItemEnd(index, output)         ->  {"index": i, "output": <the chunks combined>}
    ItemFailed(index, error)       ->  {"index": i, "error": {"type": ..., "message": ...}}

`Accept: text/event-stream` gets them as Server-Sent Events (``data: <json>\\n\\n``, closed by
``data: [DONE]``), `Accept: application/x-ndjson` as one JSON object per line (closed by
``{"done": true}``); any other client the buffered ``{"outputs": [...]}`` (`stream_mode`,
which weighs the Accept header's q-values).
`ItemStream` is the iterator the routes read (the native route here, the OpenAI-compatible
ones elsewhere); it observes the streaming metrics as events pass, and closing it (a client
that went away) stops every input not finished: queued ones are withdrawn, running ones get
a Cancel in their container. `collect_unless_gone` is the buffered answer's wait: the
inputs' combined outputs, unless the client leaves first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from floodway.codec import dumps
from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed, StreamEvent
from floodway.errors import EndpointError, RequestError, Unavailable
from floodway.functions.streams import chunk_tokens
from floodway.http.errors import ClientClosed

if TYPE_CHECKING:
    from floodway.core.backend import StreamPending
    from floodway.http.metrics import Metrics

SSE, NDJSON, JSON = "text/event-stream", "application/x-ndjson", "application/json"
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _accept_ranges(header: str) -> list[tuple[str, float]]:
    """The media ranges of an Accept header, each with its q-value (RFC 9110 section
    12.5.1): lower case, parameters other than q dropped; a q that is not a number counts
    as 1, one out of 0..1 is clamped to it."""
    out = []
    for part in header.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for p in params:
            name, _, value = p.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(1.0, max(0.0, float(value.strip())))
                except ValueError:
                    q = 1.0
                q = q if q == q else 1.0   # NaN
        if media:
            out.append((media.lower(), q))
    return out


def _quality(ranges: list[tuple[str, float]], offer: str) -> tuple[float, int]:
    """(q, specificity) of media type `offer` under `ranges`: the q of the most specific
    range that matches it (2 the type itself, 1 ``type/*``, 0 ``*/*``); (0, -1) when none
    does (not acceptable)."""
    kind = offer.split("/", 1)[0]
    best = (0.0, -1)
    for media, q in ranges:
        level = 2 if media == offer else 1 if media == f"{kind}/*" else \
            0 if media == "*/*" else -1
        if level > best[1]:
            best = (q, level)
    return best


# At equal q and specificity: a stream the client named, then JSON, then a stream it only
# accepts by a wildcard (``*/*`` is the buffered answer). Keys: (offer, named exactly).
_TIE = {(SSE, True): 5, (NDJSON, True): 4, (JSON, True): 3, (JSON, False): 3,
        (SSE, False): 2, (NDJSON, False): 1}


def stream_mode(request: Request) -> str | None:
    """`SSE` or `NDJSON` when the client's Accept prefers a stream, None for the buffered
    JSON answer. No Accept (or only ``*/*``, ``application/json``): None. Otherwise the
    answer of highest q among SSE, NDJSON and JSON, each with the q of the most specific
    range that names it (``text/*`` is SSE, ``application/*`` NDJSON or JSON; q=0: not
    acceptable); at equal q, the more specific match, then a stream the client named
    itself over JSON, and JSON over a stream it only accepts by a wildcard. Raises
    RequestError (406, field Accept) when it accepts none of them."""
    header = ",".join(request.headers.getlist("accept")).strip()
    ranges = _accept_ranges(header)
    if not ranges:
        return None
    best: tuple[float, int, int] | None = None
    choice: str | None = None
    for offer in (SSE, NDJSON, JSON):
        q, level = _quality(ranges, offer)
        if q <= 0:
            continue
        key = (q, level, _TIE[offer, level == 2])
        if best is None or key > best:
            best, choice = key, offer
    if choice is not None:
        return None if choice == JSON else choice
    shown = header if len(header) <= 80 else header[:77] + "..."
    raise RequestError(f"Accept {shown!r}: this endpoint answers {SSE} (a stream of Server-"
                       f"Sent Events), {NDJSON} (a stream of JSON lines) or application/json",
                       status=406, field="Accept")


def error_kind(e: BaseException) -> str:
    """The wire error type of a failed input (as the JSON error answers name it):
    deadline_exceeded, unavailable, endpoint_error, or an EndpointError's own `kind`
    (input_error: the input was bad, e.g. a prompt too long for the model; too_large: the
    outputs over the router's cap; slow_client: the client read too slowly)."""
    if isinstance(e, TimeoutError):
        return "deadline_exceeded"
    if isinstance(e, Unavailable):
        return "unavailable"
    if isinstance(e, EndpointError):
        return getattr(e, "kind", None) or "endpoint_error"
    return "internal_error"


def event_body(ev: StreamEvent) -> dict[str, Any]:
    """An event as the JSON object the native stream sends."""
    if isinstance(ev, ChunkEvent):
        return {"index": ev.index, "chunk": ev.data}
    if isinstance(ev, ItemEnd):
        return {"index": ev.index, "output": ev.output}
    error = {"type": error_kind(ev.error), "message": str(ev.error)}
    if (field := getattr(ev.error, "field", None)) is not None:
        error["field"] = field   # the input field to blame (an input_error)
    return {"index": ev.index, "error": error}


def frame(mode: str, body: Any) -> bytes:
    """One event on the wire: an SSE ``data:`` block, or an NDJSON line."""
    text = dumps(body)
    return b"data: " + text + b"\n\n" if mode == SSE else text + b"\n"


END = {SSE: b"data: [DONE]\n\n", NDJSON: b'{"done":true}\n'}


class ItemStream:
    """The events of one streaming request, as an async iterator (`ChunkEvent`, `ItemEnd`,
    `ItemFailed`, in arrival order; chunks of an input in order, its end last).

    `first`: an event already read (the handler waits for the first one before it
    answers). The metrics see every event as it is read: the time from the request's
    arrival (`t0_s`, the backend's clock) to each input's first chunk, the gaps between
    chunks, the tokens. `aclose()` / `cancel()` stop every unfinished input."""

    def __init__(self, pending: StreamPending, *, endpoint: str, metrics: Metrics | None,
                 t0_s: float, first: StreamEvent | None = None):
        self.pending, self.endpoint, self.metrics, self.t0_s = pending, endpoint, metrics, t0_s
        self._first = first
        self._last_s: dict[int, float] = {}
        self._done = False

    def __aiter__(self) -> ItemStream:
        return self

    async def __anext__(self) -> StreamEvent:
        ev: StreamEvent | None
        if self._first is not None:
            ev, self._first = self._first, None
        else:
            ev = None if self._done else await self.pending.next_event()
        if ev is None:
            self._done = True
            raise StopAsyncIteration
        if isinstance(ev, ChunkEvent) and self.metrics is not None:
            last = self._last_s.get(ev.index)
            self.metrics.chunk(self.endpoint, ev.t_s - (self.t0_s if last is None else last),
                               first=last is None, tokens=chunk_tokens(ev.data))
            self._last_s[ev.index] = ev.t_s
        return ev

    def cancel(self) -> int:
        """Stop every unfinished input now (synchronous: safe in a cancelled task) -> how
        many were stopped (counted in the metrics as cancelled sequences)."""
        n = self.pending.cancel()
        if n and self.metrics is not None:
            self.metrics.cancelled(self.endpoint, n)
        return n

    async def aclose(self) -> None:
        self.cancel()


class FirstEvent:
    """A stream's first event as a `Pending` (`floodway.http.handoff.DeadlineHandoff.wait`
    waits on it): awaited, ``[event]`` (None: no events at all); `dispatched` and `adopt`
    are the stream's own, so a hand-off adopts the whole request."""

    def __init__(self, pending: StreamPending):
        self.pending = pending

    def __await__(self):
        return self._first().__await__()

    async def _first(self) -> list[StreamEvent | None]:
        return [await self.pending.next_event()]

    def dispatched(self) -> bool:
        return self.pending.dispatched()

    def adopt(self):
        return self.pending.adopt()


class StreamedResponse(StreamingResponse):
    """A StreamingResponse of `body` (the framed events of `stream`) that stops the
    stream's unfinished inputs however it ends: the body sent, the client gone (the body
    iterator cancelled), or an error. `media_type`: SSE or NDJSON."""

    def __init__(self, stream: ItemStream, body: AsyncIterator[bytes | str], media_type: str):
        super().__init__(body, media_type=media_type, headers=STREAM_HEADERS)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.stream.cancel()


async def _frames(stream: ItemStream, mode: str):
    try:
        async for ev in stream:
            yield frame(mode, event_body(ev))
        yield END[mode]
    finally:
        stream.cancel()   # cancelled mid-stream (a disconnect): stop the sequences at once


def stream_response(stream: ItemStream, mode: str) -> StreamingResponse:
    """The 200 streamed answer of `stream` in `mode` (`SSE` or `NDJSON`)."""
    return StreamedResponse(stream, _frames(stream, mode), mode)


async def disconnected(request: Request) -> None:
    """Return once the client has gone away (ASGI http.disconnect after the body)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect_unless_gone(request: Request, stream: ItemStream, count: int) -> list[Any]:
    """`collect` (one combined output or exception per input) while the client stays;
    raises ClientClosed when it leaves first. The unfinished inputs are stopped either way
    (`ItemStream.cancel`)."""
    work = asyncio.ensure_future(collect(stream, count))
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        left = not work.done()
        if left:
            work.cancel()
        stream.cancel()   # the client left (or an error): stop what is unfinished
    if left:
        # A cancelled task is done only once it ran its cancellation: wait for that (it
        # raises CancelledError, or its result if it finished meanwhile) before answering.
        await asyncio.wait({work})
        raise ClientClosed("the client closed the connection")
    return work.result()


async def collect(stream: ItemStream, count: int) -> list[Any]:
    """The buffered answer's results: one combined output or exception per input."""
    out: list[Any] = [None] * count
    async for ev in stream:
        if isinstance(ev, ItemEnd):
            out[ev.index] = ev.output
        elif isinstance(ev, ItemFailed):
            out[ev.index] = ev.error
    return out


__all__ = ["END", "NDJSON", "SSE", "STREAM_HEADERS", "FirstEvent", "ItemStream",
           "StreamedResponse", "collect", "collect_unless_gone",
           "disconnected", "error_kind", "event_body", "frame", "stream_mode",
           "stream_response"]
