"""A streaming endpoint's container: Cancel written for one item in flight, Load kept and
shown, sequences served at once (service time from each one's own start), chunks counted as
progress, and no slot left behind when the worker dies mid-stream."""

from __future__ import annotations

import pytest

from floodway.errors import Unavailable
from floodway.runtime.container import Container, State
from floodway.runtime.protocol import (
    Batch,
    BatchDone,
    Cancel,
    Chunk,
    ItemError,
    ItemResult,
    Load,
    Phase,
)
from tests.unit.runtime.test_container import READY, Clock, FakeProc, aio, settle


async def streaming_container(slots: int = 4) -> tuple[Container, FakeProc, Clock]:
    clock = Clock()
    c = Container("app.py", "gen", "/nowhere", slots=slots, clock=clock, streaming=True)
    proc = FakeProc()
    c.attach(proc)
    proc.say(Phase("warming"), READY)
    await settle()
    assert c.state == State.READY
    return c, proc, clock


@aio
async def test_cancel_writes_a_cancel_for_the_item_and_the_slot_frees_at_done():
    c, proc, _ = await streaming_container(slots=2)
    fut_a = c.submit([("r1:0", "a")])
    c.submit([("r2:0", "b")])
    assert c.free_slots == 0 and c.state == State.BUSY
    assert c.cancel_item("r2:0") and not c.cancel_item("r9:0")
    assert proc.stdin.sent[-1] == Cancel(2, "r2:0")
    assert c.free_slots == 0   # still taken until the worker ends the item
    proc.say_together(ItemError(2, "r2:0", "Cancelled: gone"), BatchDone(2, 0.1, 1))
    await settle()
    assert c.free_slots == 1 and c.state == State.READY and not fut_a.done()
    assert not c.cancel(2, "r2:0")   # its batch is over: nothing written
    assert proc.stdin.sent[-1] == Cancel(2, "r2:0") and len(proc.stdin.sent) == 3


@aio
async def test_load_is_kept_and_described_and_reset_when_the_worker_dies():
    c, proc, _ = await streaming_container()
    changes = []
    c.on_change = lambda: changes.append(c.active_sequences)
    fut = c.submit([("r1:0", "a")])
    proc.say(Load(1, 300, 4096))
    await settle()
    d = c.describe()
    assert (d["active_sequences"], d["kv_cache_tokens"], d["kv_cache_capacity"]) == \
        (1, 300, 4096)
    assert 1 in changes
    proc.exit(1)
    await settle()
    with pytest.raises(Unavailable):
        fut.result()
    assert c.active_sequences == 0 and c.kv_cache_tokens == 0 and c.inflight == {}
    plain = Container("app.py", "embed", "/nowhere", slots=2)
    assert "active_sequences" not in plain.describe()


@aio
async def test_sequences_are_timed_from_their_own_start_and_chunks_are_progress():
    c, proc, clock = await streaming_container()
    heard = []
    first = c.submit([("a", 1)], on_item=heard.append)
    clock.now_s += 1.0
    second = c.submit([("b", 2)])
    clock.now_s += 4.0
    proc.say(Chunk(1, "a", 0, "x"))
    await settle()
    assert c.last_progress_s == clock.now_s and heard == [Chunk(1, "a", 0, "x")]
    clock.now_s += 1.0
    proc.say_together(ItemResult(1, "a", None), BatchDone(1, 6.0, 1),
                      ItemResult(2, "b", None), BatchDone(2, 5.0, 1))
    await settle()
    # Both ran at once: each one's service time counts from its own send.
    assert (first.result().service_s, second.result().service_s) == (6.0, 5.0)
    assert proc.stdin.sent[:2] == [Batch(1, (("a", 1),)), Batch(2, (("b", 2),))]
