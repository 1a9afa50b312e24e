"""The clocks: `SYSTEM_CLOCK` is a `Clock`; `ManualClock` and `within`: time moves only when
told, sleepers wake in deadline order."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from floodway.core.clock import SYSTEM_CLOCK, Clock, ManualClock, within
from tests.app.scripted import settle


def test_time_moves_only_when_advanced_and_both_clocks_together():
    clock = ManualClock(monotonic_s=5.0, wall_s=1000.0)
    assert (clock.monotonic(), clock.wall()) == (5.0, 1000.0)
    clock.advance(2.5)
    assert (clock.monotonic(), clock.wall()) == (7.5, 1002.5)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_sleepers_wake_in_deadline_order_once_due():
    clock = ManualClock()
    woke: list[str] = []

    async def sleeper(name: str, seconds: float):
        await clock.sleep(seconds)
        woke.append(name)

    async def go():
        tasks = [asyncio.ensure_future(sleeper(n, s)) for n, s in
                 [("late", 3.0), ("early", 1.0), ("mid", 2.0), ("now", 0.0)]]
        await settle()
        assert woke == ["now"] and clock.sleeping == 3 and clock.next_wake_s() == 1.0
        clock.advance(1.5)
        await settle()
        assert woke == ["now", "early"]
        clock.advance(10)
        await asyncio.gather(*tasks)

    asyncio.run(go())
    assert woke == ["now", "early", "mid", "late"]


def test_a_cancelled_sleep_is_forgotten():
    clock = ManualClock()

    async def go():
        task = asyncio.ensure_future(clock.sleep(1.0))
        await settle()
        task.cancel()
        await settle()
        return clock.sleeping, clock.next_wake_s()

    assert asyncio.run(go()) == (0, None)


def test_within_gives_the_result_or_times_out_on_the_clock():
    clock = ManualClock()

    async def go():
        quick = await within(clock, asyncio.sleep(0, result="done"), 1.0)
        never = asyncio.Event()
        waiting = asyncio.ensure_future(within(clock, never.wait(), 1.0))
        await settle()
        clock.advance(0.9)
        await settle()
        still = not waiting.done()
        clock.advance(0.2)
        with pytest.raises(TimeoutError):
            await waiting
        return quick, still

    assert asyncio.run(go()) == ("done", True)


def test_within_passes_on_what_the_work_raised():
    async def go():
        async def boom():
            raise KeyError("x")
        await within(ManualClock(), boom(), 1.0)

    with pytest.raises(KeyError):
        asyncio.run(go())


def test_the_system_clock_is_a_clock():
    for name in ("monotonic", "wall", "sleep"):
        assert inspect.signature(getattr(type(SYSTEM_CLOCK), name)) == \
            inspect.signature(getattr(Clock, name))
    assert inspect.iscoroutinefunction(type(SYSTEM_CLOCK).sleep)
