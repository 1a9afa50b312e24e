"""Recycling: which container to drain and replace because it outgrew `fw.Recycle`'s limits.

    over_limit(usage, limits) -> why it is past a limit, or None
    pick(containers, limits) -> Over | None
    step(current, containers, limits, floor) -> Step(retiring, drain, marked, too_big)

Pure functions of what the router measured (each worker's resident memory, its calls) and
the warm floor; the pool measures, and carries out what they say
(`floodway.runtime.pool_replace`). Rules:

1. Candidates are warm containers (ready, busy) that answered at least one call: one past
   its limit before any call would be replaced by one as large (the limit is below the
   endpoint's own footprint), so it is reported (`too_big`) and left alone.
2. One recycle at a time per endpoint: the pool never drains more than one container for it
   at once, and never starts more than one replacement above its target for it. Of those
   past a limit, the furthest past (use over limit, the larger of RSS and calls) goes
   first, the oldest among equals.
3. The one marked (`Retiring`) stops counting for the warm target: the pool's reconcile
   keeps `keep` other live containers while it is marked, starting a replacement when they
   are fewer (at the cap too: one above it for a cold start, as a rollout does). `keep` is
   the floor, and at least 1 while it has work in flight (its work must have somewhere to
   go, even when the floor is 0).
4. It is drained (no new work; its in-flight work finishes) once `keep` other containers
   are warm: at once when they already are (new before old only when the floor needs it).
   It serves on until then. A marked container that exited meanwhile ends the recycle.

What this promises for `max_rss_mib`: a container is marked at the first pool tick at which
its resident memory, or that memory projected at its measured growth rate over the
endpoint's cold-start estimate (the slowest start measured) and one more tick
(`Usage.rss_ahead_mib`), is past the limit; its replacement starts in that tick and it is
drained the moment the replacement is warm (the calls already sent to it still run). So it
never passes its size when marked by more than its growth during its replacement's cold
start plus those calls; a steady growth, measured over a tick before the container nears
the limit, is marked while still under it, and then the container stays under
`max_rss_mib` plus that growth, and under `max_rss_mib` itself only while the replacement
starts within the estimate (one warming beside a busy container can start slower than any
measured before) and the growth keeps its measured rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from floodway.config_recycle import Recycle
from floodway.routers.decide import LIVE, WARM


@dataclass(frozen=True)
class Usage:
    """One container as recycling sees it. `rss_mib`: its worker's resident memory (MiB;
    None: not measured); `calls`: calls of the endpoint function it answered (batches);
    `busy`: work in flight; `started_s`: when it was started (any clock; older first);
    `rss_ahead_mib`: its memory projected from its growth to when a replacement started
    now would be ready (None: not projected). A container is past `max_rss_mib` once
    either is, so a steady leak is caught a cold start early: the replacement warms while
    the container is still under the limit (what that bounds: the module's docstring)."""

    id: str
    state: str
    rss_mib: float | None = None
    calls: int = 0
    busy: bool = False
    started_s: float = 0.0
    rss_ahead_mib: float | None = None   # its memory once a replacement could be ready


@dataclass(frozen=True)
class Over:
    """A container past a limit: how far (`ratio`: use over limit, > 1) and why."""

    container: str
    ratio: float
    reason: str


@dataclass(frozen=True)
class Retiring:
    """The recycle in progress: container `id` is drained once `keep` others are warm."""

    id: str
    keep: int
    reason: str


@dataclass(frozen=True)
class Step:
    """What to do now: `retiring` is the recycle in progress after this step (None: none);
    `drain`: the container to drain now (it is recycled); `marked`: the container found past
    a limit in this step; `too_big`: one past `max_rss_mib` before any call (rule 1)."""

    retiring: Retiring | None = None
    drain: str | None = None
    marked: Over | None = None
    too_big: Over | None = None


def over_limit(u: Usage, limits: Recycle) -> Over | None:
    """How far `u` is past the limits (the larger ratio of the two), None within both."""
    found: list[tuple[float, str]] = []
    cap = limits.max_rss_mib
    if cap is not None and u.rss_mib is not None and u.rss_mib > cap:
        found.append((u.rss_mib / cap, f"resident {u.rss_mib:.1f} MiB > max_rss_mib {cap:g}"))
    elif cap is not None and u.rss_ahead_mib is not None and u.rss_ahead_mib > cap:
        found.append((u.rss_ahead_mib / cap,
                      f"resident {u.rss_mib or 0:.1f} MiB, growing: {u.rss_ahead_mib:.1f} MiB "
                      f"> max_rss_mib {cap:g} before a replacement could be ready"))
    if limits.max_requests is not None and u.calls >= limits.max_requests:
        found.append((u.calls / limits.max_requests,
                      f"{u.calls} calls >= max_requests {limits.max_requests}"))
    if not found:
        return None
    ratio, reason = max(found)
    return Over(u.id, ratio, reason)


def pick(containers: Sequence[Usage], limits: Recycle) -> Over | None:
    """The warm container to recycle now (rules 1-2), None when none is past a limit."""
    over = [(o, u) for u in containers if u.state in WARM and u.calls > 0
            and (o := over_limit(u, limits)) is not None]
    if not over:
        return None
    return max(over, key=lambda ou: (ou[0].ratio, -ou[1].started_s))[0]


def _too_big(containers: Sequence[Usage], limits: Recycle) -> Over | None:
    return next((o for u in containers if u.state in WARM and u.calls == 0
                 and (o := over_limit(u, limits)) is not None), None)


def step(current: Retiring | None, containers: Sequence[Usage], limits: Recycle,
         floor: int) -> Step:
    """The next step of recycling (see the module): `current` the recycle in progress
    (None: none), `containers` every container of the endpoint, `floor` the live
    containers the warm target keeps now."""
    live = {u.id: u for u in containers if u.state in LIVE}
    if current is not None and current.id not in live:
        current = None
    marked = None
    if current is None:
        marked = pick(containers, limits)
        if marked is None:
            return Step(too_big=_too_big(containers, limits))
        busy = live[marked.container].busy
        current = Retiring(marked.container, max(floor, 1 if busy else 0), marked.reason)
    warm_others = sum(1 for u in live.values() if u.id != current.id and u.state in WARM)
    if warm_others >= current.keep:
        return Step(None, current.id, marked)
    return Step(current, None, marked)


__all__ = ["Over", "Retiring", "Step", "Usage", "over_limit", "pick", "step"]
