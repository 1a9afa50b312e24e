"""Contention in the simulator: a batch runs its time x the factor of the containers busy
as it starts (`ServiceModel.contention`, read from a bench run's batch_times.json), the
exact fast path steps aside for it, and the router's estimate may follow the simulated
batches (`ServiceModel.follow_batches`) as the runtime's does."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.errors import FloodwayError
from floodway.routers.service import ServiceTime
from floodway.sim import SimConfig, Trace, simulate
from floodway.sim.engine import Simulator
from floodway.sim.model import BATCH_TIMES_FORMAT, CpuShare, ServiceModel, contention_of
from tests.unit.sim.cases import assert_same

TWO = WarmPool(min_containers=2, max_containers=2, buffer_containers=0,
               scaledown_window_s=600)
LINE = ServiceTime(0.005, 0.02)              # 25 ms for a one-row batch


def test_factor_by_busy_containers() -> None:
    m = ServiceModel(LINE, contention=(0.5, 2.0))
    assert [m.factor(k) for k in (0, 1, 2, 5)] == [0.5, 0.5, 2.0, 2.0]   # last for more
    assert not m.plain and ServiceModel(LINE).plain and ServiceModel(LINE).factor(3) == 1.0
    for bad in ((0.0,), (1.0, -1.0)):
        with pytest.raises(ValueError, match="contention factors"):
            ServiceModel(LINE, contention=bad)
    with pytest.raises(ValueError, match="follow_batches"):
        ServiceModel(LINE, follow_batches=-1)


def test_contention_is_read_from_batch_times_with_gaps_filled() -> None:
    def by(*pairs):
        return {"by_busy": [{"busy": k, "factor": f} for k, f in pairs]}
    assert contention_of(None) == () and contention_of(by()) == ()
    assert contention_of(by((1, 0.8), (2, 1.4))) == (0.8, 1.4)
    # a count not measured takes the nearest measured below it (the smallest below all)
    assert contention_of(by((2, 0.9), (4, 1.6))) == (0.9, 0.9, 0.9, 1.6)
    for bad in ({"by_busy": [{"busy": 1}]}, by((0, 1.0)), by((1, 0.0)), {"x": 1}):
        with pytest.raises(FloodwayError, match="contention"):
            contention_of(bad, "run/batch_times.json")
    doc = {"format": BATCH_TIMES_FORMAT, "fit": {"per_batch_s": 0.02, "per_row_s": 0.005},
           "contention": by((1, 0.8), (2, 1.4))}
    assert ServiceModel.from_batch_times(doc).contention == (0.8, 1.4)
    del doc["contention"]                  # written before the field: no factor
    assert ServiceModel.from_batch_times(doc).contention == ()


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_runs_slower_while_the_other_container_is_busy(fast: bool) -> None:
    # Two one-row requests at once on two containers: the first batch starts alone (x1),
    # the second while the first runs (x3). Spread 10 s apart, each runs alone.
    cfg = dict(route=Route(timeout_s=5.0, spill=()), warm=TWO,
               batching=Batching(max_batch_rows=1, wait_ms=10), fast=fast,
               service=ServiceModel(LINE, contention=(1.0, 3.0)))
    both = simulate(Trace.from_times(np.zeros(2), minutes=1), **cfg)
    assert sorted(both.latencies_s.tolist()) == pytest.approx([0.025, 0.075])
    apart = simulate(Trace.from_times(np.array([0.0, 10.0]), minutes=1), **cfg)
    assert apart.latencies_s.tolist() == pytest.approx([0.025, 0.025])
    plain = simulate(Trace.from_times(np.zeros(2), minutes=1),
                     **{**cfg, "service": ServiceModel(LINE)})
    assert plain.latencies_s.tolist() == pytest.approx([0.025, 0.025])


def test_the_fast_path_steps_aside_and_decisions_match_decide() -> None:
    rng = np.random.default_rng(5)
    tr = Trace.from_times(np.sort(rng.uniform(0, 30, 1500)), minutes=1)
    cfg = dict(route=Route(timeout_s=0.5, max_queue=16), warm=TWO,
               batching=Batching(max_batch_rows=8, wait_ms=5),
               service=ServiceModel(ServiceTime(0.004, 0.02), contention=(0.8, 1.6)))
    sim = Simulator(tr, SimConfig(**cfg))
    sim.setup()
    assert sim.seg is None                             # no bulk segments with factors
    fast, slow = simulate(tr, **cfg), simulate(tr, **cfg, fast=False)
    assert_same(fast, slow)
    assert_same(fast, simulate(tr, **cfg, check=True))     # every decision as decide's
    flat = simulate(tr, **{**cfg, "service": ServiceModel(ServiceTime(0.004, 0.02))})
    assert fast.p99_s > flat.p99_s


def test_the_routers_estimate_follows_slower_batches() -> None:
    # Batches run 3x the fit: a router that keeps planning with the fit dispatches work
    # that cannot make its deadline; one that re-fits on its batches spills it instead.
    rng = np.random.default_rng(2)
    tr = Trace.from_times(np.sort(rng.uniform(0, 20, 900)), minutes=1)
    cfg = dict(route=Route(timeout_s=0.4, max_queue=64, spill=("async",)), warm=TWO,
               batching=Batching(max_batch_rows=8, wait_ms=5))
    slow = ServiceModel(ServiceTime(0.004, 0.02), contention=(3.0,))
    fixed = simulate(tr, **cfg, service=slow)
    follows = simulate(tr, **cfg, service=ServiceModel(slow.fit, contention=(3.0,),
                                                      follow_batches=64))
    assert follows.async_jobs > fixed.async_jobs
    assert follows.p99_s < fixed.p99_s


def test_the_load_term_is_checked_and_read_from_batch_times() -> None:
    ld = CpuShare(cores=2, other_cores=0.2, other_per_request_s=0.004, at_rest=0.9)
    # 2 busy: (2 - 0.2) / 2 = 0.9 of a core at rest; at 100 requests/s (2 - 0.6) / 2 = 0.7
    assert ld.factor(0, 2) == pytest.approx(1.0) and ld.factor(100, 2) == pytest.approx(0.9 / 0.7)
    assert ld.factor(100, 1) == pytest.approx(0.9)          # one container keeps its core
    # past the cores: each container still gets its fair share among 2 + 2 processes
    assert ld.factor(1000, 2) == pytest.approx(0.9 / 0.5)
    m = ServiceModel(LINE, load=ld)
    assert not m.plain and ServiceModel(LINE).load.factor(500, 2) == 1.0
    for bad in (dict(cores=-1), dict(other_per_request_s=-0.1), dict(at_rest=0.0)):
        with pytest.raises(ValueError, match="load needs"):
            CpuShare(**bad)
    doc = {"format": BATCH_TIMES_FORMAT, "fit": {"per_batch_s": 0.02, "per_row_s": 0.005},
           "load": {"window_s": 1.0, "intervals": 40, "cores": 2, "other_cores": 0.2,
                    "other_per_request_s": 0.004, "at_rest": 0.9}}
    assert ServiceModel.from_batch_times(doc).load == ld
    for none in (None, {"at_rest": 0.95, "per_rps": 0.0012}):   # not fitted, or older form
        doc["load"] = none
        assert not ServiceModel.from_batch_times(doc).load.active
    doc["load"] = {"cores": 2, "at_rest": "fast"}
    with pytest.raises(FloodwayError, match="load"):
        ServiceModel.from_batch_times(doc)


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_runs_slower_while_requests_arrive_fast(fast: bool) -> None:
    # One core; the router and client take 0.08 cores per request/s. The first request
    # alone: 1 arrival in the second before its batch starts (itself), 0.92 of the core
    # left. The last of 11 within 0.1 s: 11 in that second, 0.12 left, floored at the fair
    # share of 1 / (1 + 2) of the core.
    cfg = dict(route=Route(timeout_s=60.0, spill=()), warm=WarmPool(
        min_containers=1, max_containers=1, buffer_containers=0, scaledown_window_s=600),
        fast=fast, batching=Batching(max_batch_rows=1, wait_ms=0),
        service=ServiceModel(LINE, load=CpuShare(1, 0.0, 0.08)))
    times = np.concatenate([[0.0], 30.0 + np.arange(11) * 0.01])
    res = simulate(Trace.from_times(times, minutes=1), **cfg)
    assert res.latencies_s[0] == pytest.approx(0.025 / 0.92)
    calm = simulate(Trace.from_times(times, minutes=1), **{**cfg, "service": ServiceModel(LINE)})
    assert calm.latencies_s[0] == pytest.approx(0.025)
    assert res.p99_s > 2.5 * calm.p99_s
