"""A streaming endpoint's events as the client yields them, and the SSE reader that makes
them from the router's ``text/event-stream`` answer (`floodway.http.streaming`):

    data: {"index": i, "chunk": ...}      ->  StreamChunk(index, data)
    data: {"index": i, "output": ...}     ->  StreamOutput(index, output)   input i ended
    data: {"index": i, "error": {...}}    ->  StreamError(index, error)     input i failed
    data: [DONE]                          ->  the end of the stream

Events of one input come in order (its chunks, then its output or error); inputs
interleave. A request the router answered with a job instead (``202``: the async spill or
the deadline hand-off) or with a buffered ``{"outputs": [...]}`` yields one StreamOutput
per input (`outputs_as_events`), so one loop reads every answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from floodway.client.errors import KIND_STATUS, BadResponse, ClientError, error_of


@dataclass(frozen=True)
class StreamChunk:
    """A chunk input `index` yielded (any JSON value; ``{"text", "tokens"}`` for text
    generation)."""

    index: int
    data: Any


@dataclass(frozen=True)
class StreamOutput:
    """Input `index` ended; `output` is its chunks combined, as the buffered answer has it."""

    index: int
    output: Any


@dataclass(frozen=True)
class StreamError:
    """Input `index` failed; `error` is the typed error (RequestRefused for an input the
    model refused, with its `field`; DeadlineExceeded; Overloaded; ServerError)."""

    index: int
    error: ClientError


StreamEvent = StreamChunk | StreamOutput | StreamError

DONE_DATA = "[DONE]"


class SSEReader:
    """Server-Sent Events, line by line (the WHATWG HTML standard, section 9.2.6
    "Interpreting an event stream"): ``data:`` lines (one optional space after the colon)
    joined by newlines make an event, dispatched at a blank line; comment lines (``:``) and
    the other fields (event, id, retry) are ignored."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """One line (without its end) -> an event's data when it completes, else None."""
        if not line:
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


class EventReader:
    """The router's SSE lines -> `StreamEvent`s; `done` once ``[DONE]`` came."""

    def __init__(self) -> None:
        self.sse = SSEReader()
        self.done = False

    def feed(self, line: str) -> StreamEvent | None:
        data = self.sse.feed(line)
        if data is None or self.done:
            return None
        if data == DONE_DATA:
            self.done = True
            return None
        return event_of(data)


def event_of(data: str) -> StreamEvent:
    """One event's JSON data -> its StreamEvent. Raises BadResponse for another shape."""
    try:
        body = json.loads(data)
        index = body["index"]
    except (ValueError, TypeError, KeyError):
        raise BadResponse(f"not a stream event: {data[:200]!r}") from None
    if not isinstance(index, int):
        raise BadResponse(f"not a stream event: {data[:200]!r}")
    if "chunk" in body:
        return StreamChunk(index, body["chunk"])
    if "output" in body:
        return StreamOutput(index, body["output"])
    error = body.get("error")
    if isinstance(error, dict):
        kind = str(error.get("type", "endpoint_error"))
        field = error.get("field")
        return StreamError(index, error_of(KIND_STATUS.get(kind, 500), kind,
                                           str(error.get("message", kind)),
                                           field if isinstance(field, str) else None))
    raise BadResponse(f"not a stream event: {data[:200]!r}")


def outputs_as_events(outputs: list[Any]) -> Iterator[StreamEvent]:
    """A buffered answer's (or a job's) outputs as one StreamOutput per input."""
    for i, output in enumerate(outputs):
        yield StreamOutput(i, output)


__all__ = ["DONE_DATA", "EventReader", "SSEReader", "StreamChunk", "StreamError",
           "StreamEvent", "StreamOutput", "event_of", "outputs_as_events"]
