"""Traces, endpoint settings and a comparison shared by the simulator's tests."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from floodway.config import Batching, Route, WarmPool
from floodway.routers.decide import Action
from floodway.sim import ACTIONS, ColdStartModel, ServiceModel, SimResult, Trace

WAIT = Route(max_inflight_per_container=4, max_queue=100, timeout_s=120.0, spill=("cold",))

EMBED = dict(route=Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0),
             warm=WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=120,
                           max_containers=8),
             batching=Batching(max_batch_rows=32, wait_ms=5), cold=ColdStartModel.of(30.0),
             service=ServiceModel.of(0.02, 0.005))

# Rows that cost more than the batch: a request's batch grows with the rows that arrive while
# it waits, so the arrival rate decides between dispatch, queue and spill.
HEAVY_ROWS = {**EMBED, "route": Route(max_inflight_per_container=2, max_queue=64, timeout_s=1.0),
              "service": ServiceModel.of(0.02, 0.03)}


def code(action: Action) -> int:
    return ACTIONS.index(action)


def every_20_min(minutes: int = 120) -> Trace:
    counts = np.zeros(minutes, dtype=np.int64)
    counts[::20] = 1
    return Trace.from_counts(counts)


def overload_trace() -> Trace:
    # 600 requests within one second, then quiet
    return Trace.from_times(np.linspace(0.0, 1.0, 600, endpoint=False), minutes=2)


def bursty(seed: int = 0, minutes: int = 240, rows: bool = False) -> Trace:
    """Clumps of near-simultaneous arrivals between quiet gaps, as in the Azure LLM trace."""
    rng = np.random.default_rng(seed)
    t, out = 0.0, []
    while t < minutes * 60.0:
        t += rng.exponential(3.0) if rng.random() < 0.6 else rng.exponential(0.04)
        out += [t] * (1 + (rng.random() < 0.2))          # some exact duplicates
    times = np.array(out[:-1])
    r = rng.integers(1, 40, times.size) if rows else None
    return Trace.from_times(times, rows=r, minutes=minutes)


def assert_same(fast: SimResult, slow: SimResult) -> None:
    """Every field equal (floats bit for bit, arrays element for element), except timings."""
    for f in fields(SimResult):
        if f.name in ("wall_s", "policy_s"):
            continue
        x, y = getattr(fast, f.name), getattr(slow, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), \
                f.name
        elif isinstance(x, float) and np.isnan(x):
            assert np.isnan(y), f.name
        else:
            assert x == y, f.name


def bulk_cases() -> dict[str, tuple[Trace, dict]]:
    counts = np.random.default_rng(3).poisson(np.random.default_rng(4).choice(
        [0, 2, 400], size=120, p=[0.5, 0.3, 0.2]))
    return {
        "bursty": (bursty(), EMBED),
        "bursty, two warm": (bursty(1), {**EMBED, "warm": WarmPool(min_containers=2,
                                                                    scaledown_window_s=60)}),
        "bursty, batching rows": (bursty(2, rows=True), {**EMBED, "route": Route(
            max_inflight_per_container=2, max_queue=64, timeout_s=2.0)}),
        "bursty, three warm": (bursty(5), {**EMBED, "warm": WarmPool(min_containers=3,
                                                                      scaledown_window_s=60)}),
        "bursty, rows, buffer": (bursty(6, rows=True), EMBED),
        "bursty, rows, four warm, no batch wait": (bursty(7, rows=True), {
            **EMBED, "warm": WarmPool(min_containers=4, scaledown_window_s=60),
            "batching": Batching(max_batch_rows=32, wait_ms=0)}),
        "bursty, sampled times": (bursty(3), {**EMBED, "cold": ColdStartModel.of([10.0, 20.0]),
                                              "service": ServiceModel.of([0.02, 0.05, 0.03])}),
        "bursty, sampled times, two warm": (bursty(8), {
            **EMBED, "warm": WarmPool(min_containers=2, scaledown_window_s=60),
            "service": ServiceModel.of([0.02, 0.05, 0.03])}),
        "bursty, tight deadline": (bursty(4, 60), {**EMBED, "route": Route(
            max_inflight_per_container=2, max_queue=8, timeout_s=0.03)}),
        "bursty, rows, heavy rows": (bursty(10, 60, rows=True), HEAVY_ROWS),
        "bursty, heavy rows, two warm": (bursty(11, 60, rows=True), {
            **HEAVY_ROWS, "warm": WarmPool(min_containers=2, scaledown_window_s=60)}),
        "per-minute counts, predictive": (Trace.from_counts(counts, spread="poisson", seed=2),
                                          {**EMBED, "warm": WarmPool(scaledown_window_s=60,
                                                                     predictive=True)}),
        "sparse": (every_20_min(), dict(route=WAIT, warm=WarmPool(scaledown_window_s=60),
                                        service=ServiceModel.of(0.1))),
        "sparse, floor of one": (every_20_min(), dict(route=WAIT, warm=WarmPool(
            min_containers=1, scaledown_window_s=60), service=ServiceModel.of(0.1))),
        "overload": (overload_trace(), dict(
            route=Route(max_inflight_per_container=2, max_queue=20, timeout_s=1.0),
            warm=WarmPool(min_containers=2, max_containers=4),
            batching=Batching(max_batch_rows=4, wait_ms=5),
            cold=ColdStartModel.of([0.2, 0.4]), service=ServiceModel.of(0.05, 0.01))),
    }


def kernel_edge_cases() -> dict[str, tuple[Trace, dict]]:
    one = WarmPool(min_containers=1, scaledown_window_s=600)
    # Unix-time arrivals (float spacing 2^-22 s) with a deadline of half that: t + timeout
    # rounds to even, so about half the budgets are 0 and the others 2^-22 s.
    gaps = np.random.default_rng(5).uniform(0.2, 0.5, 400)
    lost = Trace.from_times(1.7e9 + np.cumsum(gaps), minutes=3)
    pairs = Trace.from_times(np.repeat(np.arange(0.0, 170.0, 1.0), 4)
                             + np.tile([0.0, 0.0, 0.001, 0.002], 170), minutes=3)
    return {
        "dense, sampled times": (Trace.from_times(np.arange(0.0, 180.0, 0.01), minutes=3), dict(
            route=WAIT, warm=one, service=ServiceModel.of([0.004, 0.006]))),
        "budget lost to rounding": (lost, dict(route=Route(timeout_s=2.0 ** -23), warm=one,
                                               service=ServiceModel.of(0.1))),
        # A queue of one: decide() never queues (90 % of it is no room), so an arrival that
        # finds the one slot taken spills.
        "no queue room": (bursty(12, 30), {**EMBED, "route": Route(
            max_inflight_per_container=1, max_queue=1, timeout_s=2.0)}),
        # Pairs at one instant, no batch wait: each container runs one batch and queues a
        # second behind it; both seconds begin, and end, at one instant (an unknown order).
        "pairs behind pairs": (pairs, {**EMBED, "warm": WarmPool(
            min_containers=2, scaledown_window_s=600), "service": ServiceModel.of(0.1),
            "batching": Batching(max_batch_rows=32, wait_ms=0)}),
    }
