"""A streaming request's events, per input i: its chunks in order, then its end or failure.
What `floodway.core.backend.StreamPending.next_event` returns; the HTTP layer frames them
(`floodway.http.streaming`: SSE, NDJSON; `floodway.http.openai_stream`: OpenAI's SSE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChunkEvent:
    """Input `index` streamed `data`; `t_s`: when it reached the router (the backend's
    monotonic clock, seconds)."""

    index: int
    data: Any
    t_s: float


@dataclass(frozen=True)
class ItemEnd:
    """Input `index` ended; `output`: its chunks combined (`floodway.functions.streams`)."""

    index: int
    output: Any


@dataclass(frozen=True)
class ItemFailed:
    """Input `index` failed with `error` (EndpointError, Unavailable, TimeoutError); its
    wire type is `floodway.http.streaming.error_kind(error)`."""

    index: int
    error: Exception


StreamEvent = ChunkEvent | ItemEnd | ItemFailed


__all__ = ["ChunkEvent", "ItemEnd", "ItemFailed", "StreamEvent"]
