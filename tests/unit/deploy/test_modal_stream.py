"""The router's measurements of streams on Modal (`modal_stream.modal_book` through
`stream_pending`): the same samples as the local pool's, from the chunks as they arrive,
with the sequences in flight per runner as a step's active count."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from floodway.config import Generation
from floodway.core.generation import GenerationEstimator
from floodway.deploy.modal_calls import ITEM_ERROR
from floodway.deploy.modal_stream import CALL_HEADER, modal_book, stream_pending
from floodway.http.clock import ManualClock

PROMPT = "x" * 400                     # 100 prompt tokens by the router's estimate


class FakeStream:
    """``method.remote_gen.aio(item)``: the call header after `queued_s` (Modal's queue),
    then `first_s` later the first chunk (one token), then a chunk of one token every
    `gap_s` (`tokens` in all), moving `clock` as it goes."""

    def __init__(self, clock: ManualClock, *, queued_s: float, first_s: float, gap_s: float,
                 tokens: int):
        self.clock, self.queued_s, self.first_s, self.gap_s = clock, queued_s, first_s, gap_s
        self.tokens = tokens
        self.remote_gen = SimpleNamespace(aio=self.gen)

    async def gen(self, item):
        self.clock.advance(self.queued_s)
        yield {CALL_HEADER: "fc-1"}
        self.clock.advance(self.first_s)
        yield {"text": "a", "tokens": 1}
        for _ in range(self.tokens - 1):
            self.clock.advance(self.gap_s)
            yield {"text": "b", "tokens": 1}


def _run(method, state, ep, inputs):
    async def go():
        pending = stream_pending("talk", method, inputs, clock=method.clock, timeout_s=60,
                                 max_stream_s=600, book=modal_book(ep, state))
        return await pending

    return asyncio.run(go())


def test_a_modal_stream_feeds_the_routers_generation_estimator():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation(max_sequences=8, max_new_tokens=64))
    # 6 sequences in flight on 2 runners: a step is sampled with 3 active.
    state = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=6, runners=2)
    method = FakeStream(clock, queued_s=5.0, first_s=0.3, gap_s=0.04, tokens=11)
    out = _run(method, state, ep, [{"prompt": PROMPT, "max_new_tokens": 32}])
    assert out[0]["text"] == "a" + "b" * 10
    est = state.generation
    # Prefill: from the call header (not the 5 s in Modal's queue) to the first chunk, less
    # one step at the prior's step time with 3 active.
    [(tokens, prefill_s)] = list(est.prefills)
    step = GenerationEstimator().model.step_s(3)
    assert tokens == 100 and prefill_s == pytest.approx(0.3 - step)
    # Ten decode steps of 40 ms, each with 3 active; one finished sequence of 11 tokens.
    assert len(est.steps) == 10
    assert all(a == 3 and s == pytest.approx(0.04) for a, s in est.steps)
    assert list(est.requests) == [(100, 11)] and est.model.lengths == (11,)
    assert est.model.step_s(3) == pytest.approx(0.04)


def test_the_active_count_stays_within_one_and_the_slots():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation(max_sequences=4))
    crowded = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=50, runners=2)
    _run(FakeStream(clock, queued_s=0, first_s=0.1, gap_s=0.02, tokens=3), crowded, ep, ["hi"])
    assert {a for a, _ in crowded.generation.steps} == {4}
    # No stats yet (runners None) and nothing else in flight: one.
    alone = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=0, runners=None)
    _run(FakeStream(clock, queued_s=0, first_s=0.1, gap_s=0.02, tokens=3), alone, ep, ["hi"])
    assert {a for a, _ in alone.generation.steps} == {1}


def test_a_failed_stream_is_no_finished_sequence():
    clock = ManualClock()
    ep = SimpleNamespace(generation=Generation())
    state = SimpleNamespace(generation=GenerationEstimator(), inflight_rows=1, runners=1)

    class Failing(FakeStream):
        async def gen(self, item):
            yield {CALL_HEADER: "fc-2"}
            self.clock.advance(0.2)
            yield {"text": "a", "tokens": 1}
            yield {ITEM_ERROR: "RuntimeError: boom"}

    out = _run(Failing(clock, queued_s=0, first_s=0, gap_s=0, tokens=0), state, ep, ["hi"])
    assert "boom" in str(out[0])
    assert len(state.generation.prefills) == 1 and not state.generation.requests
