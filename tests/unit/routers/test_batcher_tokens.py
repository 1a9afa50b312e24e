"""The batcher's token cut and length grouping, on a fake clock against fake containers:
each input's cost here is its length in characters (the test's own `cost`)."""

from __future__ import annotations

from floodway.routers.batch_item import Item, group
from floodway.routers.batcher import Batcher
from floodway.routers.service import ServiceTime
from tests.unit.routers.test_batcher import T0, FakeClock, FakeSlot, Result, run, settle

# Tokens dominate, a batch's fixed cost is small: a long text padding short ones costs more
# than a batch of its own.
LINE = ServiceTime(per_row_s=0.001, per_batch_s=0.002, per_token_s=0.0001)


def make(slot: FakeSlot, clock: FakeClock, *, rows: int = 8, tokens: int | None = None,
         sent: list | None = None) -> Batcher:
    def pick(idle_only=False):
        return slot if slot.free > 0 and not (idle_only and slot.free < slot.slots) else None
    b = Batcher("ep", max_batch_rows=rows, wait_ms=20, pick=pick, clock=clock, cost=len,
                max_batch_tokens=tokens, batch_s=LINE.seconds,
                on_batch=lambda r, _s: sent.append((r.rows, r.padded_tokens))
                if sent is not None else None)
    clock.batcher = b
    return b


def texts(batches) -> list[list[str]]:
    return [[v for _, v in batch] for batch in batches]


def test_batches_are_cut_by_padded_tokens_as_well_as_rows():
    async def go():
        slot, clock, sent = FakeSlot("a", slots=4), FakeClock(), []
        b = make(slot, clock, rows=8, tokens=100, sent=sent)
        b.start()
        futs = b.submit("r", ["x" * 30] * 7, deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.05)
        assert [f.result() for f in futs] == ["X" * 30] * 7
        await b.stop()
        return [len(x) for x in slot.batches], sent
    rows, sent = run(go())
    assert rows == [3, 3, 1]                  # 3 x 30 <= 100 < 4 x 30
    assert sent == [(3, 90), (3, 90), (1, 30)]


def test_an_input_longer_than_the_budget_goes_alone():
    async def go():
        slot, clock = FakeSlot("a", slots=4), FakeClock()
        b = make(slot, clock, rows=8, tokens=100)
        b.start()
        b.submit("r", ["y" * 300, "y" * 300, "z" * 10], deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.05)
        await b.stop()
        return texts(slot.batches)
    assert run(go()) == [["y" * 300], ["y" * 300], ["z" * 10]]


def mixed() -> list[str]:
    return ["s" * 10, "L" * 200, "s" * 12, "L" * 190, "s" * 9, "s" * 11]


def test_similar_lengths_batch_together_which_lowers_padding():
    async def go(group: bool):
        slot, clock, sent = FakeSlot("a", slots=4), FakeClock(), []
        b = make(slot, clock, sent=sent)
        if not group:   # every length joins (as a batcher cutting by rows alone)
            b.batch_s = lambda rows, tokens: 0.0
        b.start()
        futs = b.submit("r", mixed(), deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.05)
        assert [f.result() for f in futs] == [v.upper() for v in mixed()]
        await b.stop()
        return texts(slot.batches), sum(t for _, t in sent)
    grouped, padded = run(go(True))
    assert grouped == [["s" * 10, "s" * 12, "s" * 9, "s" * 11], ["L" * 200, "L" * 190]]
    assert padded == 4 * 12 + 2 * 200
    ungrouped, padded_rows_only = run(go(False))
    assert ungrouped == [mixed()]
    assert padded_rows_only == 6 * 200 > 2 * padded


def test_an_input_near_its_deadline_is_never_passed_over():
    async def go(tokens: int | None):
        slot, clock = FakeSlot("a", slots=4), FakeClock()
        b = make(slot, clock, tokens=tokens)
        b.start()
        b.submit("short", ["s" * 10, "s" * 12], deadline_s=T0 + 5)
        b.submit("late", ["L" * 200], deadline_s=T0 + 0.07)   # due within two batches
        b.submit("more", ["s" * 9], deadline_s=T0 + 5)
        await settle()
        await clock.advance(0.05)
        await b.stop()
        return texts(slot.batches)
    # It fits: it joins the batch although it pads it (and the next short one, which it
    # would pad, heads a batch of its own).
    assert run(go(None)) == [["s" * 10, "s" * 12, "L" * 200], ["s" * 9]]
    # It does not fit the budget: the batch ends before it, so nothing behind it goes first.
    assert run(go(400)) == [["s" * 10, "s" * 12], ["L" * 200], ["s" * 9]]


def test_nothing_of_lower_priority_goes_ahead_of_an_input_passed_over():
    async def go():
        slot, clock = FakeSlot("a", slots=4), FakeClock()
        b = make(slot, clock)
        b.start()
        b.submit("hi", ["h" * 10, "H" * 200], deadline_s=T0 + 5, priority=2)
        b.submit("normal", ["n" * 10], deadline_s=T0 + 5, priority=1)
        await settle()
        await clock.advance(0.05)
        await b.stop()
        return texts(slot.batches)
    assert run(go()) == [["h" * 10], ["H" * 200], ["n" * 10]]


def test_queued_and_in_flight_tokens_are_counted_for_the_snapshot():
    async def go():
        slot, clock = FakeSlot("a", slots=2, auto=False), FakeClock()
        b = make(slot, clock, rows=2)
        b.start()
        futs = b.submit("r", ["a" * 10, "b" * 30], deadline_s=T0 + 5, priority=1)
        b.submit("j", ["c" * 7], deadline_s=T0 + 5, priority=0)   # waits for an idle slot
        load = b.load()
        await settle()
        await clock.advance(0.05)
        inflight = b.inflight_tokens("a")
        after = b.load()
        slot.pending[0].set_result(Result({"r:0": "A", "r:1": "B"}, {}, 2))
        await settle()
        assert [f.result() for f in futs] == ["A", "B"]
        await settle()
        done = b.inflight_tokens("a")
        await b.stop()
        return load, inflight, after, done
    load, inflight, after, done = run(go())
    assert load.tokens_by_priority == (7, 40, 0)
    assert load.rows_by_priority == (1, 2, 0)
    assert inflight == (2 * 30,)            # rows x the longest item, per batch in flight
    assert after.tokens_by_priority == (7, 0, 0)
    assert done == (7,)                     # the job batch went once the slot was idle


def test_without_a_cost_the_queue_reports_no_tokens():
    async def go():
        slot, clock = FakeSlot("a"), FakeClock()
        b = Batcher("ep", max_batch_rows=4, wait_ms=20, pick=lambda idle_only=False: slot,
                    clock=clock)
        b.submit("r", ["abc"], deadline_s=T0 + 5)
        return b.load()
    assert run(go()).tokens_by_priority is None


def test_a_job_batch_stays_within_its_time_bound_and_a_sync_batch_is_not_bound():
    """Low-priority (job) rows: taken while the batch's fitted seconds stay within
    max_low_s; the same rows at normal priority fill the batch by rows alone."""
    def seconds(rows: int, padded: int) -> float:
        return 0.01 * padded          # 10 ms per padded token

    def item(i: int, priority: int) -> Item:
        return Item((-priority, i), f"r{i}:0", "x" * 32, f"r{i}", "t", deadline_s=100.0,
                    enqueued_s=0.0, future=DoneLater(), length=10)

    def batch_of(priority: int) -> list:
        head = item(0, priority)
        rest = [item(i, priority) for i in range(1, 8)]
        batch, _ = group(head, rest, 0.0, max_rows=8, max_tokens=None, batch_s=seconds,
                         near_s=0.0, prio=lambda it: -it.sort_key[0], max_low_s=0.35)
        return batch

    assert len(batch_of(0)) == 3      # 3 x 10 tokens = 0.30 s; a 4th would make 0.40 s
    assert len(batch_of(1)) == 8


class DoneLater:
    """A future that is never done (the group only asks)."""

    def done(self) -> bool:
        return False
