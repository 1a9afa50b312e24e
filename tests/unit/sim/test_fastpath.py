"""The exact shortcuts: the dispatch test agrees with decide() on the one builder's snapshot,
and the bulk fast mode gives the same SimResult as decide() on every request."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.core.snapshot import ContainerLoad, build_snapshot
from floodway.routers.decide import Action, Request, ServiceTime, decide
from floodway.sim import ColdStartModel, ServiceModel, SimConfig, Trace, simulate
from floodway.sim.engine import Simulator
from floodway.sim.fastpath import dispatch_box
from floodway.sim.pool import SimBatch, SimBox
from tests.unit.sim.cases import assert_same, bulk_cases, code


def test_fast_path_equals_decide_on_a_real_shaped_trace() -> None:
    rng = np.random.default_rng(3)
    counts = rng.poisson(rng.choice([0, 2, 40], size=90, p=[0.5, 0.3, 0.2]))
    tr = Trace.from_counts(counts, spread="poisson", seed=1)
    for warm in (WarmPool(scaledown_window_s=60),
                 WarmPool(scaledown_window_s=60, predictive=True, buffer_containers=1)):
        cfg = dict(route=Route(max_inflight_per_container=2, max_queue=8, timeout_s=35.0),
                   warm=warm, batching=Batching(max_batch_rows=4, wait_ms=5),
                   cold=ColdStartModel.of([20.0, 30.0]), service=ServiceModel.of([0.2, 0.6]))
        fast = simulate(tr, SimConfig(**cfg, check=True))
        slow = simulate(tr, SimConfig(**cfg, fast=False))
        assert np.array_equal(fast.decisions, slow.decisions)
        assert (fast.cold_requests, fast.warm_min, fast.busy_min) == \
            (slow.cold_requests, slow.warm_min, slow.busy_min)


@pytest.mark.parametrize("case", list(bulk_cases()))
def test_the_bulk_fast_mode_gives_the_same_result_as_decide_on_every_request(case) -> None:
    trace, cfg = bulk_cases()[case]
    sim = Simulator(trace, SimConfig(**cfg))
    fast = sim.run()
    assert_same(fast, simulate(trace, SimConfig(**cfg, fast=False)))
    assert_same(fast, simulate(trace, SimConfig(**cfg, check=True)))
    if case in ("bursty", "bursty, two warm", "bursty, batching rows", "bursty, three warm",
                "bursty, rows, four warm, no batch wait", "bursty, sampled times"):
        assert sim.bulk_requests > 0.9 * trace.requests    # the shortcut is really taken


def test_the_fast_path_dispatches_to_an_idle_container_whatever_the_estimate() -> None:
    # A deadline shorter than the batch time: decide() still sends it to an idle container.
    tr = Trace.from_times([1.0, 30.0, 30.001, 70.0], minutes=2)
    cfg = dict(route=Route(max_inflight_per_container=2, max_queue=8, timeout_s=0.05),
               warm=WarmPool(min_containers=1), service=ServiceModel.of(0.1))
    fast = simulate(tr, SimConfig(**cfg, check=True))
    assert fast.decisions[0] == code(Action.DISPATCH)
    assert_same(fast, simulate(tr, SimConfig(**cfg, fast=False)))


ENDPOINT = SimConfig(route=Route(max_inflight_per_container=2),
                     batching=Batching(max_batch_rows=16, wait_ms=5),
                     warm=WarmPool(max_containers=8))


def random_pool(rng: np.random.Generator, fit: ServiceTime) -> list[SimBox]:
    """Up to 4 containers, warm (0-2 batches of 1-16 rows, their backlog summed as the pool
    sums it) or starting."""
    boxes = []
    for cid in range(int(rng.integers(1, 5))):
        box = SimBox(cid, 0.0, 0.0)
        box.warm = bool(rng.random() < 0.85)
        for _ in range(int(rng.integers(0, 3)) if box.warm else 0):
            b = SimBatch()
            b.rows = int(rng.integers(1, 17))
            b.est_s = fit.seconds(b.rows)
            box.batches.append(b)
        box.backlog_s = sum(b.est_s for b in box.batches) if box.batches else 0.0
        boxes.append(box)
    return boxes


def test_the_dispatch_test_agrees_with_decide_bit_for_bit() -> None:
    """Random pools, rows, deadlines and arrival rates with an empty queue: the dispatch test
    dispatches exactly when decide() does (on `build_snapshot` of the same state), to the
    container decide() would pick, and asks for the rate only when no container is idle."""
    rng = np.random.default_rng(11)
    fit = ServiceTime(per_row_s=0.0071, per_batch_s=0.0213)
    seen = {True: 0, False: 0}
    rate_mattered = 0
    for _ in range(4000):
        boxes = random_pool(rng, fit)
        now = float(rng.uniform(0, 100))
        rows = int(rng.integers(1, 24))
        deadline = now + float(rng.choice([0.0, rng.uniform(0.0, 0.5)]))
        rate = float(rng.choice([0.0, rng.uniform(0, 400)]))
        asked = []

        def rate_of(i: int, t: float, rate: float = rate, asked: list = asked) -> float:
            asked.append((i, t))
            return rate

        box = dispatch_box(boxes, 2, fit, 16, now, deadline, rows, 0.005, rate_of, 7)
        loads = [ContainerLoad(b.key, ("busy" if b.batches else "ready") if b.warm
                               else "starting", tuple(x.rows for x in b.batches), 2)
                 for b in boxes]
        snap = build_snapshot(now, ENDPOINT, loads, service=fit, cold_start_s=30.0,
                              arrival_rows_per_s=rate)
        d = decide(snap, Request(rows=rows, deadline_s=deadline))
        assert (box is not None) == (d.action == Action.DISPATCH)
        seen[box is not None] += 1
        if box is not None:
            assert box.backlog_s == d.est_wait_s
            assert box is min((b for b in boxes if b.warm and len(b.batches) < 2),
                              key=lambda b: b.backlog_s)
        idle = any(b.warm and not b.batches for b in boxes)
        assert asked in ([], [(7, now)]) and (not asked or not idle)
        if asked and rate and box is None:
            blind = decide(build_snapshot(now, ENDPOINT, loads, service=fit, cold_start_s=30.0),
                           Request(rows=rows, deadline_s=deadline))
            rate_mattered += blind.action == Action.DISPATCH
    assert min(seen.values()) > 500 and rate_mattered > 10
