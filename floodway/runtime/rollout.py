"""Rollout: a newly published build replaces the containers of the old one, new before old.

    plan_rollout(latest, containers, may_start=) -> Rollout | None
    serving(latest, builds) -> the one build serving, else None

A pure function of the live containers' builds and states; the pool carries it out. While
any live container runs another build than `latest`, a rollout is in progress (None
otherwise) and it alone scales the endpoint:

1. warm as many new containers as there are old ones (the starting ones count), unless
   starts are failing (`may_start` False: a broken build must not crash-loop the machine);
2. once as many new ones are ready as there are old ones, drain every old one: it takes no
   new work and its in-flight work finishes. So the warm count never dips.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from floodway.routers.decide import WARM


@dataclass(frozen=True)
class Running:
    """A live container as rollout sees it: the key of the build it was started on."""

    id: str
    build: str | None
    state: str


@dataclass(frozen=True)
class Rollout:
    """Start `starts` containers on the new build; drain the `drain` ones (ids)."""

    latest: str
    starts: int = 0
    drain: tuple[str, ...] = ()


def rolling(latest: str | None, builds: Iterable[str | None]) -> bool:
    """True while some live container runs another build than the latest one."""
    return latest is not None and any(b != latest for b in builds)


def serving(latest: str | None, builds: Iterable[str | None]) -> str | None:
    """The key of the one build serving: that of every live container (`builds`), or
    `latest` when none is live; None when unknown or while two serve (a rollout, also one
    about to start: a live container on another build than `latest`). The response cache
    keys outputs by it, so an output is only found under the build that made it."""
    found = set(builds)
    if not found:
        return latest
    only = found.pop()
    return only if not found and (latest is None or only == latest) else None


def plan_rollout(latest: str | None, containers: Iterable[Running], *,
                 may_start: bool = True) -> Rollout | None:
    """What to do now towards `latest` (see the module docstring); None: nothing to roll
    (no build known, or every live container runs it). `containers`: the live ones."""
    live = list(containers)
    old = [c for c in live if c.build != latest]
    if latest is None or not old:
        return None
    new = [c for c in live if c.build == latest]
    starts = len(old) - len(new) if len(new) < len(old) and may_start else 0
    ready = sum(1 for c in new if c.state in WARM)
    drain = tuple(c.id for c in old) if ready >= len(old) else ()
    return Rollout(latest, starts, drain)


__all__ = ["Rollout", "Running", "plan_rollout", "rolling"]
