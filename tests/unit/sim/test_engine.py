"""The simulator's run: known answers on tiny traces, overload accounting, the snapshot that
decide() sees (the one snapshot builder's, with the arrival rate and per-priority counts), and
the policies it drives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.core.estimators import ArrivalRate
from floodway.core.snapshot import ContainerLoad, QueueLoad, build_snapshot, pipeline_slots
from floodway.routers.decide import Action, Decision, Request, decide
from floodway.sim import (
    ACTIONS,
    ColdStartModel,
    DesiredPolicy,
    HistogramPolicy,
    ServiceModel,
    SimConfig,
    Trace,
    simulate,
)
from floodway.sim.engine import ADMITTED, PRIORITY, TENANT, Simulator
from floodway.sim.kernel import BACKLOG
from tests.unit.sim.cases import (
    HEAVY_ROWS,
    WAIT,
    assert_same,
    bursty,
    code,
    every_20_min,
    overload_trace,
)


def test_sparse_arrivals_with_a_short_scaledown_are_all_cold() -> None:
    r = simulate(every_20_min(), route=WAIT, warm=WarmPool(scaledown_window_s=60),
                 cold=ColdStartModel.of(30), service=ServiceModel.of(0.1), check=True)
    assert r.requests == 6 and r.cold_requests == 6 and r.containers_started == 6
    assert r.cold_start_rate == 1.0
    assert list(r.decisions) == [code(Action.SPILL_COLD)] * 6
    # each waits the cold start, then 0.1 s of service: its batch is sent as the container
    # is ready (the batcher's 5 ms from its arrival ran out while it waited)
    assert r.p50_s == pytest.approx(30.1)
    # each container: warm from its start until 60 s idle after its batch
    assert r.warm_min == pytest.approx(6 * (0.1 + 60) / 60)
    assert r.starting_min == pytest.approx(6 * 0.5)
    assert r.idle_min == pytest.approx(r.warm_min - 6 * 0.1 / 60)


def test_a_floor_of_one_makes_every_request_warm() -> None:
    r = simulate(every_20_min(), route=WAIT, warm=WarmPool(min_containers=1,
                                                           scaledown_window_s=60),
                 service=ServiceModel.of(0.1), check=True)
    assert r.cold_requests == 0 and r.containers_started == 0
    assert list(r.decisions) == [code(Action.DISPATCH)] * 6
    assert r.span_min == 120 and r.warm_min == pytest.approx(120 * 1)
    assert r.busy_min == pytest.approx(6 * 0.1 / 60)
    assert r.p99_s == pytest.approx(0.105)
    assert r.cost_usd == pytest.approx(120 * 60 * 0.000222)
    assert r.warm_avg == pytest.approx(np.ones(120))


def test_a_long_scaledown_keeps_the_container_between_arrivals() -> None:
    r = simulate(every_20_min(), route=WAIT, warm=WarmPool(scaledown_window_s=1500),
                 service=ServiceModel.of(0.1))
    assert r.cold_requests == 1 and r.containers_started == 1


@pytest.mark.parametrize("spill", [("cold", "async"), ("async",), ()])
def test_overload_sheds_and_spills_as_decide_says(spill: tuple[str, ...]) -> None:
    cfg = dict(route=Route(max_inflight_per_container=2, max_queue=20, timeout_s=1.0,
                           spill=spill),
               warm=WarmPool(min_containers=2, max_containers=4),
               batching=Batching(max_batch_rows=4, wait_ms=5),
               cold=ColdStartModel.of([0.2, 0.4]), service=ServiceModel.of(0.05, 0.01))
    fast = simulate(overload_trace(), SimConfig(**cfg, check=True))
    slow = simulate(overload_trace(), SimConfig(**cfg, fast=False))
    assert np.array_equal(fast.decisions, slow.decisions)
    assert fast.cold_requests == slow.cold_requests and fast.p99_s == slow.p99_s
    n = np.bincount(fast.decisions, minlength=len(ACTIONS))
    assert n.sum() == 600 and n[code(Action.DISPATCH)] > 0 and n[code(Action.QUEUE)] > 0
    assert (fast.spill_cold > 0) == ("cold" in spill)
    assert (fast.spill_async > 0) == ("async" in spill)
    assert (fast.shed > 0) == ("async" not in spill)
    assert fast.spill_cold <= 2                      # never beyond max_containers
    assert fast.dispatched + fast.queued + fast.spill_cold + fast.spill_async + fast.shed == 600
    assert fast.p99_s <= 1.0 + 0.06                   # nothing queued past its deadline + batch


def test_scaled_to_zero_a_spill_to_async_still_starts_a_container() -> None:
    # Min 0 and a cold start longer than the deadline: decide() spills to async and asks for a
    # container (start_cold), as the local router does, so later requests are served warm.
    trace = Trace.from_times(np.arange(0.0, 120.0, 1.0), minutes=2)
    cfg = SimConfig(route=Route(timeout_s=2.0), warm=WarmPool(scaledown_window_s=600),
                    cold=ColdStartModel.of(30.0), service=ServiceModel.of(0.05))
    r = simulate(trace, cfg)
    # 0..28 s spill (the start takes 30 s); at 29 s waiting 1 s for it fits the deadline.
    assert r.containers_started == 1 and r.spill_async == 29 and r.served == 91
    assert_same(r, simulate(trace, replace(cfg, fast=False)))


def test_the_histogram_policy_prewarms_a_periodic_endpoint() -> None:
    counts = np.zeros(24 * 60, dtype=np.int64)
    counts[::15] = 3                                   # every 15 minutes
    tr = Trace.from_counts(counts)
    cfg = dict(route=WAIT, batching=Batching(), cold=ColdStartModel.of(30),
               service=ServiceModel.of(0.1))
    fixed = simulate(tr, SimConfig(**cfg, warm=WarmPool(scaledown_window_s=600)))
    hist = simulate(tr, SimConfig(**cfg, policy=HistogramPolicy(WarmPool())))
    pred = simulate(tr, SimConfig(**cfg, policy=DesiredPolicy(WarmPool(predictive=True))))
    # 3 arrivals at 10, 30, 50 s of the minute: the first two wait for the 30 s start
    assert fixed.cold_requests == 2 * 96
    assert hist.cold_requests < 0.1 * fixed.cold_requests
    assert hist.idle_min < fixed.idle_min
    assert pred.cold_requests == hist.cold_requests   # one container suffices: same floor


def test_a_container_holds_the_local_routers_pipeline_of_batches() -> None:
    # max_inflight_per_container=8 allows 8, but the router keeps 2 in a container's pipe.
    sim = Simulator(every_20_min(), SimConfig(route=Route(max_inflight_per_container=8)))
    assert sim.slots == pipeline_slots(8) == 2
    assert Simulator(every_20_min(), SimConfig(route=WAIT)).slots == 2
    one = SimConfig(route=Route(max_inflight_per_container=1))
    assert Simulator(every_20_min(), one).slots == 1


@pytest.mark.parametrize("fast", [True, False])
def test_a_request_that_comes_while_a_batch_forms_rides_in_it(fast) -> None:
    """The runtime's batcher forms one batch at a time: a second request 1 ms after the
    first, with another container idle, joins the first's batch (cut 5 ms after the first
    arrived) rather than opening its own on the idle container."""
    times = np.array([0.0, 0.001, 30.0, 30.010])
    cfg = SimConfig(route=Route(max_inflight_per_container=8, timeout_s=2.0),
                    warm=WarmPool(min_containers=2, scaledown_window_s=600),
                    batching=Batching(max_batch_rows=32, wait_ms=5),
                    service=ServiceModel.of(0.02, 0.01), fast=fast)
    res = simulate(Trace.from_times(times, minutes=1), cfg)
    # one batch of 2 rows (0.02 + 2 x 0.01 s) from 5 ms after the first: both end at 0.045
    assert res.latencies_s[:2] == pytest.approx([0.045, 0.044])
    # 10 ms apart, the first batch was cut (5 ms): the second runs alone on the idle one
    assert res.latencies_s[2:] == pytest.approx([0.035, 0.035])


class Recording(Simulator):
    """A run that checks every snapshot decide() gets against `build_snapshot` of the same
    state, built here: every live container's batches in flight and slots, a starting one's
    time since it was asked for, the FIFO queue at normal priority for one tenant, and the
    arrival rate of the runtime's `ArrivalRate`, fed here with each admitted request."""

    def __init__(self, trace: Trace, cfg: SimConfig) -> None:
        super().__init__(trace, cfg)
        self.expected_rate = ArrivalRate()
        self.snaps: list = []

    def decision(self, i: int, now: float, rows: int) -> Decision:
        snap = self.snapshot(now, i)
        loads = [ContainerLoad(str(b.id), ("busy" if b.batches else "ready") if b.warm
                               else "starting", tuple(x.rows for x in b.batches),
                               pipeline_slots(self.cfg.route.max_inflight_per_container),
                               0.0 if b.warm else now - b.created_s) for b in self.live]
        q = len(self.queue)
        queue = QueueLoad((0, self.queued_rows, 0), (0, q, 0), {TENANT: q} if q else {})
        assert snap == build_snapshot(now, self.cfg, loads, queue,
                                      service=self.cfg.service.fit,
                                      cold_start_s=self.cfg.cold.estimate_s,
                                      arrival_rows_per_s=self.expected_rate.rate(now))
        d = decide(snap, Request(rows=rows, deadline_s=now + self.cfg.route.timeout_s,
                                 priority=PRIORITY, tenant=TENANT))
        assert d == super().decision(i, now, rows)
        if d.action in ADMITTED:
            self.expected_rate.record(now, rows)
        self.snaps.append(snap)
        return d


@pytest.mark.parametrize("mode", [dict(fast=False), dict(check=True)])
def test_the_snapshot_is_the_one_builders_with_arrival_rate_and_priorities(mode) -> None:
    # Scaled to zero with a deadline longer than a cold start: requests wait in the queue for
    # containers that are starting.
    trace = bursty(10, 20, rows=True)
    cfg = {**HEAVY_ROWS, "route": Route(max_inflight_per_container=2, max_queue=64,
                                        timeout_s=40.0, spill=("cold",)),
           "warm": WarmPool(scaledown_window_s=30, max_containers=3)}
    sim = Recording(trace, SimConfig(**cfg, **mode))
    sim.run()
    assert len(sim.snaps) == trace.requests                  # decide() saw every arrival
    rates = [s.arrival_rows_per_s for s in sim.snaps]
    assert max(rates) > 10 and min(rates) == 0.0
    queued = [s for s in sim.snaps if s.queued]
    assert queued and all(s.queued_by_priority == (0, s.queued, 0) and
                          s.queued_rows_by_priority == (0, s.queued_rows, 0) and
                          s.tenant_queued == {TENANT: s.queued} for s in queued)
    starting = [c for s in sim.snaps for c in s.containers if c.state == "starting"]
    assert starting and all(0 < c.ready_in_s <= 30.0 for c in starting)
    assert all(s.batch_wait_s == 0.005 for s in sim.snaps)


def test_the_arrival_rate_decides_a_dispatch_and_both_modes_agree() -> None:
    # One warm container. The first request runs alone: 0.05 + 0.25 s from 5 ms on. At 0.1 s
    # the second finds a free slot behind 0.3 s of backlog; alone, 0.3 + 0.3 s would fit its
    # budget (0.8 s x 0.85 = 0.68 s). But one row was admitted in the last 5 s (0.2 rows/s),
    # so ceil(0.2 x (0.3 + 0.005)) = 1 more row is expected in its batch: 0.3 + 0.55 s does
    # not fit, nor does waiting for the slot, and nothing may spill: it is shed.
    trace = Trace.from_times([0.0, 0.1], minutes=1)
    cfg = SimConfig(route=Route(max_inflight_per_container=2, max_queue=8, timeout_s=0.8,
                                spill=()),
                    warm=WarmPool(min_containers=1, scaledown_window_s=600),
                    batching=Batching(max_batch_rows=32, wait_ms=5),
                    service=ServiceModel.of(0.05, 0.25))
    sim = Simulator(trace, cfg)
    fast = sim.run()
    assert list(fast.decisions) == [code(Action.DISPATCH), code(Action.SHED)]
    assert sim.seg.stops[BACKLOG] == 1          # the segment kernel stopped there too
    assert_same(fast, simulate(trace, replace(cfg, fast=False)))
    assert_same(fast, simulate(trace, replace(cfg, check=True)))


@pytest.mark.parametrize(("second_s", "second"), [(4.0, Action.SHED), (6.0, Action.DISPATCH)])
def test_the_arrival_rate_forgets_rows_older_than_its_window(second_s, second) -> None:
    # The first request's batch runs 9 s (6 s + 3 s per row). A second arriving while it runs
    # has a free slot behind 9 s of backlog and a budget of 23 s x 0.85 = 19.55 s: alone
    # (9 + 9 s) it fits, with one more row expected (9 + 12 s) it does not. At 4 s the first
    # request is within the rate window (5 s): shed; at 6 s it has left it: dispatched.
    trace = Trace.from_times([0.0, second_s], minutes=1)
    cfg = SimConfig(route=Route(max_inflight_per_container=2, timeout_s=23.0, spill=()),
                    warm=WarmPool(min_containers=1, scaledown_window_s=600),
                    service=ServiceModel.of(6.0, 3.0))
    fast = simulate(trace, cfg)
    assert list(fast.decisions) == [code(Action.DISPATCH), code(second)]
    assert_same(fast, simulate(trace, replace(cfg, fast=False)))
    assert_same(fast, simulate(trace, replace(cfg, check=True)))


class NoRate:
    """An arrival rate that stays 0 (a snapshot without one, as the simulator had)."""

    def rate(self, now_s: float) -> float:
        return 0.0

    def record(self, now_s: float, rows: int) -> None:
        pass


@pytest.mark.parametrize("warm", [1, 2])
def test_the_arrival_rate_changes_decisions_and_the_fast_mode_stays_exact(warm) -> None:
    trace = bursty(10 + warm, 60, rows=True)
    cfg = SimConfig(**{**HEAVY_ROWS, "warm": WarmPool(min_containers=warm,
                                                       buffer_containers=2 - warm,
                                                       scaledown_window_s=60)})
    slow = simulate(trace, replace(cfg, fast=False))
    blind = Simulator(trace, replace(cfg, fast=False))
    blind.arrivals = NoRate()
    assert not np.array_equal(blind.run().decisions, slow.decisions)
    sim = Simulator(trace, cfg)
    assert_same(sim.run(), slow)
    assert sim.bulk_requests > 0.3 * trace.requests          # the kernel decided many
