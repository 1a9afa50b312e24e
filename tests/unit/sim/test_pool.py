"""The simulated pool: Modal's buffer, the warm target's `keep` carried out through
`floodway.core.reconcile` (starts at a tick, idle containers stopped longest idle first), and
the async backlog: spilled requests become jobs that run, as the local pool runs them, in
batches of their own bounded by a share of the deadline, only on containers with nothing in
flight while no sync request waits; sync work that comes meanwhile waits behind one job
batch, and the jobs wait for it."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.core.reconcile import Box
from floodway.routers.batch_item import JOB_BATCH_SHARE
from floodway.routers.decide import Action
from floodway.sim import ColdStartModel, ServiceModel, SimConfig, Trace, simulate
from floodway.sim.engine import Simulator
from floodway.sim.pool import CHECK
from floodway.warmers.target import WarmTarget
from tests.unit.sim.cases import WAIT, assert_same, overload_trace


def test_a_buffer_container_starts_as_soon_as_the_floor_is_busy() -> None:
    # Modal's buffer: with min 1 and buffer 1, while the endpoint is active (the policy saw
    # the arrival at 10 s at its 60 s tick), a second container starts when the first takes
    # a batch (at 70 s), not at the next tick; then the pool idles back to one container.
    # The first arrival found the endpoint idle: no buffer.
    trace = Trace.from_times(np.array([10.0, 70.0]), minutes=10)
    cfg = SimConfig(route=WAIT, warm=WarmPool(min_containers=1, buffer_containers=1,
                                              scaledown_window_s=60),
                    service=ServiceModel.of(5.0), cold=ColdStartModel.of(20.0))
    sim = Simulator(trace, cfg)
    r = sim.run()
    assert r.containers_started == 1 and r.cold_requests == 0
    floor, extra = sim.all
    assert extra.created_s == 70.0 and extra.ready_s == 90.0
    # Either may go (the longest idle goes first, as on Modal): one stops, one stays warm.
    stops = sorted((floor.stop_s, extra.stop_s))
    assert 75.0 + 60.0 <= stops[0] <= 90.0 + 60.0 + 60.0 and stops[1] == math.inf
    assert_same(r, simulate(trace, replace(cfg, fast=False)))
    none = simulate(trace, replace(cfg, warm=WarmPool(min_containers=1, scaledown_window_s=60)))
    assert none.containers_started == 0 and none.warm_min < r.warm_min


def pool(warm: int, floor: int = 1) -> Simulator:
    """A pool set up as at a run's start with `warm` warm containers and a warm target of
    `floor` (no buffer), 60 s scaledown, before any event ran."""
    sim = Simulator(Trace.from_times([0.0], minutes=10),
               SimConfig(warm=WarmPool(min_containers=warm, scaledown_window_s=60)))
    sim.setup()
    sim.heap.clear()                        # no events pending: no tick, no idle checks
    for box in sim.live:
        box.check_at_s = math.inf
    sim.target = WarmTarget(floor, 0, 60.0, "test")
    return sim


def test_containers_are_boxes_for_reconcile() -> None:
    sim = pool(2)
    a, b = sim.live
    b.batches.append(object())
    c = sim.start_box(5.0)
    assert [x.box() for x in sim.live] == [Box("0", "ready", False, 0.0),
                                           Box("1", "busy", True, 0.0),
                                           Box("2", "starting", False, c.ready_s)]
    a.idle_since_s = 3.0
    assert a.box() == Box("0", "ready", False, 3.0)          # not a stale one


def test_an_idle_check_stops_the_longest_idle_containers_first() -> None:
    # Three idle containers, a target of one: at the check of the one idle since 10 s (due
    # at 70 s), reconcile stops it and the one idle since 0 s (due since 60 s); the one idle
    # since 50 s stays and is checked again when its window runs out (110 s).
    sim = pool(3)
    first, second, third = sim.live
    for box, since in ((first, 0.0), (second, 10.0), (third, 50.0)):
        box.idle_since_s = since
    sim.on_check(second, 70.0)
    assert (first.stop_s, second.stop_s, third.stop_s) == (70.0, 70.0, math.inf)
    assert sim.live == [third]
    assert [(t, kind, obj) for t, kind, _, obj, _ in sim.heap] == [(110.0, CHECK, third)]


def test_a_check_within_the_target_stops_nothing() -> None:
    sim = pool(2, floor=2)
    first, second = sim.live
    sim.on_check(first, 60.0)
    assert sim.live == [first, second] and first.stop_s == second.stop_s == math.inf


def test_a_tick_starts_what_the_target_keeps_and_rechecks_a_shorter_window() -> None:
    sim = pool(1)
    warm = sim.live[0]
    warm.idle_since_s = 50.0
    sim.policy = lambda now, hist, measured, state: (WarmTarget(3, 0, 30.0, "test"), state)
    sim.on_tick(60.0)
    assert len(sim.live) == 3 and sim.started == 2
    assert not sim.live[1].warm and not sim.live[2].warm
    # The window went from 60 s to 30 s: the idle one is due at 80 s, checked then.
    assert warm.stop_s == math.inf and warm.check_at_s == 80.0
    assert (80.0, CHECK, warm) in [(t, kind, obj) for t, kind, _, obj, _ in sim.heap]
    # The target drops to one: the idle one goes (its window ran out), the starting stay.
    sim.policy = lambda now, hist, measured, state: (WarmTarget(1, 0, 30.0, "test"), state)
    sim.on_tick(90.0)
    assert warm.stop_s == 90.0 and len(sim.live) == 2


# 0.1 s a batch + 0.05 s a row: a job batch may take 0.25 x 2 s = 0.5 s, so 8 rows.
CFG = SimConfig(route=Route(max_inflight_per_container=8, timeout_s=2.0),
                warm=WarmPool(min_containers=1, max_containers=1, scaledown_window_s=600),
                batching=Batching(max_batch_rows=32, wait_ms=5),
                service=ServiceModel.of(0.1, 0.05))


def _ready_sim(n: int) -> Simulator:
    """A run set up (one warm container, idle) but not started; arrivals are fed by hand."""
    sim = Simulator(Trace.from_times(np.linspace(0.0, 1.0, n, endpoint=False), minutes=1), CFG)
    sim.setup()
    return sim


def _run_events(sim: Simulator, until_s: float = 5.0) -> None:
    """The heap's events until `until_s` (the policy's ticks go on to the trace's end)."""
    while sim.heap and sim.heap[0][0] < until_s:
        sim.handle(heapq.heappop(sim.heap), sim.trace.end_s)


def test_jobs_run_on_an_idle_container_in_batches_bounded_by_the_deadline_share() -> None:
    sim = _ready_sim(12)
    (box,) = sim.live
    sim.add_job(0, 0.0)                 # an idle container takes a job at once
    assert box.batches[0].low and box.batches[0].rows == 1
    _run_events(sim)
    sim.jobs.extend(range(1, 13))       # a backlog of 12, found when it went idle
    assert sim.run_jobs(box, 0.2)
    first = box.batches[0]
    assert first.low and first.rows == 8 and first.start_s == 0.2      # sent at once
    assert sim.fit.seconds(first.rows) <= JOB_BATCH_SHARE * CFG.route.timeout_s
    assert sim.fit.seconds(first.rows + 1) > JOB_BATCH_SHARE * CFG.route.timeout_s
    assert len(sim.jobs) == 4 and len(box.batches) == 1                # one job batch only
    _run_events(sim)
    assert sim.jobs_run == 13 and not sim.jobs
    assert sim.jobs_end_s == pytest.approx(0.2 + 0.5 + 0.3)            # 8 rows, then 4
    assert np.isnan(sim.lat_end).all()      # answered 202 when they spilled: no latency


def test_a_sync_request_waits_behind_one_job_batch_and_the_jobs_wait_for_it() -> None:
    sim = _ready_sim(13)
    sim.jobs.extend(range(12))
    assert sim.run_jobs(sim.live[0], 0.0)
    d = sim.decision(12, 0.2, 1)
    assert d.action == Action.DISPATCH           # a free slot behind the job batch
    sim.act(d, 12, 1, 0.2)
    _run_events(sim)
    # behind the job batch (ends at 0.5), ahead of the 4 jobs left: 0.5 + 0.15
    assert sim.lat_end[12] == pytest.approx(0.65)
    assert sim.jobs_end_s == pytest.approx(0.65 + 0.3)


def test_every_spilled_request_runs_as_a_job_after_the_burst() -> None:
    cfg = dict(route=Route(max_inflight_per_container=2, max_queue=20, timeout_s=1.0),
               warm=WarmPool(min_containers=2, max_containers=4),
               batching=Batching(max_batch_rows=4, wait_ms=5),
               cold=ColdStartModel.of([0.2, 0.4]), service=ServiceModel.of(0.05, 0.01))
    sim = Simulator(overload_trace(), SimConfig(**cfg))
    res = sim.run()
    assert res.spill_async > 100
    assert sim.jobs_run == res.spill_async + sim.handed_off and not sim.jobs
    assert sim.jobs_end_s > 1.0                  # after the one-second burst
    # the containers were busy with the jobs: more busy time than the served batches need
    fast = simulate(overload_trace(), SimConfig(**cfg, fast=False))
    assert fast.busy_min == res.busy_min and np.array_equal(fast.decisions, res.decisions)
    assert res.busy_min * 60 > 0.05 * math.ceil(res.spill_async / 4)
