"""A streaming endpoint's local pool: the stream snapshot counts its sequences (remaining
tokens, KV cache, prompts waiting for a first chunk, the queue by priority and tenant), the
generation estimator is fed from chunks (not whole streams into the batch fit), the pick is
KV-aware, and a container whose sequences all wait with no chunk flowing is stuck."""

from __future__ import annotations

import asyncio
import math

import pytest

import floodway as fw
from floodway.core.generation import estimate_message_tokens, measured_generation
from floodway.core.priors import DECODE_STEP_PRIOR
from floodway.errors import FloodwayError
from floodway.functions.prompts import Prompt
from floodway.runtime import health
from floodway.runtime.endpoint_pool import EndpointPool
from tests.unit.runtime.fakes import T0, StepClock, StreamFake, settle

app = fw.App("g")


@app.endpoint(route=fw.Route(timeout_s=5.0, stuck_after_s=5.0),
              generation=fw.Generation(max_sequences=2, max_new_tokens=100))
async def gen(model, prompt: Prompt):
    yield "x"


@app.endpoint(model=fw.HFModel("org/model", revision="a" * 40))
def embed(model, texts: list[str]) -> list[str]:
    return texts


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))   # guards a hung test only


def pool_of(clock: StepClock, *containers: StreamFake) -> EndpointPool:
    ep = EndpointPool(app["gen"], clock=clock)
    ep.new_batcher(on_batch=lambda r, c: ep.record_batch(r.rows, r.service_s),
                   on_send=None).start()
    for c in containers:
        c.on_change = ep.batcher.notify
        ep.containers.append(c)
    return ep


def prompt(text: str, new: int | None = None) -> dict:
    return {"prompt": text, "max_new_tokens": new}


def test_the_stream_snapshot_counts_sequences_kv_pending_prompts_and_the_queue():
    chat = {"messages": [{"role": "user", "content": "hello there"}], "max_new_tokens": 7}

    async def go():
        clock = StepClock()
        a, b = StreamFake("gen", clock, slots=2), StreamFake("gen", clock, slots=2)
        ep = pool_of(clock, a, b)
        a.become_ready()
        ep.enqueue("r1", [prompt("x" * 40, 30)], timeout_s=5, priority=1, tenant="t1",
                   keep_s=60)
        ep.enqueue("r2", [prompt("y" * 80)], timeout_s=5, priority=1, tenant="t1", keep_s=60)
        ep.enqueue("r3", [chat], timeout_s=5, priority=0, tenant="t2", keep_s=60)
        await settle()
        clock.advance(3.0)                      # b has been starting for 3 s
        a.chunk("r1:0", {"text": "ab", "tokens": 4})
        a.load(2, 150, 1000)                    # the worker counts less than was sent
        first = ep.sequence_loads(clock.monotonic())
        queue = ep.batcher.sequences.queue()
        snap = ep.stream_snapshot(clock.monotonic(), 4)
        a.load(2, 500, 1000)                    # now more than the router's reservations
        later = ep.sequence_loads(clock.monotonic())[0]
        await ep.batcher.stop()
        return first, queue, snap, later

    (la, lb), queue, snap, later = run(go())
    # r1: 10 prompt tokens, 30 new, 4 streamed; r2: 20 prompt tokens, the default 100 new
    assert (la.state, la.active, la.max_sequences) == ("ready", 2, 2)
    assert la.remaining_tokens == (26, 100)
    assert (la.kv_tokens, la.kv_capacity) == (40 + 120, 1000)   # the router's reservations
    assert la.pending_prompt_tokens == 20                         # r2: no first chunk yet
    assert (lb.state, lb.active, lb.starting_for_s) == ("starting", 0, 3.0)
    assert (lb.kv_tokens, lb.kv_capacity) == (0, 0)               # reports nothing
    p3 = estimate_message_tokens(chat["messages"])
    assert queue.sequences_by_priority == (1, 0, 0)          # a job's (low): waits
    assert queue.prompt_tokens_by_priority == (p3, 0, 0)
    assert queue.new_tokens_by_priority == (7, 0, 0)
    assert dict(queue.tenant_sequences) == {"t2": 1}
    assert snap.queue == queue and snap.kv_cache_tokens == 1000   # the budget reported
    step = DECODE_STEP_PRIOR.seconds(2)
    view = snap.containers[0]
    assert view.ends_in_s == pytest.approx((26 * step, 100 * step))
    assert view.kv_free_tokens == 1000 - 160 and view.pending_prompt_tokens == 20
    assert later.kv_tokens == 500


def test_the_estimator_is_fed_prefill_steps_and_requests_not_the_batch_fit():
    async def go():
        clock = StepClock()
        a = StreamFake("gen", clock, slots=2)
        ep = pool_of(clock, a)
        a.become_ready()
        ep.enqueue("r1", [prompt("x" * 40, 30)], timeout_s=5, priority=1, tenant="t",
                   keep_s=60)
        ep.enqueue("r2", [prompt("y" * 8, 30)], timeout_s=5, priority=1, tenant="t",
                   keep_s=60)
        await settle()
        clock.advance(0.5)
        a.chunk("r1:0", {"text": "abcd", "tokens": 4})    # 2 active: 4 steps of the prior
        clock.advance(0.3)
        a.chunk("r1:0", {"text": "efg", "tokens": 3})     # 0.3 s for 3 steps
        clock.advance(0.1)
        a.chunk("r1:0", {"text": "", "tokens": 0})        # no tokens: no sample
        clock.advance(0.1)
        a.chunk("r1:0", {"text": "h", "tokens": 1})       # 0.2 s since the last tokens
        a.end("r1:0")
        await settle()
        a.end("r2:0")                                     # ended with no chunk: 0 tokens
        await settle()
        await ep.batcher.stop()
        return ep

    ep = run(go())
    est = ep.generation
    assert list(est.prefills) == [(10, pytest.approx(0.5 - 4 * DECODE_STEP_PRIOR.seconds(2)))]
    assert [(n, round(s, 9)) for n, s in est.steps] == [(2, 0.1), (2, 0.2)]
    assert list(est.requests) == [(10, 8), (2, 0)]
    assert list(ep.service.samples) == []                 # whole streams never go there
    m, want = ep.measured(), measured_generation(ep.cold, est, 2)
    assert (m.service_s, m.concurrency) == (want.service_s, want.concurrency)


def test_a_cancelled_sequence_is_no_request_sample_and_frees_its_reservation():
    async def go():
        clock = StepClock()
        a = StreamFake("gen", clock, slots=2)
        ep = pool_of(clock, a)
        a.become_ready()
        pending = ep.enqueue("r1", [prompt("x" * 40, 30)], timeout_s=5, priority=1,
                             tenant="t", keep_s=60)
        await settle()
        a.load(1, 0, 1000)
        held = ep.kv_used(a)
        a.chunk("r1:0", "a")
        pending.cancel()
        await settle()
        freed = ep.kv_used(a)
        await ep.batcher.stop()
        return ep, a, held, freed

    ep, a, held, freed = run(go())
    assert (held, freed) == (40, 0) and a.cancelled == ["r1:0"]
    assert list(ep.generation.requests) == [] and len(ep.generation.prefills) == 1


def test_the_pick_needs_kv_room_least_active_first_and_an_idle_container_takes_anything():
    async def go():
        clock = StepClock()
        a, b, c = (StreamFake("gen", clock, slots=2) for _ in range(3))
        ep = EndpointPool(app["gen"], clock=clock)
        ep.slots = 4
        ep.containers.extend([a, b, c])
        for x in (a, b):
            x.become_ready()
        a.submit([("s1", "p")])
        a.load(1, 900, 1000)                   # room 100, one in flight
        b.submit([("s2", "p")])
        b.submit([("s3", "p")])
        b.load(2, 200, 1000)                   # room 800, two in flight
        picks = [ep.pick(kv_need=n) for n in (50, 300, 900)]
        c.become_ready()
        c.load(0, 0, 100)                      # idle: its engine decides
        picks.append(ep.pick(kv_need=900))
        picks.append(ep.pick(idle_only=True, kv_need=10))
        return picks, (a, b, c)

    picks, (a, b, c) = run(go())
    assert picks == [a, b, None, c, c]


def test_a_streaming_container_is_stuck_only_when_no_chunk_or_end_flows():
    async def go():
        clock = StepClock()
        a, b = StreamFake("gen", clock, slots=2), StreamFake("gen", clock, slots=2)
        ep = pool_of(clock, a, b)
        a.become_ready()
        b.become_ready()
        ep.enqueue("r1", [prompt("x")], timeout_s=60, priority=1, tenant="t", keep_s=60)
        ep.enqueue("r2", [prompt("y")], timeout_s=60, priority=1, tenant="t", keep_s=60)
        await settle()
        on_a = [i for i in ("r1:0", "r2:0") if i in a.sequences]
        on_b = [i for i in ("r1:0", "r2:0") if i in b.sequences]
        for _ in range(6):                     # a streams a chunk every second; b does not
            clock.advance(1.0)
            for i in on_a:
                a.chunk(i, "t")
        checks = ep.health_checks(clock.monotonic())
        await ep.batcher.stop()
        return checks, a, b, (on_a, on_b)

    checks, a, b, placed = run(go())
    assert placed == (["r1:0"], ["r2:0"])      # least active first: one each
    assert [(c.container, c.verdict) for c in checks] == [(str(b.id), health.Verdict.KILL)]
    assert checks[0].reason == ("stuck: 1 sequences in flight and no chunk or end for 6.0s "
                                "(stuck_after_s=5)")


def test_only_a_streaming_endpoint_has_a_stream_snapshot():
    ep = EndpointPool(app["embed"], clock=StepClock())
    assert ep.generation is None
    with pytest.raises(FloodwayError, match="does not stream"):
        ep.stream_snapshot(T0, 4)
    assert math.isinf(EndpointPool(app["gen"], clock=StepClock()).stream_snapshot(
        T0, 4).kv_cache_tokens)                  # nothing reported, none configured
