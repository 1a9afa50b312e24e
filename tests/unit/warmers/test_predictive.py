"""The hybrid histogram policy (Shahrad et al. 2020, section 4.2), the break-even keep-alive,
Little's law sizing and hysteresis, and a replay of real functions from the Azure Functions
2019 trace."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from floodway.warmers.predictive import (
    HISTOGRAM,
    NO_HISTORY,
    OUT_OF_RANGE,
    STANDARD,
    BreakEvenDecision,
    PredictiveParams,
    SizingState,
    break_even,
    cold_requests_per_start,
    hybrid_histogram,
    hysteresis,
    idle_time_histogram,
    littles_law,
    predictive,
)
from floodway.warmers.target import History, Measured

M = 60.0
TRACE = Path(__file__).parents[3].parent / "shared" / "traces" / "azure_functions_2019_200_inv.csv"


def periodic(period_min: int, length_min: int) -> History:
    counts = np.zeros(length_min, dtype=np.int64)
    counts[::period_min] = 1
    return History.from_counts(counts)


def test_histogram_bins_and_out_of_bounds() -> None:
    bins, oob = idle_time_histogram(np.array([0, 0, 9, 239, 240, 1000]), 240)
    assert bins.shape == (240,) and bins[0] == 2 and bins[9] == 1 and bins[239] == 1
    assert oob == 2


def test_periodic_pattern_prewarms_before_the_next_arrival() -> None:
    h = periodic(10, 301)  # arrivals at minutes 0, 10, ..., 300
    d = hybrid_histogram(300.5 * M, h, cold_start_s=30)
    assert d.mode == HISTOGRAM and d.warm  # the minute of the arrival itself
    # ITs are all 9 idle minutes: pre-warm 0.9 * 9 = 8.1 min after the end of minute 300,
    # keep-alive until 1.1 * 10 = 11 min after it (tail rounded up to the bin's end).
    assert d.prewarm_min == pytest.approx(8.1)
    assert d.prewarm_min + d.keep_alive_min == pytest.approx(11.0)
    assert d.warm_from_s == pytest.approx((301 + 8.1) * M - 30)
    assert d.warm_until_s == pytest.approx((301 + 11.0) * M)
    assert not hybrid_histogram(305 * M, h, 30).warm          # idle gap: unloaded
    assert not hybrid_histogram(309.1 * M - 31, h, 30).warm
    assert hybrid_histogram(309.1 * M - 30, h, 30).warm       # ready by minute 309.1
    assert hybrid_histogram(310.5 * M, h.upto(310.5 * M), 30).warm
    assert not hybrid_histogram(312.0 * M, h, 30).warm        # keep-alive over
    assert d.samples == 30 and d.cv > 2


def test_cold_start_moves_the_prewarm_earlier() -> None:
    h = periodic(10, 301)
    fast = hybrid_histogram(305 * M, h, cold_start_s=1)
    slow = hybrid_histogram(305 * M, h, cold_start_s=240)
    assert slow.warm_from_s == pytest.approx(fast.warm_from_s - 239)


def test_random_pattern_falls_back_to_standard_keep_alive() -> None:
    rng = np.random.default_rng(7)
    its = rng.integers(0, 240, size=600)
    minutes = np.cumsum(its + 1)
    counts = np.zeros(int(minutes[-1]) + 1, dtype=np.int64)
    counts[minutes] = 1
    h = History.from_counts(counts)
    now = (minutes[-1] + 30) * M
    d = hybrid_histogram(now, h, cold_start_s=30)
    assert d.mode == STANDARD and d.cv < 2 and "not representative" in d.reason
    assert d.prewarm_min == 0 and d.keep_alive_min == 240 and d.warm
    assert not hybrid_histogram((minutes[-1] + 242) * M, h, 30).warm


def test_too_few_samples_is_standard_and_no_history_is_cold() -> None:
    d = hybrid_histogram(100 * M, periodic(10, 31), cold_start_s=30)
    assert d.mode == STANDARD and d.samples == 3 and "only 3" in d.reason
    none = hybrid_histogram(10 * M, History.from_counts([0] * 10), 30)
    assert none.mode == NO_HISTORY and not none.warm and none.warm_until_s is None


def test_out_of_range_predicts_the_next_idle_time() -> None:
    h = periodic(300, 3301)  # 12 arrivals, 11 ITs of 299 min: all beyond the 240-min range
    d = hybrid_histogram(3305 * M, h, cold_start_s=60)
    assert d.mode == OUT_OF_RANGE and d.oob == 11
    assert d.prewarm_min == pytest.approx(299 * 0.85)
    assert d.prewarm_min + d.keep_alive_min == pytest.approx(300 * 1.15)
    assert not d.warm
    assert hybrid_histogram((3301 + 299 * 0.85) * M, h, 60).warm


def test_continuous_traffic_does_not_unload() -> None:
    h = History.from_counts(np.full(120, 5))
    d = hybrid_histogram(119.5 * M, h, 30)
    assert d.mode == HISTOGRAM and d.prewarm_min == 0
    assert d.keep_alive_min == pytest.approx(1.1)
    # The paper's policy turns the keep-alive into the scaledown window (1.1 min) ...
    paper = PredictiveParams(first_container="histogram")
    target, _ = predictive(119.5 * M, h, Measured(), paper, SizingState())
    assert target.scaledown_window_s == pytest.approx(66.0) and target.min_containers == 1
    # ... floodway's default holds the container by the floor (busy minute, and every idle
    # time 0: the next minute is worth keeping) and releases at the history's resolution.
    target, _ = predictive(119.5 * M, h, Measured(), PredictiveParams(), SizingState())
    assert target.scaledown_window_s == 60 and target.min_containers == 1
    assert predictive(120 * M, h.upto(120 * M), Measured(), PredictiveParams(),
                      SizingState())[0].min_containers == 1


# ---------------------------------------------------------------- break-even keep-alive

def test_cold_requests_per_start() -> None:
    # A 30 s start delays the first arrival, and half of a minute's arrivals, never more.
    assert cold_requests_per_start(1, 30).tolist() == 1.0
    assert cold_requests_per_start(np.array([2, 100]), 30).tolist() == [1.0, 50.0]
    assert cold_requests_per_start(10, 120).tolist() == 10.0


def test_break_even_ski_rental_before_learning() -> None:
    # One arrival, no idle time yet: keep alive the break-even time of one delayed request,
    # cold_wait_value x 30 s = 15 min at the default 30, then release.
    p = PredictiveParams()
    h = History.from_counts([1] + [0] * 40)
    assert p.cold_wait_value * 30 / M == 15
    d = break_even(10 * M, h.upto(10 * M), 30, p)
    assert isinstance(d, BreakEvenDecision) and d.mode == "ski_rental" and d.warm
    assert d.break_even_min == pytest.approx(15)
    # Counted from the end of the busy minute 0: warm through minute 15, released at 16.
    assert break_even(15.5 * M, h.upto(15.5 * M), 30, p).warm
    assert not break_even(16 * M, h.upto(16 * M), 30, p).warm
    # A burst of 100 arrivals costs 50 delayed requests: its break-even is 50 times longer.
    big = History.from_counts([100] + [0] * 400)
    assert break_even(300 * M, big.upto(300 * M), 30, p).warm
    none = break_even(5 * M, History.from_counts([0] * 5), 30, p)
    assert none.mode == NO_HISTORY and not none.warm


def test_break_even_prewarms_a_period_and_releases_after_it() -> None:
    h = periodic(10, 301)  # every IT is 9 idle minutes, smoothed over minutes 8..10
    p = PredictiveParams(tick_s=60.0)

    def warm(minute: float) -> bool:
        return break_even(minute * M, h.upto(minute * M), 30, p).warm

    assert warm(300.5)                                     # the busy minute
    # Idle minutes 0..6 (minutes 301..307) expect no arrival: cold. The tick at minute 308
    # (idle minute 7) pre-warms for idle minute 8 (one tick plus the start ahead); the
    # container is kept through idle minute 10 (minute 311) and released after it.
    assert [warm(m) for m in range(301, 314)] == \
        [False] * 6 + [False, True, True, True, True, False, False]
    d = break_even(309 * M, h.upto(309 * M), 30, p)
    assert d.mode == "learned" and d.saved_min > d.idle_min and d.samples == 30


def test_break_even_stops_where_an_extra_minute_does_not_pay() -> None:
    # Idle times spread evenly over 0..59 minutes: each idle minute catches about 1/60 of the
    # arrivals, far below the break-even rate of one request (1 / 15 per minute still to
    # wait): the paper's policy keeps such an endpoint warm for 4 hours, break-even does not.
    rng = np.random.default_rng(7)
    its = rng.integers(0, 60, size=400)
    minutes = np.cumsum(its + 1)
    counts = np.zeros(int(minutes[-1]) + 200, dtype=np.int64)
    counts[minutes] = 1
    h = History.from_counts(counts)
    last = int(minutes[-1])
    p = PredictiveParams()
    assert hybrid_histogram((last + 30) * M, h, 30, p).warm          # the paper: standard
    assert not break_even((last + 30) * M, h.upto((last + 30) * M), 30, p).warm
    # The same idle times ending in bursts of 200 (100 delayed requests each) pay for it.
    counts[minutes] = 200
    h = History.from_counts(counts)
    assert break_even((last + 30) * M, h.upto((last + 30) * M), 30, p).warm
    # ... but not past the longest idle time seen.
    assert not break_even((last + 70) * M, h.upto((last + 70) * M), 30, p).warm


def test_predictive_uses_the_paper_histogram_on_request() -> None:
    h = periodic(10, 301)
    paper = PredictiveParams(first_container="histogram")
    t, _ = predictive(305 * M, h.upto(305 * M), Measured(), paper, SizingState())
    assert isinstance(t.first, type(hybrid_histogram(305 * M, h, 30))) and "pre-warm" in t.reason
    with pytest.raises(ValueError):
        predictive(305 * M, h, Measured(), PredictiveParams(first_container="lru"),
                   SizingState())


# ---------------------------------------------------------------- Little's law, hysteresis

def test_littles_law() -> None:
    assert littles_law(0, 0.1, 1) == 0
    assert littles_law(10, 0.1, 1) == 1              # exactly one container's worth
    assert littles_law(10.5, 0.1, 1) == 2
    assert littles_law(100, 0.2, 4) == 5
    assert littles_law(100, 0.2, 4, target_utilization=0.5) == 10
    assert littles_law(0.01, 0.05, 1) == 1           # any traffic needs one
    with pytest.raises(ValueError):
        littles_law(1, 1, 0)


def test_hysteresis_scales_up_at_once() -> None:
    s = hysteresis(5, 0.0, SizingState(1))
    assert s.containers == 5
    delayed = hysteresis(5, 0.0, SizingState(1), upscale_delay_s=30)
    assert delayed.containers == 1
    delayed = hysteresis(4, 20.0, delayed, upscale_delay_s=30)
    assert delayed.containers == 1
    assert hysteresis(6, 30.0, delayed, upscale_delay_s=30).containers == 4  # lowest asked


def test_hysteresis_does_not_flap_on_alternating_load() -> None:
    s = SizingState(0)
    seen = []
    for minute in range(60):
        target = 6 if minute % 2 == 0 else 1
        s = hysteresis(target, minute * M, s, downscale_delay_s=300)
        seen.append(s.containers)
    assert seen == [6] * 60


def test_hysteresis_scales_down_after_the_delay_to_the_highest_asked() -> None:
    s = SizingState(6)
    s = hysteresis(2, 0.0, s, downscale_delay_s=300)
    s = hysteresis(3, 120.0, s, downscale_delay_s=300)
    assert s.containers == 6
    s = hysteresis(1, 300.0, s, downscale_delay_s=300)
    assert s.containers == 3
    assert SizingState.from_dict(s.to_dict()) == s


def test_predictive_sizes_beyond_one_container_only() -> None:
    counts = np.zeros(10, dtype=np.int64)
    counts[-1] = 1200  # 20/s
    h = History.from_counts(counts)
    m = Measured(service_s=0.3, concurrency=2)
    target, state = predictive(9.5 * M, h, m, PredictiveParams(), SizingState())
    assert target.raw_sized == 3 and target.min_containers == 3 and state.containers == 3
    assert "Little's law 3" in target.reason
    # A sparse endpoint: Little's law says 1, the histogram decides about the first one.
    sparse = periodic(10, 301)
    t2, s2 = predictive(305 * M, sparse, m, PredictiveParams(), SizingState())
    assert t2.min_containers == 0 and t2.scaledown_window_s == 60


# ---------------------------------------------------------------- real data

def _load_trace(limit: int = 200) -> dict[str, np.ndarray]:
    out = {}
    with TRACE.open(newline="") as f:
        rows = csv.reader(f)
        next(rows)
        for row in rows:
            out[row[0]] = np.array([int(x) for x in row[3:]], dtype=np.int64)
            if len(out) >= limit:
                break
    return out


@pytest.mark.skipif(not TRACE.exists(), reason="functions trace not present")
def test_real_functions_trace() -> None:
    funcs = _load_trace()
    assert funcs and all(c.shape == (1440,) for c in funcs.values())
    modes = {}
    for name, counts in funcs.items():
        h = History.from_counts(counts)
        d = hybrid_histogram(1439.5 * M, h, cold_start_s=30)
        modes[name] = d
        assert d.warm_until_s is None or d.warm_until_s >= d.warm_from_s
    # A timer-like function (almost every IT is 14 idle minutes): histogram mode, pre-warm
    # near 0.9 * 14 minutes, keep-alive short.
    timer = next(d for name, d in modes.items() if d.mode == HISTOGRAM and d.prewarm_min > 10)
    assert timer.keep_alive_min < 10
    # An always-busy function does not unload; a function with 1-2 arrivals falls back.
    assert any(d.mode == HISTOGRAM and d.prewarm_min == 0 for d in modes.values())
    assert any(d.mode == STANDARD and d.samples < 10 for d in modes.values())

    # Replay one day of the timer-like function minute by minute: after a learning hour,
    # nearly every arrival finds a warm container, at a fraction of always-on minutes.
    name = next(n for n, d in modes.items() if d is timer)
    counts = funcs[name]
    h = History.from_counts(counts)
    warm_minutes = hits = arrivals = 0
    for minute in range(60, 1440):
        before = hybrid_histogram(minute * M - 1, h.upto(minute * M - 1), 30)
        warm_minutes += before.warm
        if counts[minute]:
            arrivals += 1
            hits += before.warm
    assert arrivals > 50 and hits / arrivals > 0.9
    assert warm_minutes < 0.5 * (1440 - 60)
