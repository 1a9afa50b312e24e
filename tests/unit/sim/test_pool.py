"""The simulated pool: Modal's buffer, and the warm target's `keep` carried out through
`floodway.core.reconcile` (starts at a tick, idle containers stopped longest idle first)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from floodway.config import WarmPool
from floodway.core.reconcile import Box
from floodway.sim import ColdStartModel, ServiceModel, SimConfig, Trace, simulate
from floodway.sim.engine import _Sim
from floodway.sim.pool import _CHECK
from floodway.warmers.target import WarmTarget
from tests.unit.sim.cases import WAIT, assert_same


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


def pool(warm: int, floor: int = 1) -> _Sim:
    """A pool set up as at a run's start with `warm` warm containers and a warm target of
    `floor` (no buffer), 60 s scaledown, before any event ran."""
    sim = _Sim(Trace.from_times([0.0], minutes=10),
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
    assert [(t, kind, obj) for t, kind, _, obj, _ in sim.heap] == [(110.0, _CHECK, third)]


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
    assert (80.0, _CHECK, warm) in [(t, kind, obj) for t, kind, _, obj, _ in sim.heap]
    # The target drops to one: the idle one goes (its window ran out), the starting stay.
    sim.policy = lambda now, hist, measured, state: (WarmTarget(1, 0, 30.0, "test"), state)
    sim.on_tick(90.0)
    assert warm.stop_s == 90.0 and len(sim.live) == 2
