"""The simulator: known answers on tiny traces, the fast path equals decide(), the bulk fast
mode gives the same SimResult as decide() on every request, overload accounting, and the
CLI."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import fields, replace

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.errors import FloodwayError
from floodway.routers.decide import Action
from floodway.sim import (
    ACTIONS,
    ColdStartModel,
    DesiredPolicy,
    HistogramPolicy,
    ServiceModel,
    SimConfig,
    Trace,
    read_trace,
    simulate,
)
from floodway.sim.engine import _Sim
from floodway.sim.result import SimResult, coverage_per_minute
from tests.conftest import ROOT

WAIT = Route(max_inflight_per_container=4, max_queue=100, timeout_s=120.0, spill=("cold",))


def every_20_min(minutes: int = 120) -> Trace:
    counts = np.zeros(minutes, dtype=np.int64)
    counts[::20] = 1
    return Trace.from_counts(counts)


def code(action: Action) -> int:
    return ACTIONS.index(action)


def test_sparse_arrivals_with_a_short_scaledown_are_all_cold() -> None:
    r = simulate(every_20_min(), route=WAIT, warm=WarmPool(scaledown_window_s=60),
                 cold=ColdStartModel.of(30), service=ServiceModel.of(0.1), check=True)
    assert r.requests == 6 and r.cold_requests == 6 and r.containers_started == 6
    assert r.cold_start_rate == 1.0
    assert list(r.decisions) == [code(Action.SPILL_COLD)] * 6
    # each waits the cold start, the batcher's 5 ms, then 0.1 s of service
    assert r.p50_s == pytest.approx(30.105)
    # each container: warm from its start until 60 s idle after its batch
    assert r.warm_min == pytest.approx(6 * (0.105 + 60) / 60)
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


def test_a_buffer_container_starts_as_soon_as_the_floor_is_busy() -> None:
    # Modal's buffer: with min 1 and buffer 1, while the endpoint is active (the policy saw
    # the arrival at 10 s at its 60 s tick), a second container starts when the first takes
    # a batch (at 70 s), not at the next tick; then the pool idles back to one container.
    # The first arrival found the endpoint idle: no buffer.
    trace = Trace.from_times(np.array([10.0, 70.0]), minutes=10)
    cfg = SimConfig(route=WAIT, warm=WarmPool(min_containers=1, buffer_containers=1,
                                              scaledown_window_s=60),
                    service=ServiceModel.of(5.0), cold=ColdStartModel.of(20.0))
    sim = _Sim(trace, cfg)
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


def overload_trace() -> Trace:
    # 600 requests within one second, then quiet
    return Trace.from_times(np.linspace(0.0, 1.0, 600, endpoint=False), minutes=2)


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


EMBED = dict(route=Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0),
             warm=WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=120,
                           max_containers=8),
             batching=Batching(max_batch_rows=32, wait_ms=5), cold=ColdStartModel.of(30.0),
             service=ServiceModel.of(0.02, 0.005))


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


@pytest.mark.parametrize("case", list(bulk_cases()))
def test_the_bulk_fast_mode_gives_the_same_result_as_decide_on_every_request(case) -> None:
    trace, cfg = bulk_cases()[case]
    sim = _Sim(trace, SimConfig(**cfg))
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


def test_trace_expansion_and_coverage() -> None:
    tr = Trace.from_counts([2, 0, 1], start_minute=10)
    assert tr.times_s.tolist() == [615.0, 645.0, 750.0] and tr.end_s == 780.0
    p = Trace.from_counts([5, 5], spread="poisson", seed=7)
    assert p.requests == 10 and np.all(np.diff(p.times_s) >= 0)
    assert np.all((p.times_s[:5] < 60) & (p.times_s[5:] >= 60))
    cov = coverage_per_minute(np.array([30.0, 100.0]), np.array([90.0, 110.0]), 0, 3)
    assert cov.tolist() == pytest.approx([30.0, 40.0, 0.0])


def test_cli_simulates_a_counts_csv_and_writes_the_plot(tmp_path) -> None:
    csv = tmp_path / "inv.csv"
    minutes = [0] * 30
    minutes[0], minutes[10], minutes[11] = 3, 1, 4
    csv.write_text("HashFunction,HashApp,HashOwner," + ",".join(
        f"minute_{i + 1}" for i in range(30)) + "\n" + "abc123,a,o," + ",".join(
        map(str, minutes)) + "\n")
    png = tmp_path / "sim.png"
    r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                        str(ROOT / "modal_app.py"), "--trace", str(csv), "--function", "abc",
                        "--cold-start-s", "20,30", "--service-ms", "40", "--out", str(png)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"FLOODWAY_NO_MODAL": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "cold-start requests" in r.stdout and "8" in r.stdout
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    per_request = tmp_path / "req.csv"
    per_request.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,5\n"
                           "2023-11-16 18:19:04.0319600,3\n")
    r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                        str(ROOT / "modal_app.py"), "--trace", str(per_request)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"FLOODWAY_NO_MODAL": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "requests" in r.stdout and "2" in r.stdout


def test_cli_refuses_options_that_do_not_apply(tmp_path) -> None:
    counts = tmp_path / "inv.csv"
    counts.write_text("HashFunction,minute_1,minute_2\nabc,1,2\n")
    per_request = tmp_path / "req.csv"
    per_request.write_text("TIMESTAMP\n2023-11-16 18:17:03.9799600\n")
    cases = [
        (["--trace", str(per_request), "--function", "3"], "--function ('3') applies to "
                                                           "per-minute counts only"),
        (["--trace", str(counts), "--column", "TIMESTAMP"], "applies to per-request traces"),
        (["--trace", str(counts), "--per-row-ms", "3"], "--per-row-ms applies with a single "
                                                         "--service-ms"),
        (["--trace", str(counts), "--service-ms", "10,20", "--per-row-ms", "3"],
         "not 2 samples"),
        (["--trace", str(counts), "--cold-start-s", "nan"], "--cold-start-s: give numbers in"),
        (["--trace", str(counts), "--service-ms", "1e308"], "--service-ms: give numbers in"),
        (["--trace", str(counts), "--out", str(tmp_path / "p.txt")], "the plot is a PNG"),
        (["--trace", str(counts), "--out", str(tmp_path)], "is a directory"),
        (["--trace", str(counts), "--out", str(counts / "p.png")], "cannot write there"),
    ]
    for args, needle in cases:
        r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                            str(ROOT / "modal_app.py"), *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env={"FLOODWAY_NO_MODAL": "1",
                                                        "PATH": "/usr/bin:/bin",
                                                        "COLUMNS": "200"})
        assert r.returncode != 0 and needle in " ".join(r.stderr.split()), (args, r.stderr)
        assert "Traceback" not in r.stderr


BAD_TRACES = {
    "blank": ("TIMESTAMP,x\n1,2\n,3\n", "timestamp in data row 2 is blank"),
    "mixed": ("TIMESTAMP\n2023-11-16 18:17:03\n5\n", "timestamps mix numbers"),
    "nan": ("TIMESTAMP\nnan\n", "arrival 1 is nan"),
    "inf": ("TIMESTAMP\n0\ninf\n", "is inf"),
    "short row": ("x,TIMESTAMP\n5\n", "line 2: 1 fields, no 'TIMESTAMP'"),
    "span": ("TIMESTAMP\n1\n1e9\n", "are its timestamps all in one unit"),
    "count x": ("HashFunction,minute_1\nabc,x\n", "minute_1: 'x' is not a count"),
    "count huge": ("HashFunction,minute_1\nabc,1e30\n", "'1e30' is not a count"),
    "count fraction": ("HashFunction,minute_1\nabc,1.7\n", "'1.7' is not a count"),
    "counts short": ("HashFunction,minute_1,minute_2\nabc,1\n", "has 2 fields, the header 3"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_a_bad_trace_is_refused_naming_what_is_wrong(tmp_path, case) -> None:
    text, needle = BAD_TRACES[case]
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(FloodwayError, match=re.escape(needle)):
        read_trace(path)
    path.write_bytes(b"TIMESTAMP\n\xff\xfe\n")
    with pytest.raises(FloodwayError, match="not UTF-8"):
        read_trace(path)


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


def kernel_edge_cases() -> dict[str, tuple[Trace, dict]]:
    one = WarmPool(min_containers=1, scaledown_window_s=600)
    # Unix-time arrivals (float spacing 2^-22 s) with a deadline of half that: t + timeout
    # rounds to even, so about half the budgets are 0 and the others 2^-22 s.
    gaps = np.random.default_rng(5).uniform(0.2, 0.5, 400)
    lost = Trace.from_times(1.7e9 + np.cumsum(gaps), minutes=3)
    return {
        "dense, sampled times": (Trace.from_times(np.arange(0.0, 180.0, 0.01), minutes=3), dict(
            route=WAIT, warm=one, service=ServiceModel.of([0.004, 0.006]))),
        "budget lost to rounding": (lost, dict(route=Route(timeout_s=2.0 ** -23), warm=one,
                                               service=ServiceModel.of(0.1))),
    }


@pytest.mark.parametrize("case", list(kernel_edge_cases()))
def test_the_segment_kernel_hands_edge_cases_back_exactly(case) -> None:
    trace, cfg = kernel_edge_cases()[case]
    fast = simulate(trace, SimConfig(**cfg))
    assert_same(fast, simulate(trace, SimConfig(**cfg, fast=False)))


def test_every_reason_for_a_segment_to_stop_is_exercised() -> None:
    """The compiled segment kernel stops where the event loop must take over (at the next
    event, an arrival it would not dispatch, an unknown heap order, a sampled time it has
    not drawn); the traces compared with decide() above take each of those branches."""
    from floodway.sim.kernel import REASONS

    stops = np.zeros(len(REASONS), dtype=np.int64)
    for trace, cfg in [*bulk_cases().values(), *kernel_edge_cases().values()]:
        sim = _Sim(trace, SimConfig(**cfg))
        sim.run()
        if sim.seg is not None:
            stops += sim.seg.stops
    assert np.all(stops > 0), dict(zip(REASONS, stops.tolist(), strict=True))
