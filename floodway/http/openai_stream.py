"""A completion's answer from its `ItemStream` (`floodway.http.streaming`): streamed as
OpenAI's Server-Sent Events, or collected for one buffered answer.

    OpenAIStream(stream, answer, first)   the 200 ``text/event-stream`` answer

(collected: `floodway.http.streaming.collect_unless_gone`). Either way the inputs still
running are stopped when the answer ends early: the client gone, an input failed, or an
error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from floodway.core.stream_events import ChunkEvent, ItemEnd, StreamEvent
from floodway.errors import EndpointError
from floodway.http.openai_answers import StreamAnswer, openai_error
from floodway.http.streaming import SSE, ItemStream, StreamedResponse, error_kind, frame

SSE_DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    """One Server-Sent Event carrying `obj` as JSON (OpenAI's stream framing)."""
    return frame(SSE, obj)


def stream_error(e: BaseException) -> dict[str, Any]:
    """An input's failure mid-stream, as OpenAI's error object (its event ends the
    stream; the official client raises it as an APIError); ``code`` is floodway's error
    type (endpoint_error, deadline_exceeded, unavailable, input_error). An input the
    model refused (a 4xx error: a prompt over its context) is an ``invalid_request_error``
    whose ``param`` is the error's `field`; anything else a ``server_error``."""
    status = getattr(e, "status", 500)
    if isinstance(status, int) and 400 <= status < 500:
        return openai_error(str(e), "invalid_request_error", getattr(e, "field", None),
                            error_kind(e))
    return openai_error(str(e), "server_error", None, error_kind(e))


# An input's error as the answer names it (OpenAI's parameters for the native fields).
Rename = Callable[[Exception], Exception]


def _same(e: Exception) -> Exception:
    return e


def _translated(answer: StreamAnswer, ev: StreamEvent,
                rename: Rename = _same) -> tuple[dict[str, Any] | None, bool]:
    """(the chunk to send for `ev` or None, whether the stream ends there with an error,
    the input's error named by `rename`)."""
    try:
        if isinstance(ev, ChunkEvent):
            return answer.chunk(ev.index, ev.data), False
        if isinstance(ev, ItemEnd):
            return answer.end(ev.index, ev.output), False
        return stream_error(rename(ev.error)), True
    except EndpointError as e:   # output that is not text
        return stream_error(e), True


async def openai_events(stream: ItemStream, answer: StreamAnswer,
                        first: StreamEvent | None = None, *,
                        rename: Rename = _same) -> AsyncIterator[bytes]:
    """The SSE body of a streamed completion, from `first` (an event already read) and the
    rest of `stream`: one OpenAI chunk per event that tells something, the usage chunk
    (``stream_options.include_usage``), then ``data: [DONE]``. An input's failure (or
    output that is not text) ends the stream with an error event (no [DONE]) and stops
    the other inputs. `rename`: an input's error as the answer names it."""
    try:
        if first is not None:
            out, failed = _translated(answer, first, rename)
            if out is not None:
                yield sse(out)
            if failed:
                return
        async for ev in stream:
            out, failed = _translated(answer, ev, rename)
            if out is not None:
                yield sse(out)
            if failed:
                return
        if answer.include_usage:
            yield sse(answer.usage())
        yield SSE_DONE
    finally:
        stream.cancel()   # ended early or the client left: stop the unfinished inputs


class OpenAIStream(StreamedResponse):
    """A streamed completion (`openai_events`) that stops its unfinished inputs however it
    ends (`StreamedResponse`)."""

    def __init__(self, stream: ItemStream, answer: StreamAnswer,
                 first: StreamEvent | None = None, *, rename: Rename = _same):
        super().__init__(stream, openai_events(stream, answer, first, rename=rename), SSE)


__all__ = ["SSE_DONE", "OpenAIStream", "Rename", "openai_events", "sse", "stream_error"]
