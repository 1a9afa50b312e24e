"""A batch endpoint's container: deadlines on the wire, Cancel for an item whose caller left,
and the rows a partly skipped batch ran (fake worker process: tests/unit/runtime/
test_container.py)."""

from __future__ import annotations

import time

import pytest

from floodway.runtime.protocol import (
    DROPPED_CANCELLED,
    Batch,
    BatchDone,
    Cancel,
    ItemError,
    ItemResult,
)
from tests.unit.runtime.test_container import aio, ready_container, settle


@aio
async def test_deadlines_go_as_times_on_the_workers_clock():
    c, proc, _ = await ready_container()
    before = time.monotonic()
    c.submit([("r1:0", "a"), ("r2:0", "b")], left_s=[0.5, 2.0])
    after = time.monotonic()
    (sent,) = proc.stdin.sent
    assert sent.items == (("r1:0", "a"), ("r2:0", "b"))
    assert before + 0.5 <= sent.deadlines[0] <= after + 0.5
    assert sent.deadlines[1] - sent.deadlines[0] == pytest.approx(1.5)
    c.submit([("r3:0", "c")])   # no deadlines: none on the wire
    assert proc.stdin.sent[1] == Batch(2, (("r3:0", "c"),))


@aio
async def test_an_item_of_a_batch_in_the_pipe_is_cancelled_and_the_result_counts_rows_run():
    c, proc, clock = await ready_container(slots=2)
    c.submit([("r1:0", "a")])
    waiting = c.submit([("r2:0", "b"), ("r3:0", "c")])
    assert c.cancel_item("r2:0") and not c.cancel_item("r9:0")
    assert proc.stdin.sent[-1] == Cancel(2, "r2:0")
    proc.say_together(ItemResult(1, "r1:0", "A"), BatchDone(1, 0.5, 1))
    clock.now_s += 1.0
    proc.say_together(ItemError(2, "r2:0", DROPPED_CANCELLED), ItemResult(2, "r3:0", "C"),
                      BatchDone(2, 0.25, 1))
    await settle()
    result = waiting.result()
    assert result.rows == 1 and result.compute_s == 0.25   # what ran, for the fit
    assert result.errors == {"r2:0": DROPPED_CANCELLED} and result.outputs == {"r3:0": "C"}
    assert c.inflight == {} and c.free_slots == 2
