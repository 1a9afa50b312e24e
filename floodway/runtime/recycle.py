"""Recycling: which container to drain and replace because it outgrew `fw.Recycle`'s limits,
and the local pool's measuring and draining of it.

    over_limit(usage, limits) -> why it is past a limit, or None
    pick(containers, limits) -> Over | None
    step(current, containers, limits, floor) -> Step(retiring, drain, marked, too_big)
    Recycler(drain).tick(endpoint_pool)   measures, then carries out `step`

`over_limit`, `pick` and `step` are pure functions of what the router measured (each
worker's resident memory, its calls) and the warm floor; `Recycler` measures and carries out
what they say for the local pool (`floodway.runtime.pool.Pool.tick`). Rules:

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

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floodway.config import Recycle
from floodway.routers.decide import LIVE, WARM

if TYPE_CHECKING:
    from floodway.runtime.endpoint_pool import EndpointPool

log = logging.getLogger("floodway.pool")
# The growth projection (`Growth`): rates over at least a pool tick, the newest weighing
# half; the lead adds one tick (a recycle is only noticed at the next one) to the cold start.
GROWTH_SPAN_S = 0.5
GROWTH_WEIGHT = 0.5
LEAD_TICK_S = 0.5
MIB = float(1 << 20)
try:
    PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):   # no sysconf (Windows): /proc is absent too
    PAGE_BYTES = 4096


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


# ---------------------------------------------------------------------- measured and carried out
# Measured per container, every pool tick (0.5 s): its worker process's resident memory (and
# its growth rate, projected over a cold start: `Growth`), from Linux's ``/proc/<pid>/statm``
# (the second field, resident pages, times the page size: the kernel's VmRSS; one read of a
# short file per warm container, no process listing), and its calls
# (`Container.batches_done`: batches answered). On a system without ``/proc`` the memory is
# not measured (only `max_requests` applies).
#
# A recycle is logged when a container is found past a limit (its id, the measure and the
# limit) and when it is drained; the drain counts a "recycled" container event (`/readyz`'s
# ``container_events``, ``floodway_container_events_total{event="recycled"}`` on /metrics).
# It is no failure: no backoff, no failed-start count; the replacement, when the floor needs
# one, is started by the pool's reconcile (`EndpointPool.reconcile` counts the marked
# container out) and counts a "start".

def rss_mib(pid: int | None) -> float | None:
    """Resident memory of process `pid` in MiB (None: no pid, no ``/proc``, or the process
    has exited)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_BYTES / MIB
    except (OSError, ValueError, IndexError):
        return None


def container_rss_mib(c: Any) -> float | None:
    """The resident memory of container `c`'s worker process (its `pid`), in MiB."""
    return rss_mib(getattr(c, "pid", None))


class Growth:
    """A container's memory growth in MiB/s: the rate between samples at least
    `GROWTH_SPAN_S` apart, smoothed (EWMA, weight `GROWTH_WEIGHT`), never below 0 (freed
    memory is no reason to wait)."""

    def __init__(self) -> None:
        self.t_s: float | None = None
        self.mib = 0.0
        self.per_s = 0.0

    def add(self, t_s: float, mib: float) -> float:
        if self.t_s is None:
            self.t_s, self.mib = t_s, mib
        elif t_s - self.t_s >= GROWTH_SPAN_S:
            rate = max(0.0, (mib - self.mib) / (t_s - self.t_s))
            self.per_s = rate if self.per_s == 0.0 else \
                GROWTH_WEIGHT * rate + (1 - GROWTH_WEIGHT) * self.per_s
            self.t_s, self.mib = t_s, mib
        return self.per_s


class Recycler:
    """Recycling for every endpoint of a pool. `drain(ep, container, event)`: the pool's
    drain (stop routing to it, stop it once its in-flight work finished, count `event`).
    `rss_of(container)`: its worker's resident MiB (default `container_rss_mib`; tests
    give fake numbers)."""

    def __init__(self, drain: Callable[[EndpointPool, Any, str], None],
                 rss_of: Callable[[Any], float | None] = container_rss_mib,
                 clock: Callable[[], float] = time.monotonic):
        self.drain, self.rss_of, self.clock = drain, rss_of, clock
        self._warned: set[str] = set()   # units told their limit is below a fresh worker
        self._growth: dict[Any, Growth] = {}

    def _ahead(self, ep: EndpointPool, c: Any, rss: float | None) -> float | None:
        """`c`'s memory projected to when a replacement started now would be ready: its
        measured growth rate over the endpoint's cold start and one more tick."""
        if rss is None:
            return None
        g = self._growth.setdefault(c.id, Growth())
        per_s = g.add(self.clock(), rss)
        return rss + per_s * (ep.cold.estimate_s() + LEAD_TICK_S)

    def usages(self, ep: EndpointPool, measure: bool = True) -> tuple[Usage, ...]:
        """What `step` reads of `ep`'s containers (memory measured for warm ones only, and
        only when `measure` and the endpoint limits it)."""
        limits = ep.endpoint.recycle
        measure = measure and limits is not None and limits.max_rss_mib is not None
        live = {c.id for c in ep.containers}
        for cid in [k for k in self._growth if k not in live]:
            del self._growth[cid]     # exited containers
        out = []
        for c in ep.containers:
            rss = self.rss_of(c) if measure and c.state in WARM else None
            out.append(Usage(str(c.id), str(c.state), rss, getattr(c, "batches_done", 0),
                             bool(c.inflight), c.history[0][0],
                             self._ahead(ep, c, rss) if measure else None))
        return tuple(out)

    def tick(self, ep: EndpointPool, measure: bool = True) -> None:
        """One step for `ep` (nothing without `Endpoint.recycle`): mark, or drain. The pool
        also calls it, not measuring, when a container of `ep` changed state during a
        recycle: the marked one drains the moment its replacement is ready, not a tick
        later (it grows meanwhile)."""
        limits = ep.endpoint.recycle
        if limits is None:
            return
        out = step(ep.recycling, self.usages(ep, measure), limits, ep.floor)
        if out.too_big is not None and ep.name not in self._warned:
            self._warned.add(ep.name)
            log.warning("container %s of %s: %s before any call; not recycled (a new one "
                        "would start as large: raise max_rss_mib)", out.too_big.container,
                        ep.name, out.too_big.reason)
        if out.marked is not None:
            log.info("container %s of %s: %s; recycling it (%s)", out.marked.container,
                     ep.name, out.marked.reason,
                     "draining it now" if out.drain else "a replacement warms first")
        ep.recycling = out.retiring
        if out.drain is not None and (c := ep.by_id(out.drain)) is not None:
            rss = self.rss_of(c) if limits.max_rss_mib is not None else None
            log.info("container %s of %s recycled: drained (resident %s MiB, max_rss_mib %s; "
                     "%d calls, max_requests %s)", c.id, ep.name,
                     "?" if rss is None else f"{rss:.1f}", limits.max_rss_mib,
                     getattr(c, "batches_done", 0), limits.max_requests)
            self.drain(ep, c, "recycled")


__all__ = ["MIB", "PAGE_BYTES", "Over", "Recycler", "Retiring", "Step", "Usage",
           "container_rss_mib", "over_limit", "pick", "rss_mib", "step"]
