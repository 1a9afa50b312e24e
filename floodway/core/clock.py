"""The clock everything that waits is written against, and a clock that moves only when told.

    await within(clock, reader(), 30.0)   # reader's result, or TimeoutError after 30 s
    clock = ManualClock()                 # monotonic 0.0, wall 1_700_000_000.0
    clock.advance(0.5)                    # both move; every sleep due by then wakes

`ManualClock` is the test double of `SYSTEM_CLOCK`: the HTTP layer, the job runner and the
local pool wait only through `Clock.sleep`, so a test drives their deadlines, polls and
leases by advancing it, without waiting on real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar


class Clock(Protocol):
    """`monotonic()` for durations and deadlines, `wall()` (unix seconds) for the traffic
    history and stored jobs, and `sleep(seconds)` to wait on that same time (the deadline
    hand-off, a job runner's polls and leases)."""

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


T = TypeVar("T")


async def within(clock: Clock, work: Awaitable[T], timeout_s: float) -> T:
    """`work`'s result, or TimeoutError once `timeout_s` seconds of `clock` have passed
    first (then `work` is cancelled). As `asyncio.wait_for`, on the injected clock.
    Cancelling the caller cancels `work` too."""
    task = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        late = not task.done()
        if late:
            task.cancel()
    if late:
        raise TimeoutError(f"not done within {timeout_s:g} s")
    return task.result()


class ManualClock:
    """A `Clock` whose time moves only by `advance(seconds)`: `monotonic()` starts at
    `monotonic_s`, `wall()` at `wall_s` (unix seconds), and both move together. `sleep`
    returns once the clock has been advanced past its deadline (`sleep(0)` or less: at the
    next turn of the event loop), in deadline order."""

    def __init__(self, *, monotonic_s: float = 0.0, wall_s: float = 1_700_000_000.0):
        self._mono, self._offset_s = monotonic_s, wall_s - monotonic_s
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def wall(self) -> float:
        return self._mono + self._offset_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), wake))
        await wake

    @property
    def sleeping(self) -> int:
        """How many sleeps are waiting (cancelled ones not counted)."""
        return sum(1 for *_, f in self._sleepers if not f.done())

    def next_wake_s(self) -> float | None:
        """The monotonic time of the earliest waiting sleep (None: nobody sleeps)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (>= 0) and wake every sleep due by then. The
        sleepers run at the event loop's next turns, not inside this call."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward, got {seconds!r}")
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)


__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock", "within"]
