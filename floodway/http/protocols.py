"""What the HTTP layer needs of the rest: where work runs (`Backend`), the async job queue
(`Jobs`), the work of one request (`Pending`; `StreamPending` for a streaming endpoint), and
a clock (`Clock`).

The local runtime (`floodway.runtime.pool.Pool`, `floodway.jobs.local.LocalJobs`) and the
Modal router (`floodway.modal.router.backend.ModalBackend`, `floodway.modal.jobs`)
implement them in full: the handlers never probe an implementation with hasattr/getattr.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol

from floodway.routers.admission import Priority
from floodway.routers.decide import Snapshot
from floodway.routers.decide_stream import StreamSnapshot

if TYPE_CHECKING:
    from floodway.http.streaming import StreamEvent

# (endpoint, rows, compute seconds) for every completed batch: the metrics' batch histogram.
# (endpoint, rows, compute seconds, padded tokens, router-side service seconds) per batch.
BatchListener = Callable[[str, int, float, int, float], None]


class Clock(Protocol):
    """`monotonic()` for durations and deadlines, `wall()` (unix seconds) for the traffic
    history and stored jobs, and `sleep(seconds)` to wait on that same time (the deadline
    hand-off, a job runner's polls and leases). Tests inject a fake one
    (`floodway.http.clock.ManualClock`); the runtime uses `SYSTEM_CLOCK`."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


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
        """The next `floodway.http.streaming` event (a chunk, an input's end or failure),
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
        """Call `listener(endpoint, rows, compute_s)` for every completed batch (metrics); a
        backend that does not see batches (Modal: they form in the containers) never calls
        it."""
        ...


class Jobs(Protocol):
    """The async job queue behind ``/v1/<endpoint>/jobs`` and ``/v1/jobs/<id>``. Every
    method that may touch storage or the network is a coroutine."""

    async def submit(self, endpoint: str, inputs: list[Any], *, tenant: str,
                     priority: Priority, idempotency_key: str | None
                     ) -> tuple[dict[str, Any], bool]:
        """Persist a job before returning (wire form, created: False for an existing job
        under the same Idempotency-Key). Raises RequestError (409: same key, other body)."""
        ...

    async def adopt(self, endpoint: str, inputs: list[Any], work: Awaitable[list[Any]], *,
                    tenant: str, priority: Priority, idempotency_key: str | None
                    ) -> tuple[dict[str, Any], bool]:
        """As `submit`, for a request whose work is already under way (`Pending.adopt`):
        the job records `work`'s results instead of running the inputs again. A queue that
        cannot adopt submits the inputs as a new job."""
        ...

    async def find(self, endpoint: str, inputs: list[Any], *, tenant: str,
                   idempotency_key: str) -> dict[str, Any] | None:
        """The job stored under `idempotency_key` for this tenant (wire form), None when
        there is none. Raises RequestError (409) when it holds other inputs."""
        ...

    async def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form (``status`` "expired" answers 410), None when unknown or
        another tenant's. Raises Unavailable (503) when the queue cannot be asked now."""
        ...

    def counts(self) -> dict[str, int]:
        """Jobs by state (metrics); cheap and synchronous."""
        ...

    async def refresh(self) -> None:
        """Bring `counts` (and what else the metrics read of the queue) up to date:
        ``/metrics`` awaits it before each scrape. A read of the store, never on the
        event loop."""
        ...


__all__ = ["SYSTEM_CLOCK", "Backend", "BatchListener", "Clock", "Jobs", "Pending",
           "StreamPending", "SystemClock"]
