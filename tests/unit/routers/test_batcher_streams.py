"""A streaming endpoint's batcher: one sequence per batch at once, chunks to each item's
listener, cancel = withdraw (queued) or Cancel (in flight), no leaked slot, and no replay
of a half-sent stream when its container dies."""

from __future__ import annotations

import asyncio

import pytest

from floodway.errors import EndpointError, Unavailable
from floodway.routers.batcher import Batcher
from floodway.runtime.protocol import Chunk, ItemError, ItemResult
from tests.unit.routers.test_batcher import T0, FakeClock, Result, run, settle


class StreamSlot:
    """A streaming container: `slots` sequences at once; the test plays its worker."""

    def __init__(self, cid: str, slots: int = 2):
        self.id, self.slots = cid, slots
        self.batches: dict[int, tuple[list, object, asyncio.Future]] = {}
        self.cancelled: list[str] = []
        self._next = 0

    @property
    def free(self) -> int:
        return self.slots - sum(1 for _, _, f in self.batches.values() if not f.done())

    def submit(self, items, on_item=None):
        if self.free <= 0:
            raise Unavailable("no slot")
        self._next += 1
        fut = asyncio.get_running_loop().create_future()
        self.batches[self._next] = (list(items), on_item, fut)
        return fut

    def cancel_item(self, item_id: str) -> bool:
        self.cancelled.append(item_id)
        return True

    def batch_of(self, item_id: str) -> int:
        return next(b for b, (items, _, _) in self.batches.items()
                    if any(i == item_id for i, _ in items))

    def chunk(self, item_id: str, seq: int, data) -> None:
        b = self.batch_of(item_id)
        self.batches[b][1](Chunk(b, item_id, seq, data))

    def end(self, item_id: str, error: str | None = None) -> None:
        """The item's end, then its batch's (the slot frees)."""
        b = self.batch_of(item_id)
        _, on_item, fut = self.batches[b]
        ev = ItemError(b, item_id, error) if error else ItemResult(b, item_id, None)
        on_item(ev)
        outs, errs = ({}, {item_id: error}) if error else ({item_id: None}, {})
        fut.set_result(Result(outs, errs, 1))

    def die(self) -> None:
        for _, _, fut in self.batches.values():
            if not fut.done():
                fut.set_exception(Unavailable("container died"))


def make(slots: list[StreamSlot], clock: FakeClock) -> Batcher:
    def pick(idle_only=False):
        free = [s for s in slots if s.free > 0]
        return free[0] if free else None
    b = Batcher("gen", max_batch_rows=1, wait_ms=0, pick=pick, clock=clock, streaming=True)
    clock.batcher = b
    return b


def test_each_sequence_goes_alone_at_once_and_chunks_reach_its_listener():
    async def go():
        slot, clock = StreamSlot("a", slots=4), FakeClock()
        b = make([slot], clock)
        heard = []
        b.start()
        fs = b.submit("r1", ["x", "y"], deadline_s=T0 + 5,
                      on_chunk=lambda i, data: heard.append((i, data)))
        await settle()
        sent = [items for items, _, _ in slot.batches.values()]
        slot.chunk("r1:1", 0, "Y0")
        slot.chunk("r1:0", 0, "X0")
        slot.chunk("r1:0", 1, "X1")
        slot.end("r1:0")
        slot.end("r1:1")
        outs = await asyncio.gather(*fs)
        await b.stop()
        return sent, heard, outs

    sent, heard, outs = run(go())
    assert sent == [[("r1:0", "x")], [("r1:1", "y")]]   # no batching wait, one per batch
    assert heard == [(1, "Y0"), (0, "X0"), (0, "X1")]
    assert outs == [None, None]


def test_cancelling_withdraws_queued_items_and_cancels_running_ones():
    async def go():
        slot, clock = StreamSlot("a", slots=1), FakeClock()
        b = make([slot], clock)
        b.start()
        heard = []
        running, queued = b.submit("r1", ["x", "y"], deadline_s=T0 + 5,
                                   on_chunk=lambda i, d: heard.append((i, d)))
        await settle()
        assert b.queued_rows == 1
        queued.cancel()
        running.cancel()
        await settle()
        cancelled = list(slot.cancelled)
        slot.chunk("r1:0", 0, "late")       # after the cancel: reaches no one
        slot.end("r1:0", "Cancelled: gone")
        await settle()
        # The slot freed when the worker answered: the next request gets it.
        nxt = b.submit("r2", ["z"], deadline_s=T0 + 5)
        await settle()
        slot.end("r2:0")
        out = await nxt[0]
        await b.stop()
        return cancelled, heard, b.queued_rows, len(slot.batches), out

    cancelled, heard, queued_rows, batches, out = run(go())
    assert cancelled == ["r1:0"]      # the queued one was only withdrawn
    assert heard == [] and queued_rows == 0
    assert batches == 2 and out is None   # r1:1 never went to the container


def test_a_container_death_retries_only_sequences_that_sent_no_chunk():
    async def go():
        a, c = StreamSlot("a", slots=2), StreamSlot("c", slots=0)
        clock = FakeClock()
        b = make([a, c], clock)
        b.start()
        started, fresh = b.submit("r1", ["x", "y"], deadline_s=T0 + 5,
                                  on_chunk=lambda i, d: None)
        await settle()
        a.chunk("r1:0", 0, "half")
        a.slots, c.slots = 0, 1   # a is gone; c takes work
        a.die()
        await settle()
        retried = [items for items, _, _ in c.batches.values()]
        c.end("r1:1")
        return started, await fresh, retried, b

    started, fresh, retried, b = run(go())
    assert retried == [[("r1:1", "y")]]
    assert fresh is None
    with pytest.raises(Unavailable, match="container died"):
        started.result()


def test_a_failed_sequence_fails_its_own_future():
    async def go():
        slot, clock = StreamSlot("a"), FakeClock()
        b = make([slot], clock)
        b.start()
        (f,) = b.submit("r1", ["x"], deadline_s=T0 + 5, on_chunk=lambda i, d: None)
        await settle()
        slot.end("r1:0", "ValueError: boom")
        with pytest.raises(EndpointError, match="ValueError: boom"):
            await f
        await b.stop()

    run(go())


def test_low_priority_sequences_take_free_slots_behind_normal_ones():
    """Continuous batching: a job's sequence (low priority) shares a container that runs
    another stream, instead of waiting for it to be idle; normal work still goes first."""
    async def go():
        slot, clock = StreamSlot("a", slots=3), FakeClock()

        def pick(idle_only=False):   # as the pool's: idle_only wants nothing in flight
            busy = slot.free < slot.slots
            return slot if slot.free > 0 and not (idle_only and busy) else None
        b = Batcher("gen", max_batch_rows=1, wait_ms=0, pick=pick, clock=clock,
                    streaming=True)
        clock.batcher = b
        b.start()
        b.submit("long", ["x"], deadline_s=T0 + 60)
        await settle()
        b.submit("job1", ["j1"], deadline_s=T0 + 60, priority=0)
        b.submit("job2", ["j2"], deadline_s=T0 + 60, priority=0)
        b.submit("user", ["u"], deadline_s=T0 + 60)   # arrives last, sent before job2
        await settle()
        sent = [items[0][0] for items, _, _ in slot.batches.values()]
        queued = b.queued_rows
        await b.stop()
        return sent, queued

    sent, queued = run(go())
    assert sent == ["long:0", "user:0", "job1:0"] and queued == 1


def test_an_item_that_failed_on_its_input_is_a_422_naming_the_field():
    async def go():
        slot, clock = StreamSlot("a", slots=4), FakeClock()
        b = make([slot], clock)
        b.start()
        fs = b.submit("r1", ["x", "y", "z"], deadline_s=T0 + 5)
        await settle()
        slot.end("r1:0", "InputError: prompt: 602 tokens is too long: at most 511 tokens")
        slot.end("r1:1", "InputError: Value error, exactly one of prompt or messages")
        slot.end("r1:2", "ValueError: boom")
        got = await asyncio.gather(*fs, return_exceptions=True)
        await b.stop()
        return got

    long, bad, boom = run(go())
    assert (long.status, long.field, long.kind) == (422, "inputs[0].prompt", "input_error")
    assert str(long) == ("endpoint 'gen': inputs[0]: prompt: 602 tokens is too long: at "
                         "most 511 tokens")
    assert (bad.status, bad.field) == (422, "inputs[1]")
    assert (boom.status, boom.field, boom.kind) == (500, None, None)
    assert str(boom) == "endpoint 'gen' raised ValueError: boom"
