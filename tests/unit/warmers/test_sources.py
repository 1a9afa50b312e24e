"""Warm-pool sources behind one protocol, composed with the bounds, the buffer and the
scaledown clamping applied once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from floodway.config import WarmPool, Window
from floodway.warmers.params import PredictiveParams
from floodway.warmers.predictive import SizingState
from floodway.warmers.sources import (
    ConfigFloor,
    Floor,
    HistogramFloor,
    Part,
    PredictiveFloor,
    WindowFloor,
    sources_for,
)
from floodway.warmers.target import History, Measured, PolicyState, compose, desired

M = 60.0


@dataclass(frozen=True)
class Asks:
    """A custom source: always asks for `n` containers and a scaledown of `scaledown_s`."""

    n: int
    scaledown_s: float | None = None

    def __call__(self, now_s, history, measured, state):
        return Floor(Part(self.n, f"asks {self.n}"), self.scaledown_s, "custom"), state


class Silent:
    def __call__(self, now_s, history, measured, state):
        return None, state


def _compose(sources, now_s, history, **kw):
    base = dict(cap=5, buffer_containers=2, scaledown_window_s=120)
    return compose(sources, now_s, history, Measured(), None, **{**base, **kw})


def test_sources_of_a_config_in_order():
    w = Window(cron="0 9 * * *", duration_s=600, min_containers=2)
    params = PredictiveParams(tick_s=60.0)
    got = sources_for(WarmPool(min_containers=1, windows=(w,), predictive=True), params)
    assert got == (ConfigFloor(1), WindowFloor(w), PredictiveFloor(params))
    assert sources_for(WarmPool()) == (ConfigFloor(0),)


def test_a_custom_source_is_bounded_by_the_wrapper():
    h = History.from_counts([1], start_minute=100)
    now = 100 * M + 30                                  # active: an arrival this minute
    target, _ = _compose([ConfigFloor(1), Asks(50, scaledown_s=99_999)], now, h)
    assert target.min_containers == 5 and "capped at max_containers 5" in target.reason
    assert target.buffer_containers == 0                # floor + buffer <= cap
    assert target.scaledown_window_s == 3600 and "custom" in target.reason
    small, _ = _compose([Asks(2, scaledown_s=0.5)], now, h)
    assert (small.min_containers, small.buffer_containers, small.scaledown_window_s) == (2, 2, 2)


def test_the_buffer_only_while_active():
    h = History.from_counts([1], start_minute=100)
    idle, _ = _compose([Asks(1)], 100 * M + 600, h)     # 9 min after the minute: idle
    assert idle.buffer_containers == 0 and "idle" in idle.reason
    busy, _ = _compose([Asks(1)], 100 * M + 30, h)
    assert busy.buffer_containers == 2


def test_no_say_and_ties():
    h = History.empty(0.0)
    target, _ = _compose([Silent(), ConfigFloor(2), Asks(2), Silent()], 0.0, h)
    assert target.min_containers == 2 and "asks 2" in target.reason   # the later explains
    none, _ = _compose([Silent()], 0.0, h)
    assert none.min_containers == 0 and "no source" in none.reason


def test_desired_is_its_sources_composed():
    counts = np.zeros(600, dtype=np.int64)
    counts[::10] = 40
    h = History.from_counts(counts)
    cfg = WarmPool(min_containers=1, buffer_containers=1, max_containers=4, predictive=True,
                   windows=(Window(cron="*/30 * * * *", duration_s=300, min_containers=3),))
    m = Measured(cold_start_s=20, service_s=0.2, concurrency=1)
    state = None
    for minute in range(0, 600, 7):
        now = minute * M + 15
        a, state_a = desired(now, h, cfg, m, state)
        b, _ = compose(sources_for(cfg), now, h, m, state, cap=4, buffer_containers=1,
                       scaledown_window_s=cfg.scaledown_window_s)
        assert a == b
        state = state_a


def test_predictive_source_keeps_its_state_and_passes_it_on_unchanged():
    h = History.from_counts([600] * 20)
    src = PredictiveFloor(PredictiveParams())
    m = Measured(service_s=1.0, concurrency=1)
    floor, state = src(19 * M + 30, h, m, PolicyState())
    assert state.sizing is not None and state.sizing.containers == floor.part.containers >= 2
    again, same = src(19 * M + 40, h, m, state)
    assert again.part == floor.part and same.sizing == state.sizing
    # A source without memory returns the state it was given, as is.
    kept = PolicyState(SizingState(3))
    assert HistogramFloor(PredictiveParams(first_container="histogram"))(
        19 * M + 30, h, m, kept)[1] is kept
