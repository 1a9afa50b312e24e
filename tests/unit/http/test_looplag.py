"""The event-loop lag: the worst of a window, the sampling task on a real loop that is made
to stall, and garbage-collection pauses timed."""

from __future__ import annotations

import asyncio
import gc

import pytest

from floodway.http.looplag import LoopLag


def test_recent_is_the_largest_lag_of_the_window_and_forgets_older_ones():
    lag = LoopLag(window_s=2.0, clock=lambda: 0.0)
    lag.record(0.010, 0.0)
    lag.record(0.300, 0.5)
    lag.record(0.020, 1.0)
    assert lag.recent_s(1.0) == 0.300
    assert lag.recent_s(2.4) == 0.300
    assert lag.recent_s(2.6) == 0.020      # the 0.3 s sample left the window
    assert lag.recent_s(10.0) == 0.0
    lag.record(-1.0, 11.0)                  # a clock step back is no negative lag
    assert lag.recent_s(11.0) == 0.0


def test_a_stalled_loop_shows_as_lag_and_each_sample_is_observed():
    """A fake loop clock: each sleep returns `stalls[k]` later than asked."""
    seen: list[float] = []
    now = [0.0]
    stalls = [0.0, 0.001, 0.2, 0.003]

    async def sleep(s: float) -> None:
        now[0] += s + (stalls.pop(0) if stalls else 0.0)
        await asyncio.sleep(0)

    async def go() -> float:
        lag = LoopLag(observe=seen.append, clock=lambda: now[0], sleep=sleep)
        lag.start()
        while stalls:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        worst = lag.recent_s()
        await lag.stop()
        return worst

    assert asyncio.run(go()) == pytest.approx(0.2)
    assert seen[:4] == pytest.approx([0.0, 0.001, 0.2, 0.003])


def test_collections_are_timed_by_generation():
    pauses: list[tuple[int, float]] = []

    async def go() -> None:
        lag = LoopLag(gc_pause=lambda gen, s: pauses.append((gen, s)))
        lag.start()
        gc.collect(2)
        await lag.stop()
        gc.collect(2)                # after stop: not timed

    asyncio.run(go())
    assert [g for g, _ in pauses] == [2] and pauses[0][1] >= 0
