"""Rollout as a pure function: new containers first, the old ones drained once as many new
ones are ready."""

from __future__ import annotations

from floodway.runtime.rollout import Rollout, Running, plan_rollout, rolling


def boxes(*spec: tuple[str, str | None, str]) -> list[Running]:
    return [Running(cid, build, state) for cid, build, state in spec]


def test_nothing_to_roll_without_a_known_build_or_when_all_run_it():
    live = boxes(("1", "b1", "ready"), ("2", "b1", "busy"))
    assert plan_rollout(None, live) is None
    assert plan_rollout("b1", live) is None
    assert plan_rollout("b1", []) is None
    assert not rolling("b1", ["b1", "b1"]) and not rolling(None, ["b0"])
    assert rolling("b2", ["b1", "b2"])


def test_a_new_build_starts_as_many_new_containers_as_there_are_old_ones():
    live = boxes(("1", "b1", "ready"), ("2", "b1", "busy"))
    assert plan_rollout("b2", live) == Rollout("b2", starts=2)


def test_starting_new_ones_count_and_old_ones_stay_until_enough_are_ready():
    live = boxes(("1", "b1", "ready"), ("2", "b1", "busy"),
                 ("3", "b2", "ready"), ("4", "b2", "warming"))
    assert plan_rollout("b2", live) == Rollout("b2")


def test_old_ones_drain_once_as_many_new_are_ready():
    live = boxes(("1", "b1", "ready"), ("2", None, "busy"),
                 ("3", "b2", "ready"), ("4", "b2", "busy"))
    assert plan_rollout("b2", live) == Rollout("b2", drain=("1", "2"))


def test_no_new_starts_while_starts_are_failing():
    live = boxes(("1", "b1", "ready"))
    assert plan_rollout("b2", live, may_start=False) == Rollout("b2")
