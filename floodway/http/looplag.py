"""How late the router's event loop runs, and its garbage-collection pauses.

A task asks to wake every `interval_s`; how much later than asked it woke is the lag every
callback due then also saw (a timer, a ready socket, a finished SQLite write on a thread).
`recent_s()` is the largest lag of the last `window_s`: the hand-off fires that much
earlier, and admission treats it as overload (`floodway.routers.decide`'s `loop_lag_s`).
Collections of the cyclic garbage collector are timed through `gc.callbacks`; they stall
the loop too and show in the lag, the pause histogram says which part they were.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

# 10 ms: a lag worth a hand-off margin is tens of milliseconds; waking 100 times a second
# costs the router about 0.2 % of a core.
INTERVAL_S = 0.010
# Lag comes in bursts (a spike's arrivals, a batch of answers): remember the worst of the
# last seconds, not only the last sample.
WINDOW_S = 2.0


class LoopLag:
    """The event loop's lag (see the module doc). `observe(lag_s)` and `gc_pause(generation,
    seconds)` are called for every sample and collection (the metrics' histograms);
    `clock` and `sleep` are the loop's (injectable for tests)."""

    def __init__(self, *, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S,
                 observe: Callable[[float], None] | None = None,
                 gc_pause: Callable[[int, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.interval_s, self.window_s, self.clock, self.sleep = interval_s, window_s, clock, sleep
        self.observe, self.on_gc = observe, gc_pause
        self._samples: deque[tuple[float, float]] = deque()   # (when, lag), maxima kept
        self._task: asyncio.Task | None = None
        self._gc_t0 = 0.0

    def record(self, lag_s: float, now_s: float | None = None) -> None:
        """Note a lag sample of `lag_s` seconds taken at `now_s` (default: the clock)."""
        now = self.clock() if now_s is None else now_s
        lag = max(0.0, lag_s)
        # A monotone deque: a sample older and smaller than a newer one never is the max.
        while self._samples and self._samples[-1][1] <= lag:
            self._samples.pop()
        self._samples.append((now, lag))
        if self.observe is not None:
            self.observe(lag)

    def recent_s(self, now_s: float | None = None) -> float:
        """The largest lag of the last `window_s` seconds (0 with none)."""
        now = self.clock() if now_s is None else now_s
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        return self._samples[0][1] if self._samples else 0.0

    def start(self) -> None:
        """Start sampling on the running loop and timing collections (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        if self._gc_callback not in gc.callbacks:
            gc.callbacks.append(self._gc_callback)

    async def stop(self) -> None:
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            asked = self.clock() + self.interval_s
            await self.sleep(self.interval_s)
            now = self.clock()
            self.record(now - asked, now)

    def _gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self.on_gc is not None:
            self.on_gc(int(info.get("generation", 0)), time.perf_counter() - self._gc_t0)


__all__ = ["INTERVAL_S", "WINDOW_S", "LoopLag"]
