"""The simulator's async backlog: spilled requests become jobs that run, as the local pool
runs them, in batches of their own bounded by a share of the deadline, only on containers
with nothing in flight while no sync request waits; sync work that comes meanwhile waits
behind one job batch, and the jobs wait for it."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.routers.batch_item import JOB_BATCH_SHARE
from floodway.routers.decide import Action
from floodway.sim import ColdStartModel, ServiceModel, SimConfig, Trace, simulate
from floodway.sim.engine import _Sim
from tests.unit.sim.cases import overload_trace

# 0.1 s a batch + 0.05 s a row: a job batch may take 0.25 x 2 s = 0.5 s, so 8 rows.
CFG = SimConfig(route=Route(max_inflight_per_container=8, timeout_s=2.0),
                warm=WarmPool(min_containers=1, max_containers=1, scaledown_window_s=600),
                batching=Batching(max_batch_rows=32, wait_ms=5),
                service=ServiceModel.of(0.1, 0.05))


def _ready_sim(n: int) -> _Sim:
    """A run set up (one warm container, idle) but not started; arrivals are fed by hand."""
    sim = _Sim(Trace.from_times(np.linspace(0.0, 1.0, n, endpoint=False), minutes=1), CFG)
    sim.setup()
    return sim


def _run_events(sim: _Sim, until_s: float = 5.0) -> None:
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
    sim = _Sim(overload_trace(), SimConfig(**cfg))
    res = sim.run()
    assert res.spill_async > 100
    assert sim.jobs_run == res.spill_async + sim.handed_off and not sim.jobs
    assert sim.jobs_end_s > 1.0                  # after the one-second burst
    # the containers were busy with the jobs: more busy time than the served batches need
    fast = simulate(overload_trace(), SimConfig(**cfg, fast=False))
    assert fast.busy_min == res.busy_min and np.array_equal(fast.decisions, res.decisions)
    assert res.busy_min * 60 > 0.05 * math.ceil(res.spill_async / 4)
