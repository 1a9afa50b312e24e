"""The work of one request in the local pool: what `Pool.enqueue` returns
(`floodway.core.backend.Pending`; `StreamPending` for a streaming endpoint)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from floodway.codec import dumps
from floodway.core.clock import Clock, within
from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed, StreamEvent
from floodway.errors import EndpointError
from floodway.functions.streams import combine


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


# A stream's events wait in the router until its client reads them. A client that reads
# slower than its stream produces would make the router hold the difference (the worker is
# never slowed down: its sequences run in a batch with others'), so past this many bytes
# unread (the events' JSON) the stream's unfinished inputs are cancelled and it ends with an
# error. 8 MiB is minutes of text at any token rate, and a few seconds of a fast custom
# generator: a client that reads at all never meets it; one that stopped frees its stream.
MAX_UNREAD_BYTES = 8 << 20
# The chunks kept for the inputs' combined outputs (the `output` events, the buffered
# answer, a job's result), per request: the combined output is built from them, so its size
# is the memory it holds. The built-in engine's outputs are far below it (Generation's
# max_new_tokens cap, 32768 tokens, is well under 1 MiB of text); a custom generator that
# streams more fails the input that crossed it with a 413 (type "too_large").
MAX_OUTPUT_BYTES = 32 << 20
_MIB = 1 << 20


def _size(data: Any) -> int:
    """A chunk's bytes as JSON (what its event costs the router)."""
    try:
        return len(dumps(data))
    except (TypeError, ValueError):
        return len(repr(data))


class StreamPending:
    """The work of one request to a streaming endpoint (`floodway.core.backend.
    StreamPending`): its inputs' events in arrival order (`next_event`), or, awaited, one
    combined output per input (`floodway.functions.streams.combine`) or the exception that
    failed it.

    Deadlines, on `clock`, enforced by a watchdog task (whether anyone reads or not): each
    input must produce its first chunk (or end) within `timeout_s` of the request's queueing,
    else it is cancelled and fails with TimeoutError; from its first chunk it may stream for
    `max_stream_s` (the endpoint's `Generation.max_stream_s`, as configured: it may be
    shorter than `timeout_s`). An adopted request (`adopt`, a job took it over) keeps no
    client deadline: an input with no chunk yet gets `max_stream_s` from the adoption for
    its first one, and then `max_stream_s` from it as well.

    Memory: past `max_unread_bytes` of events its reader has not read, every unfinished
    input is cancelled (type "slow_client"); past `max_output_bytes` of chunks kept for the
    combined outputs, the input that crossed it fails with a 413 (type "too_large"; see
    `MAX_UNREAD_BYTES`, `MAX_OUTPUT_BYTES`). Once adopted, no events are kept (nobody reads
    them): only the chunks for the outputs.

    `on_chunk(index, data)` is the batcher's chunk listener (`Batcher.submit`); `attach`
    gives the batcher's futures (resolved to None at an input's end) and starts the
    watchdog (call it on the event loop)."""

    def __init__(self, endpoint: str, count: int, *, clock: Clock, timeout_s: float,
                 max_stream_s: float, max_unread_bytes: int = MAX_UNREAD_BYTES,
                 max_output_bytes: int = MAX_OUTPUT_BYTES):
        self.endpoint, self.clock = endpoint, clock
        self.timeout_s, self.max_stream_s = timeout_s, max_stream_s
        self.max_unread_bytes, self.max_output_bytes = max_unread_bytes, max_output_bytes
        self.t0_s = clock.monotonic()
        self.futures: list[asyncio.Future] = []
        self.chunks: list[list[Any]] = [[] for _ in range(count)]
        self.started_s: list[float | None] = [None] * count   # each input's first chunk
        self.unread_bytes = self.kept_bytes = 0
        self.adopted = False
        self._adopted_s = 0.0
        self._kept = [0] * count
        self._outputs: dict[int, Any] = {}
        self._events: asyncio.Queue[tuple[StreamEvent, int]] = asyncio.Queue()
        self._ended = 0
        self._why: dict[int, Exception] = {}   # index -> why we cancelled it
        self._dispatched: Callable[[], bool] = lambda: False
        self._keep: Callable[[], object] | None = None
        self._changed = asyncio.Event()   # a deadline moved, or an input ended
        self._watchdog: asyncio.Future | None = None

    def attach(self, futures: list[asyncio.Future], dispatched: Callable[[], bool],
               keep: Callable[[], object] | None = None) -> None:
        self.futures, self._dispatched, self._keep = futures, dispatched, keep
        for i, f in enumerate(futures):
            f.add_done_callback(functools.partial(self._end, i))
        self._watchdog = asyncio.ensure_future(self._watch())

    # ------------------------------------------------------------------ events
    def on_chunk(self, index: int, data: Any) -> None:
        if index in self._why:
            return   # cancelled here: its late chunks reach no one
        size, now = _size(data), self.clock.monotonic()
        if self.started_s[index] is None:
            self.started_s[index] = now
            self._changed.set()   # its deadline is now max_stream_s from here
        if self.kept_bytes + size > self.max_output_bytes:
            self._cancel(index, EndpointError(
                f"endpoint {self.endpoint!r}: inputs[{index}]: the outputs of this request "
                f"are over the router's limit of {self.max_output_bytes / _MIB:g} MiB",
                status=413, field=f"inputs[{index}]", kind="too_large"))
            return
        self.chunks[index].append(data)
        self._kept[index] += size
        self.kept_bytes += size
        if self.adopted:
            return   # a job's: nobody reads its events
        self.unread_bytes += size
        self._events.put_nowait((ChunkEvent(index, data, now), size))
        if self.unread_bytes > self.max_unread_bytes:
            why = EndpointError(
                f"endpoint {self.endpoint!r}: the client read slower than the stream "
                f"produced: {self.unread_bytes / _MIB:.1f} MiB unread (the limit is "
                f"{self.max_unread_bytes / _MIB:g} MiB); the stream was stopped",
                status=400, kind="slow_client")
            for i, f in enumerate(self.futures):
                if not f.done():
                    self._cancel(i, why)

    def _end(self, index: int, fut: asyncio.Future) -> None:
        self._ended += 1
        out = self._outputs[index] = self._result(index)
        self.kept_bytes -= self._kept[index]   # combined now (or failed): chunks not needed
        self._kept[index], self.chunks[index] = 0, []
        self._changed.set()
        if self.adopted:
            return
        self._events.put_nowait((ItemFailed(index, out) if isinstance(out, Exception)
                                 else ItemEnd(index, out), 0))

    def dispatched(self) -> bool:
        return self._dispatched()

    async def next_event(self) -> StreamEvent | None:
        """The next event (a chunk, an input's end or failure); None once every input
        ended and its events were read."""
        if self._events.empty() and self._ended >= len(self.futures):
            return None
        ev, size = await self._events.get()
        self.unread_bytes -= size
        return ev

    # ------------------------------------------------------------------ deadlines
    def _deadline_s(self, index: int) -> float:
        """When input `index` is stopped, on the clock (see the class)."""
        started = self.started_s[index]
        if started is not None:
            return started + self.max_stream_s
        if self.adopted:
            return self._adopted_s + self.max_stream_s
        return self.t0_s + self.timeout_s

    async def _watch(self) -> None:
        """Stop each input at its deadline, read or not; returns once every input ended."""
        while True:
            live = [i for i, f in enumerate(self.futures)
                    if not f.done() and i not in self._why]
            if not live:
                return
            now = self.clock.monotonic()
            due = min(self._deadline_s(i) for i in live)
            if due <= now:
                self._expire(live, now)
                continue
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self.clock, self._changed.wait(), due - now)

    def _expire(self, live: list[int], now: float) -> None:
        for i in live:
            if now < self._deadline_s(i):
                continue
            if self.started_s[i] is not None:
                why = f"the stream ran past max_stream_s ({self.max_stream_s:g} s)"
            elif self.adopted:
                why = (f"no first chunk within max_stream_s ({self.max_stream_s:g} s) of "
                       "its hand-off to a job")
            else:
                why = (f"no first chunk within {self.timeout_s:g} s; the request's deadline "
                       "(its X-Deadline-Ms header, else the endpoint's Route.timeout_s) bounds "
                       "the time to the first chunk (after it, the stream may run for "
                       "Generation.max_stream_s): send a larger X-Deadline-Ms")
            self._cancel(i, TimeoutError(f"endpoint {self.endpoint!r}: {why}"))

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
                    if isinstance(ev.error, TimeoutError) and self.started_s[ev.index] is None:
                        raise ev.error
                    out[ev.index] = ev.error
        finally:
            if not self.adopted:
                self.cancel()   # no-op for finished ones
        return out

    def adopt(self) -> asyncio.Task:
        """Keep the inputs past the client's deadline: a task with their results (one
        combined output or exception each), for a job that takes the request over. Each
        input still ends by its `max_stream_s` (see the class)."""
        self.adopted, self._adopted_s = True, self.clock.monotonic()
        self._drop_events()
        self._changed.set()
        if self._keep is not None:
            self._keep()

        async def results() -> list[Any]:
            await asyncio.wait(self.futures)
            return [self._result(i) for i in range(len(self.futures))]
        return asyncio.ensure_future(results())

    def _drop_events(self) -> None:
        """Adopted: the events no one will read go (their chunks stay for the outputs)."""
        while not self._events.empty():
            self._events.get_nowait()
        self.unread_bytes = 0

    def _result(self, index: int) -> Any:
        """A finished input's combined output, or the exception that ended it."""
        if index in self._outputs:
            return self._outputs[index]
        f = self.futures[index]
        if f.cancelled():
            return self._why.get(index) or EndpointError(
                f"endpoint {self.endpoint!r}: input {index} was cancelled")
        return f.exception() or combine(self.chunks[index])


__all__ = ["MAX_OUTPUT_BYTES", "MAX_UNREAD_BYTES", "Pending", "StreamPending", "wait_results"]
