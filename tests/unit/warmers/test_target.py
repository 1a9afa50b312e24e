"""desired(): fixed floor and buffer with Modal's semantics, composition, caps, state."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.config import WarmPool, Window
from floodway.warmers.predictive import SizingState
from floodway.warmers.target import History, Measured, PolicyState, WarmTarget, desired

M = 60.0
T0_MIN = 28_000_000  # an epoch minute in 2023, so crons evaluate on real dates


def hist_with(minutes: dict[int, int], length: int, start: int = T0_MIN) -> History:
    counts = np.zeros(length, dtype=np.int64)
    for m, c in minutes.items():
        counts[m] = c
    return History.from_counts(counts, start_minute=start)


def at(minute: float) -> float:
    return (T0_MIN + minute) * M


# ---------------------------------------------------------------- History

def test_history_helpers() -> None:
    h = hist_with({0: 2, 1: 1, 11: 3, 21: 1}, 30)
    assert h.end_minute == T0_MIN + 30 and h.total == 7
    assert list(h.idle_times_min()) == [0, 9, 9]
    assert h.last_arrival_minute() == T0_MIN + 21
    assert h.last_arrival_s() == at(22)
    assert h.last_arrival_s(now_s=at(21.5)) == at(21.5)
    assert h.rate_per_s(at(21.5), 11) == pytest.approx(4 / 660)
    assert h.peak_rate_per_s(at(12.2), 3) == pytest.approx(3 / 60)
    assert list(h.active_minutes() - T0_MIN) == [0, 1, 11, 21]


def test_history_is_frozen_and_validated() -> None:
    h = History.from_counts([0, 1, 0])
    with pytest.raises(ValueError):
        h.counts[0] = 5
    with pytest.raises(ValueError):
        History.from_counts([1, -1])
    assert History.from_counts([]).last_arrival_minute() is None
    assert History.empty(at(3)).last_arrival_s() is None


def test_history_upto_hides_the_future() -> None:
    h = hist_with({5: 1, 50: 1}, 60)
    assert h.upto(at(10.5)).last_arrival_minute() == T0_MIN + 5
    assert h.upto(at(100)) is h
    assert h.upto(at(-3)).total == 0


def test_last_arrival_and_views_match_the_whole_array() -> None:
    rng = np.random.default_rng(1)
    for length in (0, 1, 63, 64, 65, 300, 5000):
        for density in (0.0, 0.001, 0.3):
            counts = (rng.random(length) < density).astype(np.int64)
            h = History.from_counts(counts, start_minute=7)
            for stop in {0, length // 3, length}:
                v = History.view_of(h, stop)
                nz = np.flatnonzero(counts[:stop])
                assert v.last_arrival_minute() == (int(nz[-1]) + 7 if nz.size else None)
                assert not v.counts.flags.writeable and v.start_minute == 7


def test_measured_defaults_and_batches() -> None:
    m = Measured()
    assert m.cold_start_s == 30.0 and m.concurrency == 1.0
    b = Measured.from_batches(cold_start_s=20, batch_s=0.2, batch_rows=32, rows_per_request=4)
    assert b.service_s == 0.2 and b.concurrency == 8
    with pytest.raises(ValueError):
        Measured(cold_start_s=-1)
    with pytest.raises(ValueError):
        Measured(concurrency=0)


# ---------------------------------------------------------------- fixed floor and buffer

def test_fixed_floor_and_buffer_while_active() -> None:
    cfg = WarmPool(min_containers=1, buffer_containers=2, scaledown_window_s=120)
    h = hist_with({100: 3}, 200)
    target, _ = desired(at(100.5), h, cfg, Measured())
    assert target == WarmTarget(1, 2, 120.0, target.reason)
    assert "active" in target.reason and "config min_containers 1" in target.reason
    # Last arrival counted at the end of minute 100; active for scaledown_window_s after it.
    assert desired(at(101) + 119, h, cfg, Measured())[0].buffer_containers == 2


def test_buffer_drops_when_idle_but_floor_stays() -> None:
    cfg = WarmPool(min_containers=1, buffer_containers=2, scaledown_window_s=120)
    h = hist_with({100: 3}, 200)
    target, _ = desired(at(101) + 120, h, cfg, Measured())
    assert (target.min_containers, target.buffer_containers) == (1, 0)
    assert "idle" in target.reason
    never, _ = desired(at(10), History.empty(at(10)), cfg, Measured())
    assert (never.min_containers, never.buffer_containers) == (1, 0)


def test_keep_is_the_buffer_on_top_of_the_busy_containers() -> None:
    # Modal's meaning: with min 2 and buffer 1, a third container once both are busy.
    t = WarmTarget(2, 1, 60.0, "")
    assert [t.keep(busy, cap=8) for busy in range(5)] == [2, 2, 3, 4, 5]
    assert t.keep(7, cap=8) == 8 and t.keep(3, cap=3) == 3
    idle = WarmTarget(2, 0, 60.0, "")           # inactive: no buffer, the floor only
    assert [idle.keep(busy, cap=8) for busy in range(4)] == [2, 2, 2, 2]
    assert WarmTarget(0, 0, 60.0, "").keep(0, cap=8) == 0


def test_caps_at_max_containers() -> None:
    cfg = WarmPool(min_containers=2, buffer_containers=5, max_containers=3)
    h = hist_with({10: 1}, 20)
    target, _ = desired(at(10.2), h, cfg, Measured())
    assert (target.min_containers, target.buffer_containers) == (2, 1)


def test_scaledown_is_clamped_to_modal_range() -> None:
    cfg = WarmPool(scaledown_window_s=7200)  # invalid for Modal; desired still clamps
    target, _ = desired(at(0), History.empty(at(0)), cfg, Measured())
    assert target.scaledown_window_s == 3600


# ---------------------------------------------------------------- composition

def test_window_raises_the_floor_before_it_opens() -> None:
    # T0_MIN is 2023-03-28 10:40 UTC; a window at 11:00 UTC with 60 s lead + 30 s cold start.
    w = Window(cron="0 11 * * *", duration_s=600, min_containers=4, lead_s=60)
    cfg = WarmPool(min_containers=1, windows=(w,))
    h = History.empty(at(0))
    start = at(20)
    assert desired(start - 91, h, cfg, Measured(cold_start_s=30))[0].min_containers == 1
    t, _ = desired(start - 90, h, cfg, Measured(cold_start_s=30))
    assert t.min_containers == 4 and "opens in 90 s" in t.reason
    assert desired(start + 599, h, cfg, Measured(cold_start_s=30))[0].min_containers == 4
    assert desired(start + 600, h, cfg, Measured(cold_start_s=30))[0].min_containers == 1


def test_predictive_floor_and_scaledown() -> None:
    counts = np.zeros(400, dtype=np.int64)
    counts[::10] = 1  # one arrival every 10 minutes
    h = History.from_counts(counts, T0_MIN)
    cfg = WarmPool(predictive=True, scaledown_window_s=300)
    mid, _ = desired(at(395), h, cfg, Measured())
    assert mid.min_containers == 0 and mid.scaledown_window_s == 60
    # The reason is the break-even rule's (the default since it replaced the histogram for the
    # first container): idle minute 4 of a 9-minute period expects no arrival.
    assert "idle minute 4 saves 0.00" in mid.reason and ": cold" in mid.reason
    before, _ = desired(at(399.5), h, cfg, Measured())
    assert before.min_containers == 1
    off, _ = desired(at(395), h, WarmPool(scaledown_window_s=300), Measured())
    assert off.scaledown_window_s == 300 and off.min_containers == 0


def test_predictive_uses_only_the_past() -> None:
    counts = np.zeros(400, dtype=np.int64)
    counts[::10] = 1
    whole = History.from_counts(counts, T0_MIN)
    cut = History.from_counts(counts[:396], T0_MIN)
    cfg = WarmPool(predictive=True)
    assert desired(at(395.5), whole, cfg, Measured()) == desired(at(395.5), cut, cfg, Measured())


def test_state_is_threaded_and_serializable() -> None:
    counts = np.zeros(30, dtype=np.int64)
    counts[-1] = 600  # 10/s
    h = History.from_counts(counts, T0_MIN)
    cfg = WarmPool(predictive=True)
    m = Measured(service_s=0.5, concurrency=1)
    target, state = desired(at(29.5), h, cfg, m, PolicyState())
    assert target.min_containers == 5 and state.sizing == SizingState(5)
    again = PolicyState.from_dict(state.to_dict())
    assert again == state
    assert PolicyState.from_dict(None) == PolicyState()
    # Pure: same inputs, same outputs.
    assert desired(at(29.5), h, cfg, m, PolicyState()) == (target, state)


def test_exact_last_arrival_makes_active_exact():
    from floodway.warmers.target import History

    t = 1_700_000_000.0 + 10.0              # 10 s into a minute
    minute = int(t // 60)
    h = History(minute, [1], last_arrival_exact_s=t)
    assert h.last_arrival_s() == t          # not the end of the minute
    assert History(minute, [1]).last_arrival_s() == (minute + 1) * 60.0


def test_a_backlog_asks_for_the_containers_that_drain_it_within_a_cold_start() -> None:
    cfg = WarmPool(min_containers=1, max_containers=5)
    m = Measured(cold_start_s=2.0, service_s=0.32, concurrency=32.0)   # 100 rows/s each
    none, _ = desired(at(100), History.empty(at(100)), cfg, m)
    small, _ = desired(at(100), History.empty(at(100)), cfg, m, backlog=150)
    large, _ = desired(at(100), History.empty(at(100)), cfg, m, backlog=600)
    huge, _ = desired(at(100), History.empty(at(100)), cfg, m, backlog=100_000)
    assert none.min_containers == 1 and "backlog" not in none.reason
    assert small.min_containers == 1       # 1.5 s of work: one container drains it in time
    assert large.min_containers == 3       # 6 s of work within a 2 s cold start
    assert huge.min_containers == 5 and "capped at max_containers 5" in huge.reason
    assert "backlog of 600 queued" in large.reason
    # Scale from zero: any backlog asks for one container.
    zero = WarmPool(min_containers=0, max_containers=5)
    assert desired(at(100), History.empty(at(100)), zero, m, backlog=1)[0].min_containers == 1
