"""Reconcile: a warm target and the containers there are -> what to start and what to stop.

    reconcile(keep, containers, now_s, scaledown_window_s, may_start=) -> Plan

A pure function: the local pool (`floodway.runtime`) carries out its actions on worker
processes, the simulator (`floodway.sim`) on simulated containers; neither decides anything
itself. `keep` is how many containers the warm target asks for now
(`floodway.warmers.WarmTarget.keep`: at least `min_containers`, and `buffer_containers` idle
ones on top of the busy ones while the endpoint is active, at most the cap).

Rules (Modal's autoscaler, https://modal.com/docs/guide/scale):

1. Fewer live containers (starting, warming, ready, busy) than `keep`: start the difference
   now, ahead of demand (a window opening, a buffer due, a dead container to replace), unless
   `may_start` is False (starts are failing and backing off: a broken build must not
   crash-loop the machine).
2. Otherwise, while more are live than `keep`, stop idle ones whose idle time has reached
   `scaledown_window_s`, the longest idle first. Stopping means draining: no new work, and
   in-flight work finishes. Busy and starting containers are never stopped here.
3. `next_check_s` is the earliest time an idle container's window runs out (inf if none):
   a runtime without a periodic tick (the simulator) reconciles again then.

Health (stuck, silent, dead containers: `floodway.runtime.health`) and rollout (a new build:
new containers first, then the old ones drained: `floodway.runtime.rollout`) are separate.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from floodway.routers.decide import LIVE

# Float slack when comparing a due time to the clock (a check scheduled at the due time
# must find it due).
EPS_S = 1e-9


class Do(enum.StrEnum):
    START = "start"
    STOP = "stop"


@dataclass(frozen=True)
class Box:
    """One container as reconcile sees it. `busy`: it has work in flight; `idle_since_s`:
    when its last work ended (or it became ready), on the runtime's clock."""

    id: str
    state: str
    busy: bool = False
    idle_since_s: float = 0.0


@dataclass(frozen=True)
class Action:
    """Start one container (`container` None) or stop (drain) the named one."""

    do: Do
    container: str | None
    reason: str


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    next_check_s: float = math.inf

    @property
    def starts(self) -> int:
        return sum(1 for a in self.actions if a.do == Do.START)

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(a.container for a in self.actions
                     if a.do == Do.STOP and a.container is not None)


def starts_needed(keep: int, live: int, *, may_start: bool = True) -> int:
    """Rule 1 alone: how many containers to start now when `live` are live and the warm
    target keeps `keep` (0 while starts back off). `reconcile` answers the same starts; a
    runtime that knows only the live count changed (the simulator, when a container gets
    busy and the buffer asks for one more) calls this instead of building every `Box`."""
    return max(0, keep - live) if may_start else 0


def reconcile(keep: int, containers: Sequence[Box], now_s: float,
              scaledown_window_s: float, *, may_start: bool = True) -> Plan:
    """The actions that move `containers` towards `keep` live ones at `now_s` (see the
    module docstring for the rules). Pure: no clock, no I/O."""
    live = [c for c in containers if c.state in LIVE]
    n = len(live)
    if n < keep:
        why = f"{n} live, the warm target keeps {keep}"
        return Plan(tuple(Action(Do.START, None, why)
                          for _ in range(starts_needed(keep, n, may_start=may_start))))
    actions: list[Action] = []
    next_check = math.inf
    idle = sorted((c for c in live if c.state == "ready" and not c.busy),
                  key=lambda c: c.idle_since_s)
    for c in idle:
        due = c.idle_since_s + scaledown_window_s
        if due <= now_s + EPS_S and n > keep:
            actions.append(Action(Do.STOP, c.id, f"idle for {now_s - c.idle_since_s:.0f} s "
                                  f">= scaledown window {scaledown_window_s:g} s; {n} live, "
                                  f"the warm target keeps {keep}"))
            n -= 1
        elif due > now_s:
            next_check = min(next_check, due)
    return Plan(tuple(actions), next_check)


__all__ = ["EPS_S", "LIVE", "Action", "Box", "Do", "Plan", "reconcile", "starts_needed"]
