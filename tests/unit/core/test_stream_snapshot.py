"""build_stream_snapshot(): remaining tokens -> end times, KV room, starting containers, the
route's limits, and a decision end to end."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from floodway.config import Route, WarmPool
from floodway.core.generation import GenerationModel
from floodway.core.stream_snapshot import SequenceLoad, build_stream_snapshot
from floodway.routers.decide import Action, ServiceTime
from floodway.routers.decide_stream import SequenceQueue, StreamRequest, decide_stream

# 1,000 prompt tokens/s; a step of 20 ms + 10 ms per active sequence.
MODEL = GenerationModel(ServiceTime(0.001, 0.0), ServiceTime(0.01, 0.02))


@dataclass(frozen=True)
class Ep:
    route: Route = Route(max_queue=20, spill=("async",))
    warm: WarmPool = WarmPool(max_containers=3)


def build(*loads: SequenceLoad, **kw):
    base = dict(model=MODEL, cold_start_s=10.0, max_sequences=4, max_new_tokens=100)
    return build_stream_snapshot(50.0, Ep(), loads, **{**base, **kw})


def test_running_sequences_end_after_their_remaining_tokens_at_the_current_step():
    s = build(SequenceLoad("a", "busy", active=3, max_sequences=4, remaining_tokens=(30, 10)))
    c = s.containers[0]
    step = 0.02 + 0.01 * 3
    # The third sequence is not itemized: it counts at the max_new_tokens cap (100).
    assert c.ends_in_s == pytest.approx((10 * step, 30 * step, 100 * step))
    assert c.state == "ready" and c.free_now(50) == 1
    assert math.isinf(c.kv_free_tokens)           # nothing reported: slots only


def test_reported_kv_use_limits_room():
    s = build(SequenceLoad("a", "ready", active=2, max_sequences=4, remaining_tokens=(5, 5),
                           kv_tokens=600, kv_capacity=800))
    c = s.containers[0]
    assert c.kv_free_tokens == 200 and c.kv_per_sequence == 300 and c.kv_capacity == 800
    assert c.free_now(150) == 1 and c.free_now(250) == 0
    # Once both end, 800 tokens hold three sequences of 250 (slots allow two more).
    assert c.slot_instants(250) == pytest.approx([5 * 0.04, 5 * 0.04, 5 * 0.04])


def test_starting_containers_and_the_cold_start_estimate():
    s = build(SequenceLoad("s1", "starting", max_sequences=4, starting_for_s=4.0),
              SequenceLoad("s2", "warming", max_sequences=4, starting_for_s=25.0),
              kv_cache_tokens=1000)
    assert s.cold_start_s == 25.0                  # a start still running, longer than 10 s
    s1, s2 = s.containers
    assert s1.ready_in_s == pytest.approx(21.0) and s2.ready_in_s == pytest.approx(25.0)
    assert s1.slot_instants(300) == [21.0] * 3     # the KV budget fits three of 300
    assert s.kv_cache_tokens == 1000


def test_route_and_pool_limits_come_from_the_endpoint():
    s = build(queue=SequenceQueue.fifo(3, 30, 300))
    assert (s.max_queue, s.max_containers, s.spill, s.max_sequences) == (20, 3, ("async",), 4)
    assert s.queue.sequences == 3 and math.isinf(s.kv_cache_tokens)
    assert build(max_containers=1).max_containers == 1


def test_a_snapshot_decides_end_to_end():
    loads = [SequenceLoad("a", "busy", active=4, max_sequences=4, remaining_tokens=(2,) * 4)]
    s = build(*loads)
    r = StreamRequest(prompt_tokens=100, max_new_tokens=20, deadline_s=51.0)
    d = decide_stream(s, r)
    # Slots free after 2 steps of 60 ms; prefill 0.1 s; a full step 60 ms.
    assert d.action == Action.QUEUE and d.est_wait_s == pytest.approx(0.12 + 0.1 + 0.06)
    far = [SequenceLoad("a", "busy", active=4, max_sequences=4, remaining_tokens=(50,) * 4)]
    assert decide_stream(build(*far), r).action == Action.SPILL_ASYNC
