"""The work of one request in the local pool: what `Pool.enqueue` returns
(`floodway.http.protocols.Pending`; `StreamPending` for a streaming endpoint)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from floodway.errors import EndpointError
from floodway.functions.streams import combine
from floodway.http.clock import within
from floodway.http.protocols import Clock
from floodway.http.streaming import ChunkEvent, ItemEnd, ItemFailed, StreamEvent


class Pending:
    """Await it for the results (at most its timeout: then its inputs are withdrawn).
    `dispatched()` is True once any input has left the router's queue for a container.
    `adopt()` keeps the inputs past that timeout: a task with one result (output or
    exception) per input, for a job that takes the request over.

    `futures`: one per input (the batcher's); `wait(pending)`: the coroutine that the await
    runs (`wait_results`), given this object so that it can tell whether it was adopted;
    made when awaited, so that a Pending dropped unawaited leaves no coroutine behind.
    `keep()`: called on adoption to lift the client's deadline from the inputs still queued
    (`Batcher.extend`)."""

    def __init__(self, futures: list[asyncio.Future], dispatched: Callable[[], bool],
                 wait: Callable[[Pending], Awaitable[list[Any]]],
                 keep: Callable[[], object] | None = None):
        self.futures, self.dispatched, self.adopted = futures, dispatched, False
        self._wait, self._keep = wait, keep

    def __await__(self):
        return self._wait(self).__await__()

    def adopt(self) -> asyncio.Task:
        self.adopted = True
        if self._keep is not None:
            # Inputs still queued must not be dropped at the client's deadline: the job
            # would then run them again (at least once, but not twice).
            self._keep()

        async def results() -> list[Any]:
            await asyncio.wait(self.futures)
            return [f.exception() or f.result() for f in self.futures]
        return asyncio.ensure_future(results())


async def wait_results(endpoint: str, futures: list[asyncio.Future], timeout_s: float,
                       owner: Pending | None = None) -> list[Any]:
    """One entry per future: its output, or the exception that failed that input alone.

    Raises TimeoutError when `timeout_s` passes first (or an input's deadline passed while it
    was queued). Unless `owner` was adopted meanwhile, the inputs still queued are withdrawn
    on the way out (also when the await is cancelled)."""
    try:
        done, pending = await asyncio.wait(futures, timeout=timeout_s)
    finally:
        if owner is None or not owner.adopted:
            for f in futures:
                f.cancel()   # no-op for finished ones; withdraws queued ones
    if pending or any(isinstance(f.exception(), TimeoutError) for f in futures):
        raise TimeoutError(f"endpoint {endpoint!r} missed the deadline of {timeout_s:g}s")
    return [f.exception() or f.result() for f in futures]


class StreamPending:
    """The work of one request to a streaming endpoint (`floodway.http.protocols.
    StreamPending`): its inputs' events in arrival order (`next_event`), or, awaited, one
    combined output per input (`floodway.functions.streams.combine`) or the exception that
    failed it.

    Deadlines, on `clock` from when the request was queued: each input must produce its
    first chunk (or end) within `timeout_s`, else it is cancelled and fails with
    TimeoutError; once it streams, it may run until `max_stream_s`. They are enforced while
    someone reads the events (or awaits); an adopted request keeps no client deadline.
    `on_chunk(index, data)` is the batcher's chunk listener (`Batcher.submit`); `attach`
    gives the batcher's futures (resolved to None at an input's end)."""

    def __init__(self, endpoint: str, count: int, *, clock: Clock, timeout_s: float,
                 max_stream_s: float):
        self.endpoint, self.clock = endpoint, clock
        self.timeout_s, self.max_stream_s = timeout_s, max(timeout_s, max_stream_s)
        self.t0_s = clock.monotonic()
        self.futures: list[asyncio.Future] = []
        self.chunks: list[list[Any]] = [[] for _ in range(count)]
        self.adopted = False
        self._events: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._ended = 0
        self._why: dict[int, Exception] = {}   # index -> why we cancelled it
        self._dispatched: Callable[[], bool] = lambda: False
        self._keep: Callable[[], object] | None = None

    def attach(self, futures: list[asyncio.Future], dispatched: Callable[[], bool],
               keep: Callable[[], object] | None = None) -> None:
        self.futures, self._dispatched, self._keep = futures, dispatched, keep
        for i, f in enumerate(futures):
            f.add_done_callback(functools.partial(self._end, i))

    # ------------------------------------------------------------------ events
    def on_chunk(self, index: int, data: Any) -> None:
        self.chunks[index].append(data)
        self._events.put_nowait(ChunkEvent(index, data, self.clock.monotonic()))

    def _end(self, index: int, fut: asyncio.Future) -> None:
        self._ended += 1
        out = self._result(index)
        self._events.put_nowait(ItemFailed(index, out) if isinstance(out, BaseException)
                                else ItemEnd(index, out))

    def dispatched(self) -> bool:
        return self._dispatched()

    async def next_event(self) -> StreamEvent | None:
        """The next event (a chunk, an input's end or failure); None once every input
        ended and its events were read."""
        while True:
            if not self._events.empty():
                return self._events.get_nowait()
            if self._ended >= len(self.futures):
                return None
            try:
                return await within(self.clock, self._events.get(), self._wait_s())
            except TimeoutError:
                self._expire()

    def _wait_s(self) -> float:
        """Seconds to the next deadline: an input's first chunk, else the stream's end."""
        waiting = any(not f.done() and not self.chunks[i] for i, f in enumerate(self.futures))
        limit = self.timeout_s if waiting else self.max_stream_s
        return max(0.0, self.t0_s + limit - self.clock.monotonic())

    def _expire(self) -> None:
        now = self.clock.monotonic() - self.t0_s
        for i, f in enumerate(self.futures):
            if f.done():
                continue
            if not self.chunks[i] and now >= self.timeout_s:
                self._cancel(i, TimeoutError(f"endpoint {self.endpoint!r}: no first chunk "
                                             f"within {self.timeout_s:g} s"))
            elif now >= self.max_stream_s:
                self._cancel(i, TimeoutError(f"endpoint {self.endpoint!r}: the stream ran "
                                             f"past max_stream_s ({self.max_stream_s:g} s)"))

    def _cancel(self, index: int, why: Exception) -> None:
        self._why[index] = why
        self.futures[index].cancel()   # queued: withdrawn; on a container: Cancel

    def cancel(self) -> int:
        """Stop every unfinished input (the client left) -> how many were."""
        n = 0
        for f in self.futures:
            n += f.cancel()
        return n

    # ------------------------------------------------------------------ whole answers
    def __await__(self):
        return self._results().__await__()

    async def _results(self) -> list[Any]:
        """One combined output (or exception) per input. Raises TimeoutError when an input
        produced no first chunk in time (the others are then stopped too)."""
        out: list[Any] = [None] * len(self.chunks)
        try:
            while (ev := await self.next_event()) is not None:
                if isinstance(ev, ItemEnd):
                    out[ev.index] = ev.output
                elif isinstance(ev, ItemFailed):
                    if isinstance(ev.error, TimeoutError) and not self.chunks[ev.index]:
                        raise ev.error
                    out[ev.index] = ev.error
        finally:
            if not self.adopted:
                self.cancel()   # no-op for finished ones
        return out

    def adopt(self) -> asyncio.Task:
        """Keep the inputs past the client's deadline: a task with their results (one
        combined output or exception each), for a job that takes the request over."""
        self.adopted = True
        if self._keep is not None:
            self._keep()

        async def results() -> list[Any]:
            await asyncio.wait(self.futures)
            return [self._result(i) for i in range(len(self.futures))]
        return asyncio.ensure_future(results())

    def _result(self, index: int) -> Any:
        """A finished input's combined output, or the exception that ended it."""
        f = self.futures[index]
        if f.cancelled():
            return self._why.get(index) or EndpointError(
                f"endpoint {self.endpoint!r}: input {index} was cancelled")
        return f.exception() or combine(self.chunks[index])


__all__ = ["Pending", "StreamPending", "wait_results"]
