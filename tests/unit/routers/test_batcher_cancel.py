"""Cancellation reaches the worker: a batch goes with its items' deadlines, an item whose
caller leaves while it is on a container is named to it (cancel_item), and the items the
worker skipped are counted as dropped, not failed, and leave the service-time fit alone.
Fake containers and a fake clock (tests/unit/routers/test_batcher.py)."""

from __future__ import annotations

import asyncio

import pytest

from floodway.errors import EndpointError
from floodway.routers.batch_item import DROPS
from floodway.routers.batcher import Batcher
from floodway.runtime.protocol import DROPPED_CANCELLED, DROPPED_DEADLINE, ItemError
from tests.unit.routers.test_batcher import T0, FakeClock, FakeSlot, Result, make, run, settle

GONE, LATE = DROPPED_CANCELLED, DROPPED_DEADLINE


def test_the_routers_drop_messages_are_the_workers():
    assert DROPS == {DROPPED_CANCELLED: "cancelled", DROPPED_DEADLINE: "deadline"}


def test_a_batch_goes_with_each_items_seconds_left_to_its_deadline():
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=4, wait_ms=20, clock=clock)
        b.start()
        b.submit("r1", ["a"], deadline_s=T0 + 2.0)
        b.submit("r2", ["b"], deadline_s=T0 + 0.5)
        await clock.advance(0.02)   # wait_ms: the part-filled batch goes
        await b.stop()
        return slot.batches, slot.left_s

    batches, left = run(go())
    assert [i for i, _ in batches[0]] == ["r1:0", "r2:0"]
    assert left[0] == pytest.approx([1.98, 0.48])


def test_an_item_whose_caller_leaves_on_a_container_is_named_to_it_not_one_still_queued():
    async def go():
        slot, clock = FakeSlot("a", slots=1, auto=False), FakeClock()
        b = make([slot], rows=2, clock=clock)
        b.start()
        sent = b.submit("r1", ["a", "b"], deadline_s=T0 + 5)   # a full batch: goes at once
        queued = b.submit("r2", ["c"], deadline_s=T0 + 5)     # no free slot: waits
        await settle()
        sent[1].cancel()
        queued[0].cancel()
        await settle()
        named = list(slot.cancelled)
        slot.pending[0].set_result(Result({"r1:0": "A"}, {"r1:1": GONE}, 1))
        await settle()
        out = await sent[0]
        await b.stop()
        return named, out, dict(b.dropped)

    named, out, dropped = run(go())
    assert named == ["r1:1"]
    assert out == "A"
    assert dropped == {"cancelled_at_worker": 1, "cancelled": 1}


def _skip_run(errors: dict, rows: int, *, cancel: tuple[int, ...] = (), advance_s: float = 0):
    """One batch of four inputs of lengths 1, 2, 3, 9 (r:0 .. r:3) sent to a slot, answered
    with `errors` for the items the worker skipped and outputs for the rest (`rows` ran),
    after cancelling the inputs `cancel` and moving the clock `advance_s`. -> (each input's
    outcome, the batches on_batch saw as (rows, padded tokens), dropped)."""
    async def go():
        slot, clock = FakeSlot("a", auto=False), FakeClock()
        seen = []
        b = Batcher("ep", max_batch_rows=4, wait_ms=0, pick=lambda idle_only=False: slot,
                    clock=clock, cost=len, max_batch_tokens=100,
                    on_batch=lambda r, _s: seen.append((r.rows, r.padded_tokens)))
        clock.batcher = b
        b.start()
        futs = b.submit("r", ["a", "bb", "ccc", "d" * 9], deadline_s=T0 + 1)
        await settle()
        for i in cancel:
            futs[i].cancel()
        await clock.advance(advance_s)
        ids = [i for i, _ in slot.batches[0]]
        outs = {i: v.upper() for i, v in slot.batches[0] if i not in errors}
        slot.pending[0].set_result(Result(outs, errors, rows))
        await settle()
        got = []
        for f in futs:
            try:
                got.append(await f)
            except (asyncio.CancelledError, TimeoutError, EndpointError) as e:
                got.append(type(e).__name__)
        await b.stop()
        return ids, got, seen, dict(b.dropped)
    return run(go())


def test_items_the_worker_skipped_are_dropped_and_the_fit_sees_the_rows_that_ran():
    ids, got, seen, dropped = _skip_run({"r:1": GONE, "r:3": GONE}, 2, cancel=(1, 3))
    assert ids == ["r:0", "r:1", "r:2", "r:3"]
    assert got == ["A", "CancelledError", "CCC", "CancelledError"]
    # Two rows ran, padded to the longest of them (3 tokens), not to the skipped 9.
    assert seen == [(2, 6)]
    assert dropped == {"cancelled_at_worker": 2}


def test_an_item_skipped_past_its_deadline_times_out_and_is_no_endpoint_error():
    ids, got, seen, dropped = _skip_run({"r:0": LATE}, 3, advance_s=1.5)
    assert got == ["TimeoutError", "BB", "CCC", "D" * 9]
    assert seen == [(3, 27)] and dropped == {"deadline_at_worker": 1}


def test_a_batch_whose_items_were_all_skipped_feeds_no_fit():
    errors = {f"r:{i}": GONE for i in range(4)}
    _, got, seen, dropped = _skip_run(errors, 0, cancel=(0, 1, 2, 3))
    assert got == ["CancelledError"] * 4
    assert seen == [] and dropped == {"cancelled_at_worker": 4}


def test_a_skip_event_does_not_answer_its_item_as_a_failure_before_the_batch_ends():
    async def go():
        slot, clock = FakeSlot("a", auto=False), FakeClock()
        b = make([slot], rows=1, clock=clock)
        b.start()
        (fut,) = b.submit("r", ["a"], deadline_s=T0 + 1)
        await settle()
        slot.on_item(ItemError(1, "r:0", LATE))   # the event, as it arrives
        await settle()
        early = fut.done()
        await clock.advance(2)
        slot.pending[0].set_result(Result({}, {"r:0": LATE}, 0))
        await settle()
        with pytest.raises(TimeoutError):
            await fut
        await b.stop()
        return early

    assert run(go()) is False


def test_work_a_job_adopted_on_a_container_is_queued_again_when_skipped_at_the_old_deadline():
    async def go():
        slot, clock = FakeSlot("a", slots=1, auto=False), FakeClock()
        b = make([slot], rows=2, clock=clock)
        b.start()
        futs = b.submit("r", ["a", "b"], deadline_s=T0 + 1)
        await settle()
        extended = b.extend("r", T0 + 60)   # the job's hand-off: both are on the container
        await clock.advance(1.5)
        slot.pending[0].set_result(Result({"r:0": "A"}, {"r:1": LATE}, 1))
        await settle()
        again = slot.batches[1:]
        slot.pending[1].set_result(Result({"r:1": "B"}, {}, 1))
        outs = await asyncio.gather(*futs)
        await b.stop()
        return extended, again, outs, dict(b.dropped)

    extended, again, outs, dropped = run(go())
    assert extended == 2
    assert again == [[("r:1", "b")]]
    assert outs == ["A", "B"] and dropped == {}


def test_through_the_pool_a_caller_who_leaves_has_its_items_in_the_pipe_named(tmp_path):
    """The local path: a Pending whose await is cancelled (the handler's, when its client
    hangs up) withdraws its inputs, naming those on a container to it; the readiness detail
    (which /metrics reads) counts the worker's skips."""
    import floodway as fw
    from tests.unit.runtime.fakes import app_with
    from tests.unit.runtime.test_pool import make_pool

    async def go():
        app = app_with(batching=fw.Batching(max_batch_rows=2, wait_ms=0),
                       route=fw.Route(max_inflight_per_container=2))
        pool, _ = make_pool(app, tmp_path, containers=1)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        running = pool.enqueue("embed", ["a", "b"], timeout_s=30, tenant="t")
        gone = pool.enqueue("embed", ["c", "d"], timeout_s=0.5, tenant="t")
        await settle()
        left = c.left_s
        task = asyncio.ensure_future(gone)
        await settle()
        task.cancel()   # the client hung up
        await settle()
        named = list(c.cancelled)
        first, second = sorted(c.inflight)
        c.answer(first, {i: v.upper() for i, v in c.batch_items[first]})
        skipped = [i for i, _ in c.batch_items[second]]
        c.answer_skipping(second, {}, {i: GONE for i in skipped})
        await settle()
        out = await running
        detail = pool.endpoints["embed"].describe()["queue"]["dropped"]
        await pool.stop()
        return left, named, skipped, out, detail

    left, named, skipped, out, detail = run(go())
    assert left == pytest.approx([0.5, 0.5])   # the second batch's seconds left per item
    assert sorted(named) == sorted(skipped)    # both its items were named to the container
    assert out == ["A", "B"]
    assert detail == {"cancelled_at_worker": 2}
