"""The pure reconcile step: starts up to the warm target, scale-down after the window."""

from __future__ import annotations

import math

import pytest

from floodway.core.reconcile import Box, Do, reconcile


def test_starts_the_missing_containers():
    plan = reconcile(3, [Box("a", "ready"), Box("b", "starting")], 10.0, 60.0)
    assert plan.starts == 1 and plan.stops == ()
    assert all(a.do == Do.START and a.container is None for a in plan.actions)


def test_draining_and_dead_containers_do_not_count_as_live():
    boxes = [Box("a", "ready"), Box("b", "draining"), Box("c", "failed"), Box("d", "stopped")]
    assert reconcile(2, boxes, 0.0, 60.0).starts == 1


def test_no_start_while_starts_back_off():
    assert reconcile(3, [Box("a", "ready")], 0.0, 60.0, may_start=False).actions == ()


def test_stops_idle_containers_past_the_window_longest_idle_first():
    boxes = [Box("new", "ready", idle_since_s=50.0), Box("old", "ready", idle_since_s=10.0),
             Box("mid", "ready", idle_since_s=30.0)]
    plan = reconcile(1, boxes, 100.0, 60.0)
    # old (idle 90 s) and mid (70 s) are past the 60 s window; new (50 s) is not.
    assert plan.stops == ("old", "mid")
    assert plan.next_check_s == 110.0


def test_never_goes_below_the_target():
    boxes = [Box("a", "ready", idle_since_s=0.0), Box("b", "ready", idle_since_s=1.0)]
    plan = reconcile(1, boxes, 1000.0, 60.0)
    assert plan.stops == ("a",)
    assert reconcile(2, boxes, 1000.0, 60.0).actions == ()


def test_busy_and_starting_containers_are_never_stopped():
    boxes = [Box("busy", "busy", busy=True, idle_since_s=0.0),
             Box("pipe", "ready", busy=True, idle_since_s=0.0),
             Box("boot", "starting", idle_since_s=0.0)]
    plan = reconcile(0, boxes, 1000.0, 60.0)
    assert plan.actions == () and plan.next_check_s == math.inf


def test_a_container_due_exactly_now_is_due():
    plan = reconcile(0, [Box("a", "ready", idle_since_s=40.0)], 100.0, 60.0)
    assert plan.stops == ("a",)


@pytest.mark.parametrize("may_start", [True, False])
def test_starts_needed_is_reconciles_rule_one(may_start):
    """The simulator's shortcut for a busy count change answers reconcile's starts exactly."""
    from floodway.core.reconcile import starts_needed

    for keep in range(5):
        for n in range(5):
            boxes = [Box(str(i), "busy", busy=True) for i in range(n)]
            plan = reconcile(keep, boxes, 100.0, 60.0, may_start=may_start)
            assert starts_needed(keep, n, may_start=may_start) == plan.starts
