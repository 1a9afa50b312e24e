"""The deadline hand-off on its own: a manual clock, a scripted `Pending` and a future for the
client's disconnect."""

from __future__ import annotations

import asyncio

import pytest

from floodway.core.clock import ManualClock
from floodway.errors import Unavailable
from floodway.http.errors import ClientClosed
from floodway.http.handoff import DeadlineHandoff, HandOff, Way
from tests.app.scripted import ScriptedPending, settle


async def forever() -> list:
    await asyncio.Event().wait()
    return []


async def answer(value):
    if isinstance(value, BaseException):
        raise value
    return value


@pytest.mark.parametrize(("budget_s", "after_s"), [
    (2.0, 1.9), (0.5, 0.45), (1.0, 0.9), (0.05, 0.045), (0.0, 0.0),
])
def test_hand_off_time_leaves_a_margin_of_at_most_a_tenth(budget_s, after_s):
    assert DeadlineHandoff(ManualClock()).after_s(budget_s) == pytest.approx(after_s)


def run(work, *, dispatched=False, may_hand_off=True, advance_s=0.0, leave=False,
        budget_s=0.5):
    """What `wait` gives (or raises) for `work`, the pending it waited on, and whether the
    work was cancelled (seen before the event loop closes, which cancels what is left)."""
    clock = ManualClock()

    async def go():
        pending = ScriptedPending(work, clock=clock, timeout_s=budget_s, dispatched=dispatched)
        gone = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(DeadlineHandoff(clock).wait(
            pending, gone, budget_s=budget_s, may_hand_off=may_hand_off))
        await settle()
        if leave:
            gone.set_result(None)
        clock.advance(advance_s)
        try:
            got = await waiting
        except Exception as e:   # noqa: BLE001 - returned for the test to look at
            got = e
        await settle()
        return got, pending, pending._work.cancelled()

    return asyncio.run(go())


def test_work_done_in_time_gives_its_results():
    got, _, _ = run(answer(["A", "B"]))
    assert got == ["A", "B"]


def test_queued_work_near_its_deadline_is_withdrawn_and_submitted_as_a_job():
    got, _, cancelled = run(forever(), advance_s=0.47)
    assert got == HandOff(Way.SUBMIT) and got.work is None
    assert cancelled   # its queued inputs were withdrawn


def test_work_on_a_container_near_its_deadline_is_adopted():
    got, pending, cancelled = run(forever(), dispatched=True, advance_s=0.47)
    assert isinstance(got, HandOff) and got.way == Way.ADOPT
    assert got.work is pending._work and pending.adopted
    assert not cancelled   # the job takes it over: it keeps running


def test_not_yet_at_the_hand_off_time_it_keeps_waiting():
    clock = ManualClock()

    async def go():
        pending = ScriptedPending(forever(), clock=clock, timeout_s=0.5)
        waiting = asyncio.ensure_future(DeadlineHandoff(clock).wait(
            pending, asyncio.get_running_loop().create_future(), budget_s=0.5,
            may_hand_off=True))
        await settle()
        clock.advance(0.44)   # the hand-off is at 0.45 s of a 0.5 s budget
        await settle()
        early = waiting.done()
        clock.advance(0.02)
        return early, await waiting

    early, got = asyncio.run(go())
    assert not early and got == HandOff(Way.SUBMIT)


def test_without_async_spill_the_deadline_is_a_timeout():
    got, _, cancelled = run(forever(), may_hand_off=False, advance_s=0.5)
    assert isinstance(got, TimeoutError) and cancelled


def test_a_queue_deadline_that_fired_first_is_handed_off_as_a_new_job():
    got, _, _ = run(answer(TimeoutError("deadline passed while queued")))
    assert got == HandOff(Way.SUBMIT)
    got, _, _ = run(answer(TimeoutError("deadline passed while queued")), may_hand_off=False)
    assert isinstance(got, TimeoutError)


def test_a_client_that_leaves_withdraws_the_work():
    got, _, cancelled = run(forever(), leave=True)
    assert isinstance(got, ClientClosed) and cancelled


def test_what_the_work_raised_is_raised():
    got, _, _ = run(answer(Unavailable("not started")))
    assert isinstance(got, Unavailable)


def test_the_hand_off_fires_earlier_by_twice_the_lag_read_as_it_waits():
    """The lag is read again at each wake-up: a lag that grows while the request waits
    moves its hand-off earlier."""
    clock = ManualClock()
    lag = [0.0]

    async def go():
        pending = ScriptedPending(forever(), clock=clock, timeout_s=2.0)
        gone = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(DeadlineHandoff(clock, lag=lambda: lag[0]).wait(
            pending, gone, budget_s=2.0, may_hand_off=True))
        await settle()
        clock.advance(1.0)           # at 1.0 s: not yet (fires at 1.9 s without lag)
        await settle()
        assert not waiting.done()
        lag[0] = 0.3                 # due at 1.9 - 0.6 = 1.3 s: seen at its next wake-up
        clock.advance(0.5)           # 1.5 s, before the 1.9 s it was due at without lag
        await settle()
        assert waiting.done()
        return await waiting

    assert isinstance(asyncio.run(go()), HandOff)
    assert DeadlineHandoff(ManualClock()).after_s(2.0, lag_s=0.3) == pytest.approx(1.3)
