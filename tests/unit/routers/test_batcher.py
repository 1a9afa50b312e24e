"""The dynamic batcher against fake containers (asyncio only, no processes), on a fake clock:
time moves only when a test advances it, and the loop runs at `asyncio.sleep(0)` yields."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from floodway.core.snapshot import QueueLoad
from floodway.errors import EndpointError, Unavailable
from floodway.routers.batcher import Batcher

T0 = 1000.0


@dataclass
class Result:
    outputs: dict
    errors: dict
    rows: int
    compute_s: float = 0.0


class FakeSlot:
    """A container with `slots` slots; each batch is answered when the test says so, or at
    once (`auto`) by upper-casing its items, reversed so that order cannot carry the mapping."""

    def __init__(self, cid: str, slots: int = 1, auto: bool = True):
        self.id, self.slots, self.auto = cid, slots, auto
        self.batches: list[list[tuple[str, str]]] = []
        self.left_s: list[list[float] | None] = []   # each batch's seconds left per item
        self.cancelled: list[str] = []               # items named by cancel_item
        self.pending: list[asyncio.Future] = []
        self.dead = False

    @property
    def free(self) -> int:
        return 0 if self.dead else self.slots - sum(1 for f in self.pending if not f.done())

    def submit(self, items, on_item=None, left_s=None):
        if self.free <= 0:
            raise Unavailable("no slot")
        self.batches.append(list(items))
        self.left_s.append(None if left_s is None else list(left_s))
        self.on_item = on_item
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        if self.auto:
            outs = {i: v.upper() for i, v in reversed(items) if v != "bad"}
            errs = {i: "ValueError: bad" for i, v in items if v == "bad"}
            fut.set_result(Result(outs, errs, len(items)))
        return fut

    def cancel_item(self, item_id: str) -> bool:
        self.cancelled.append(item_id)
        return True


class FakeClock:
    """Seconds that move only on `advance`, which also wakes the batcher (as a timer would)."""

    def __init__(self, t: float = T0):
        self.t = t
        self.batcher: Batcher | None = None

    def __call__(self) -> float:
        return self.t

    async def advance(self, dt: float) -> None:
        self.t += dt
        if self.batcher:
            self.batcher.notify()
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let every task run until it waits on something (no wall-clock time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def make(slots: list[FakeSlot], rows: int = 4, wait_ms: float = 20,
         clock: FakeClock | None = None) -> Batcher:
    def pick(idle_only=False):
        free = [s for s in slots if s.free > 0 and not (idle_only and s.free < s.slots)]
        return free[0] if free else None
    clock = clock or FakeClock()
    b = Batcher("ep", max_batch_rows=rows, wait_ms=wait_ms, pick=pick, clock=clock)
    clock.batcher = b
    return b


def run(coro):
    # The timeout only guards against a hung test; nothing waits on it.
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_batches_by_rows_across_requests_and_maps_by_id():
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=4, clock=clock)
        b.start()
        reqs = [b.submit(f"r{i}", [f"x{i}", f"y{i}"], deadline_s=T0 + 5) for i in range(3)]
        await settle()
        first = [len(x) for x in slot.batches]      # a full batch goes at once
        await clock.advance(0.02)                   # the rest after wait_ms
        outs = [await asyncio.gather(*fs) for fs in reqs]
        await b.stop()
        return outs, first, slot.batches

    outs, first, batches = run(go())
    assert outs == [["X0", "Y0"], ["X1", "Y1"], ["X2", "Y2"]]
    assert first == [4]
    assert [len(x) for x in batches] == [4, 2]   # rows, not requests; a request split


def test_on_send_sees_each_batch_as_it_goes_to_a_container():
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=4, clock=clock)
        seen = []
        b.on_send = lambda s: seen.append((s.id, len(s.batches)))   # after submit
        b.start()
        fs = b.submit("r", list("abcdef"), deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.02)
        await asyncio.gather(*fs)
        await b.stop()
        return seen

    assert run(go()) == [("a", 1), ("a", 2)]


def test_a_bad_item_fails_alone():
    async def go():
        clock = FakeClock()
        b = make([FakeSlot("a")], clock=clock)
        b.start()
        fs = b.submit("r", ["a", "bad", "c"], deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.02)
        res = await asyncio.gather(*fs, return_exceptions=True)
        await b.stop()
        return res

    a, bad, c = run(go())
    assert (a, c) == ("A", "C")
    assert isinstance(bad, EndpointError) and "ValueError: bad" in str(bad)


def test_waits_wait_ms_for_more_rows_then_sends_a_part_filled_batch():
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=32, wait_ms=30, clock=clock)
        b.start()
        (f,) = b.submit("r", ["a"], deadline_s=T0 + 5)
        await settle()
        at_once = len(slot.batches)
        await clock.advance(0.029)
        before = len(slot.batches)                   # still within wait_ms
        await clock.advance(0.001)
        out = await f
        await b.stop()
        return at_once, before, out, slot.batches

    at_once, before, out, batches = run(go())
    assert (at_once, before) == (0, 0)
    assert out == "A" and batches == [[("r:0", "a")]]


def test_a_full_batch_does_not_wait():
    async def go():
        slot = FakeSlot("a")
        b = make([slot], rows=2, wait_ms=1000)
        b.start()
        fs = b.submit("r", ["a", "b"], deadline_s=T0 + 5)
        await settle()                                # no clock advance at all
        out = [f.result() for f in fs if f.done()]
        await b.stop()
        return out

    assert run(go()) == ["A", "B"]


def test_expired_and_withdrawn_items_never_reach_a_container():
    async def go():
        slot, clock = FakeSlot("a", auto=False), FakeClock()
        b = make([slot], rows=2, wait_ms=0, clock=clock)
        b.start()
        first = b.submit("busy", ["a"], deadline_s=T0 + 5)
        await settle()                                  # the only slot is now taken
        short = b.submit("short", ["b"], deadline_s=T0 + 0.05)
        gone = b.submit("gone", ["c"], deadline_s=T0 + 5)
        assert b.queued == 2 and b.queued_rows == 2
        gone[0].cancel()                                # the client hung up
        await asyncio.sleep(0)                          # done callbacks run on the loop
        assert b.queued == 1 and b.tenant_queued() == {"anonymous": 1}
        await clock.advance(0.04)
        assert not short[0].done()                      # its deadline has not passed
        await clock.advance(0.06)
        slot.pending[0].set_result(Result({"busy:0": "A"}, {}, 1))
        with pytest.raises(TimeoutError):
            await short[0]
        await first[0]
        await b.stop()
        return slot.batches, dict(b.dropped)

    batches, dropped = run(go())
    assert batches == [[("busy:0", "a")]]
    assert dropped == {"deadline": 1, "cancelled": 1}


def test_batch_lost_with_its_container_is_retried_once_elsewhere():
    async def go():
        dying, healthy = FakeSlot("dying", auto=False), FakeSlot("healthy")
        healthy.dead = True                             # not ready yet
        b = make([dying, healthy], rows=4, wait_ms=0)
        b.start()
        fs = b.submit("r", ["a", "b"], deadline_s=T0 + 5)
        await settle()
        dying.dead, healthy.dead = True, False
        dying.pending[0].set_exception(Unavailable("container died"))
        b.notify()
        out = await asyncio.gather(*fs)
        await b.stop()
        return out, dying.batches, healthy.batches

    out, lost, retried = run(go())
    assert out == ["A", "B"] and len(lost) == 1 and len(retried) == 1


def test_second_loss_fails_with_unavailable():
    async def go():
        slot = FakeSlot("a", auto=False)
        b = make([slot], rows=4, wait_ms=0)
        b.start()
        (f,) = b.submit("r", ["a"], deadline_s=T0 + 5)
        for _ in range(2):
            await settle()
            assert slot.pending and not slot.pending[-1].done()
            slot.pending[-1].set_exception(Unavailable("died again"))
        with pytest.raises(Unavailable):
            await f
        await b.stop()
        return len(slot.batches)

    assert run(go()) == 2


async def answer_next(slot: FakeSlot) -> None:
    """Answer the batch the slot holds (one item), once the batcher has sent it."""
    await settle()
    assert slot.pending and not slot.pending[-1].done()
    (item_id, value), = slot.batches[-1]
    slot.pending[-1].set_result(Result({item_id: value}, {}, 1))


def test_high_priority_goes_first():
    async def go():
        slot = FakeSlot("a", auto=False)
        b = make([slot], rows=1, wait_ms=0)
        b.start()
        b.submit("blocker", ["z"], deadline_s=T0 + 5)
        await settle()
        b.submit("low", ["l"], deadline_s=T0 + 5, priority=0)
        b.submit("normal", ["n"], deadline_s=T0 + 5, priority=1)
        b.submit("high", ["h"], deadline_s=T0 + 5, priority=2)
        for _ in range(4):
            await answer_next(slot)
        await b.stop()
        return [batch[0][1] for batch in slot.batches]

    assert run(go()) == ["z", "h", "n", "l"]


def test_low_priority_only_batches_wait_for_an_idle_container():
    async def go():
        slot = FakeSlot("a", slots=2, auto=False)
        b = make([slot], rows=1, wait_ms=0)
        b.start()
        b.submit("sync", ["s"], deadline_s=T0 + 5)
        await settle()
        (job,) = b.submit("job", ["j"], deadline_s=T0 + 5, priority=0)
        await settle()
        held = len(slot.batches)              # a slot is free, but the container is busy
        assert b.rows_by_priority == [1, 0, 0]
        slot.pending[0].set_result(Result({"sync:0": "S"}, {}, 1))
        b.notify()
        await settle()
        assert len(slot.batches) == 2
        slot.pending[1].set_result(Result({"job:0": "J"}, {}, 1))
        out = await job
        await b.stop()
        return held, out

    held, out = run(go())
    assert held == 1 and out == "J"


def test_sync_batches_are_not_topped_up_with_low_priority_rows():
    """A job's rows never ride in a client's batch: they would make it slower than the batch
    decide() estimated (lower-priority work does not count as ahead of a request)."""
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=4, wait_ms=30, clock=clock)
        jobs = b.submit("job", ["j1", "j2", "j3"], deadline_s=T0 + 5, priority=0)
        sync = b.submit("sync", ["s"], deadline_s=T0 + 5)
        b.start()
        await settle()
        await clock.advance(0.03)
        out = await asyncio.gather(*sync, *jobs)
        await b.stop()
        return out, [[v for _, v in batch] for batch in slot.batches]

    out, batches = run(go())
    assert out == ["S", "J1", "J2", "J3"]
    assert batches == [["s"], ["j1", "j2", "j3"]]


def test_waiting_counts_a_requests_inputs_until_they_leave_for_a_container():
    async def go():
        slot = FakeSlot("c1", slots=1, auto=False)
        b = make([slot], rows=2, wait_ms=1)
        b.start()
        first = b.submit("r1", ["a", "b"], deadline_s=1e9)      # fills the one slot
        second = b.submit("r2", ["c", "d", "e"], deadline_s=1e9)
        await settle()
        assert slot.batches
        seen = (b.waiting("r1"), b.waiting("r2"))
        for f in second:
            f.cancel()                                           # withdrawn: nothing waits
        await asyncio.sleep(0)
        seen += (b.waiting("r2"),)
        for f in first:
            f.cancel()
        await b.stop()
        return seen

    assert run(go()) == (0, 3, 0)


def test_arrival_rate_and_queue_load_on_the_batchers_clock():
    async def go():
        slot, clock = FakeSlot("a", auto=False), FakeClock()
        b = make([slot], rows=1, wait_ms=0, clock=clock)
        b.submit("a", ["x", "y"], deadline_s=T0 + 60, tenant="t1")
        await clock.advance(3.0)
        b.submit("b", ["z"], deadline_s=T0 + 60, priority=2, tenant="t2")
        seen = [b.arrival_rows_per_s(clock())]          # 3 rows in the last 5 s
        await clock.advance(2.5)
        seen.append(b.arrival_rows_per_s(clock()))      # the first request left the window
        await clock.advance(3.0)
        seen.append(b.arrival_rows_per_s(clock()))
        return seen, b.load()

    rates, load = run(go())
    assert rates == pytest.approx([3 / 5, 1 / 5, 0.0])
    assert load == QueueLoad((0, 2, 1), (0, 1, 1), {"t1": 1, "t2": 1})


def test_default_clock_is_the_event_loop():
    async def go():
        b = Batcher("ep", max_batch_rows=1, wait_ms=0, pick=lambda idle: None)
        return b.now() - asyncio.get_running_loop().time()

    assert abs(run(go())) < 1.0


def test_an_item_is_answered_as_soon_as_its_own_event_arrives():
    from floodway.runtime.protocol import Chunk, ItemError, ItemResult

    async def go():
        slot, clock = FakeSlot("a", auto=False), FakeClock()
        b = make([slot], rows=4, clock=clock)
        b.start()
        fast = b.submit("fast", ["a"], deadline_s=T0 + 5)
        slow = b.submit("slow", ["b", "c", "bad"], deadline_s=T0 + 5)
        await settle()
        (batch,) = slot.batches
        ids = [i for i, _ in batch]
        slot.on_item(Chunk(1, ids[0], 0, "partial"))     # a chunk does not end an item
        await settle()
        after_chunk = fast[0].done()
        slot.on_item(ItemResult(1, ids[0], "A"))
        slot.on_item(ItemError(1, ids[3], "ValueError: bad"))
        await settle()
        early = (fast[0].done(), [f.done() for f in slow])
        # The whole batch's answer comes later and changes nothing already answered.
        slot.pending[0].set_result(Result({ids[0]: "late", ids[1]: "B", ids[2]: "C"},
                                          {ids[3]: "ValueError: bad"}, 4))
        outs = await asyncio.gather(*fast, *slow[:2])
        with pytest.raises(EndpointError, match="bad"):
            await slow[2]
        await b.stop()
        return after_chunk, early, outs

    after_chunk, early, outs = run(go())
    assert after_chunk is False
    assert early == (True, [False, False, True])
    assert outs == ["A", "B", "C"]


def test_the_item_event_tags_are_the_workers():
    from floodway.routers.batcher import ITEM_ERROR, ITEM_RESULT
    from floodway.runtime.protocol import ItemError, ItemResult

    assert (ItemResult.TYPE, ItemError.TYPE) == (ITEM_RESULT, ITEM_ERROR)


class EncodingSlot(FakeSlot):
    """A FakeSlot that encodes its batch for the pipe first, as a container does: a batch
    that cannot be encoded raises (here: a lone surrogate; or `broken`, any error) before it
    takes a slot."""

    broken: Exception | None = None

    def submit(self, items, on_item=None, left_s=None):
        from floodway.codec import dumps

        if self.broken is not None:
            raise self.broken
        dumps([list(i) for i in items])
        return super().submit(items, on_item, left_s)


def test_an_input_the_pipe_cannot_carry_fails_alone_and_the_batcher_goes_on():
    async def go():
        slot, clock = EncodingSlot("a"), FakeClock()
        b = make([slot], rows=4, wait_ms=0, clock=clock)
        b.start()
        bad = b.submit("r1", ["ok", "\ud800"], deadline_s=T0 + 5)
        other = b.submit("r2", ["fine"], deadline_s=T0 + 5)
        await settle()
        assert all(f.done() for f in [*bad, *other])
        with pytest.raises(EndpointError, match="could not be sent to a container"):
            bad[1].result()
        later = b.submit("r3", ["later"], deadline_s=T0 + 5)
        await settle()
        assert later[0].done() and not b._task.done()
        outs = [bad[0].result(), other[0].result(), later[0].result()]
        await b.stop()
        return outs, slot

    outs, slot = run(go())
    assert outs == ["OK", "FINE", "LATER"]   # the good items of the same batch too
    assert slot.free == 1                     # no slot held by the batch that never went


def test_a_batch_that_cannot_be_sent_fails_its_items_and_the_batcher_goes_on():
    async def go():
        slot, clock = EncodingSlot("a"), FakeClock()
        b = make([slot], rows=4, wait_ms=0, clock=clock)
        b.start()
        slot.broken = RuntimeError("pipe broke")
        first = b.submit("r1", ["a", "b"], deadline_s=T0 + 5)
        await settle()
        errors = [f.exception() if f.done() else None for f in first]
        slot.broken = None
        later = b.submit("r2", ["c"], deadline_s=T0 + 5)
        await settle()
        out = later[0].result() if later[0].done() else None
        await b.stop()
        return errors, out

    errors, out = run(go())
    assert all(isinstance(e, EndpointError) and "RuntimeError: pipe broke" in str(e)
               for e in errors)
    assert out == "C"


def test_the_loop_is_restarted_when_it_raises(caplog):
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = make([slot], rows=4, wait_ms=0, clock=clock)
        real_pick, calls = b.pick, []

        def flaky(idle_only=False):
            calls.append(idle_only)
            if len(calls) == 1:
                raise RuntimeError("pick broke")
            return real_pick(idle_only)

        b.pick = flaky
        b.start()
        fs = b.submit("r", ["x"], deadline_s=T0 + 5)
        await settle()
        out = fs[0].result() if fs[0].done() else None
        await b.stop()
        return out

    assert run(go()) == "X"
    assert "pick broke" in caplog.text


def test_low_priority_rows_do_not_count_in_the_arrival_rate():
    # decide() reads the rate as rows that will join a sync request's batch; job rows
    # (low priority) never do (the top-up rule), so counting them made a 2-row request look
    # like one riding in a full batch.
    async def go():
        b = make([FakeSlot("a", slots=1, auto=False)])
        b.submit("job", list(range(64)), deadline_s=100.0, priority=0)
        low_only = b.arrival_rows_per_s(b.now())
        b.submit("sync", ["a", "b"], deadline_s=100.0, priority=1)
        return low_only, b.arrival_rows_per_s(b.now())

    low_only, with_sync = run(go())
    assert low_only == 0.0
    assert with_sync == pytest.approx(2 / 5.0)   # 2 rows over the 5 s window
