"""What the HTTP layer needs of where work runs: `Backend`, and the work of one request it
queues (`Pending`; `StreamPending` for a streaming endpoint).

The local runtime (`floodway.runtime.pool.Pool`) and the Modal router
(`floodway.modal.router.backend.ModalBackend`) implement them in full: the handlers never
probe an implementation with hasattr/getattr. The job queue's contract is
`floodway.core.job_queue.Jobs`; the clock's, `floodway.core.clock.Clock`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol

from floodway.core.stream_events import StreamEvent
from floodway.routers.decide import Snapshot
from floodway.routers.decide_stream import StreamSnapshot

# (endpoint, rows, compute seconds, padded tokens, router-side service seconds) for every
# completed batch: the metrics' batch histograms.
BatchListener = Callable[[str, int, float, int, float], None]


class Pending(Protocol):
    """The work of one request, queued by `Backend.enqueue`. Await it for one entry per
    input (its output, or the exception that failed it alone: EndpointError, Unavailable);
    it raises TimeoutError when the request's timeout passes first, and cancelling the await
    withdraws the inputs still queued."""

    def __await__(self) -> Generator[Any, None, list[Any]]: ...

    def dispatched(self) -> bool:
        """True once any input has left the router's queue for a container (False where
        the backend cannot tell: the hand-off then submits a new job)."""
        ...

    def adopt(self) -> Awaitable[list[Any]]:
        """Keep the work past the request's timeout and return its results (one per input,
        output or exception), for a job that takes the request over. Only called after
        `dispatched()` was True."""
        ...


class StreamPending(Pending, Protocol):
    """The work of one request to a streaming endpoint: what `Backend.enqueue` returns for
    one (`floodway.functions.endpoint.Endpoint.streaming`). Awaited, one combined output per
    input (`floodway.functions.streams.combine`) or its exception; TimeoutError when an
    input produced no first chunk within the request's timeout. Or read as events."""

    async def next_event(self) -> StreamEvent | None:
        """The next `floodway.core.stream_events` event (a chunk, an input's end or failure),
        None once every input ended. The request's timeout bounds the time to each input's
        first chunk (it then fails with TimeoutError and is stopped); a stream that began
        runs until it ends, at most the endpoint's `Generation.max_stream_s`."""
        ...

    def cancel(self) -> int:
        """Stop every unfinished input (queued: withdrawn; running: cancelled in its
        container) -> how many there were. Synchronous: safe where awaiting is not."""
        ...


class Backend(Protocol):
    """Where work runs: the local pool of worker processes, or Modal classes."""

    def snapshot(self, endpoint: str) -> Snapshot:
        """The endpoint's state for `decide()` (`floodway.core.snapshot.build_snapshot`, on
        the backend's own monotonic clock)."""
        ...

    def stream_snapshot(self, endpoint: str) -> StreamSnapshot:
        """A streaming endpoint's state for `decide_stream()`: its containers' sequences
        and its queue of sequences (`floodway.core.stream_snapshot.build_stream_snapshot`,
        on the backend's own monotonic clock). Only asked of a streaming endpoint."""
        ...

    def start_cold(self, endpoint: str) -> bool:
        """Start one more container (spill_cold); False when at max_containers."""
        ...

    def enqueue(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                priority: int = 1, tenant: str = "anonymous") -> Pending:
        """Queue `inputs` now, synchronously: the next `snapshot()` already counts them (a
        burst's next decisions must see this request); a `StreamPending` for a streaming
        endpoint. Raises Unavailable when the endpoint cannot take work at all (not
        started)."""
        ...

    def readiness(self) -> dict[str, Any]:
        """``{"ready": bool, ...detail}``; ready once each endpoint has a warm container.
        ``"sequences"`` (optional): per streaming endpoint, ``{"active", "kv_cache_tokens",
        "kv_cache_capacity"}`` summed over its containers (the metrics' gauges)."""
        ...

    def add_batch_listener(self, listener: BatchListener) -> None:
        """Call `listener(endpoint, rows, compute_s, padded_tokens, service_s)` for every
        completed batch (metrics; `BatchListener`); a backend that does not see batches
        (Modal: they form in the containers) never calls it."""
        ...


__all__ = ["Backend", "BatchListener", "Pending", "StreamPending"]
