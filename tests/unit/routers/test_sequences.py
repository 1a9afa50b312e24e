"""A streaming endpoint's sequences in the batcher: what an item costs, the queue counted by
priority and tenant (and back in it when a container dies before the first chunk), `pick`
told the head sequence's KV need, and the estimator's samples."""

from __future__ import annotations

import pytest

from floodway.core.generation import (
    GenerationEstimator,
    estimate_message_tokens,
    estimate_prompt_tokens,
)
from floodway.functions.prompts import Prompt
from floodway.routers.batcher import Batcher
from floodway.routers.decide import ServiceTime
from floodway.routers.sequences import SequenceBook, SequenceCost, sequence_cost
from tests.unit.routers.test_batcher import T0, FakeClock, run, settle
from tests.unit.routers.test_batcher_streams import StreamSlot

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi!"}]


@pytest.mark.parametrize(("item", "want"), [
    ("x" * 41, SequenceCost(estimate_prompt_tokens("x" * 41), 64)),
    ({"prompt": "abcdefgh", "max_new_tokens": 5}, SequenceCost(2, 5)),
    ({"prompt": "abcd", "max_new_tokens": None}, SequenceCost(1, 64)),
    ({"messages": MESSAGES, "max_new_tokens": 9},
     SequenceCost(estimate_message_tokens(MESSAGES), 9)),
    (Prompt(messages=MESSAGES, max_new_tokens=3),
     SequenceCost(estimate_message_tokens(MESSAGES), 3)),
    (7, SequenceCost(1, 64)),
    ({"prompt": "abcd", "max_new_tokens": True}, SequenceCost(1, 64)),   # not a count
])
def test_an_items_cost(item, want):
    assert sequence_cost(item, 64) == want
    assert want.kv_need == want.prompt_tokens + want.max_new_tokens


def make(slots: list[StreamSlot], clock: FakeClock, book: SequenceBook,
         needs: list[int]) -> Batcher:
    def pick(idle_only=False, kv_need=0):
        needs.append(kv_need)
        free = [s for s in slots if s.free > 0]
        return free[0] if free else None
    b = Batcher("gen", max_batch_rows=1, wait_ms=0, pick=pick, clock=clock, streaming=True,
                sequences=book)
    clock.batcher = b
    return b


def test_the_queue_counts_sequences_and_a_lost_one_comes_back_before_its_first_chunk():
    async def go():
        slot, clock, needs = StreamSlot("a", slots=1), FakeClock(), []
        book = SequenceBook(50)
        b = make([slot], clock, book, needs)
        b.start()
        b.submit("r1", [{"prompt": "x" * 40, "max_new_tokens": 10}], deadline_s=T0 + 5,
                 tenant="t1")
        b.submit("r2", ["y" * 8, "z" * 4], deadline_s=T0 + 5, priority=2, tenant="t2")
        queued_first = book.queue()
        await settle()
        sent = (book.queue(), [it.id for it in book.running_on(slot)])
        slot.die()                              # no chunk yet: back in the queue
        slot.slots = 0                          # and nowhere to go
        await settle()
        back = book.queue()
        await b.stop()
        return queued_first, sent, back, needs

    queued_first, (after, running), back, needs = run(go())
    assert queued_first.sequences_by_priority == (0, 1, 2)
    assert queued_first.prompt_tokens_by_priority == (0, 10, 2 + 1)
    assert queued_first.new_tokens_by_priority == (0, 10, 100)
    assert dict(queued_first.tenant_sequences) == {"t1": 1, "t2": 2}
    assert running == ["r2:0"] and after.sequences_by_priority == (0, 1, 1)
    assert dict(after.tenant_sequences) == {"t1": 1, "t2": 1}
    assert back == queued_first
    assert needs[0] == 2 + 50                   # the head (r2:0): 2 prompt + 50 new tokens


def test_the_samples_come_from_chunk_times_per_token_with_the_active_count():
    step = ServiceTime(per_row_s=0.01, per_batch_s=0.02)      # 0.03 s a step alone

    async def go():
        slot, clock, needs = StreamSlot("a", slots=2), FakeClock(), []
        est = GenerationEstimator(step_prior=step)
        book = SequenceBook(50, estimator=est)
        b = make([slot], clock, book, needs)
        b.start()
        b.submit("r1", ["x" * 12], deadline_s=T0 + 5)
        await settle()
        clock.t += 0.5
        slot.chunk("r1:0", 0, {"text": "a", "tokens": 1})        # alone: prefill 0.47
        b.submit("r2", ["y" * 400], deadline_s=T0 + 5)
        await settle()
        clock.t += 0.2
        slot.chunk("r1:0", 1, {"text": "bc", "tokens": 2})       # 2 active: 0.1 a step
        clock.t += 0.3
        slot.chunk("r2:0", 0, "w")                               # r2's first, 0.5 s on
        slot.end("r1:0")
        await settle()
        slot.end("r2:0", "ValueError: boom")                     # failed: no request
        await settle()
        await b.stop()
        return est

    est = run(go())
    # r2's first chunk 0.5 s after its dispatch, less one step with 2 active at the fit of
    # then (one sample: 0.1 s; none came after it)
    assert est.model.step_s(2) == pytest.approx(0.1)
    r2 = round(0.5 - est.model.step_s(2), 9)
    assert [(p, round(s, 9)) for p, s in est.prefills] == [(3, 0.47), (100, r2)]
    assert [(a, round(s, 9)) for a, s in est.steps] == [(2, 0.1)]
    assert list(est.requests) == [(3, 3)]
