"""Replacing live containers new before old, carried out for the local pool
(`floodway.runtime.pool.Pool.tick`): a rollout onto a newly published build
(`floodway.runtime.rollout.plan_rollout`), and recycling (`floodway.runtime.recycle.step`):
each tick, the containers of an endpoint with `fw.Recycle` limits are measured and one past
them is drained, after its replacement is ready when the warm floor needs one.

Measured per container, every pool tick (0.5 s): its worker process's resident memory
(and its growth rate, projected over a cold start: `Growth`),
from Linux's ``/proc/<pid>/statm`` (the second field, resident pages, times the page size:
the kernel's VmRSS; one read of a short file per warm container, no process listing), and
its calls (`Container.batches_done`: batches answered). On a system without ``/proc`` the
memory is not measured (only `max_requests` applies).

A recycle is logged when a container is found past a limit (its id, the measure and the
limit) and when it is drained; the drain counts a "recycled" container event
(`/readyz`'s ``container_events``, ``floodway_container_events_total{event="recycled"}`` on
/metrics). It is no failure: no backoff, no failed-start count; the replacement, when the
floor needs one, is started by the pool's reconcile (`EndpointPool.reconcile` counts the
marked container out) and counts a "start".
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from floodway.routers.decide import WARM
from floodway.runtime.recycle import Usage, step

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


def roll(ep: EndpointPool, spawn: Callable[[EndpointPool], None],
         drain: Callable[[EndpointPool, Any, str], None]) -> bool:
    """Carry out `ep`'s rollout step (`spawn(ep)` starts a container, `drain` as
    `Recycler`'s); True while a rollout is in progress (no other scaling then)."""
    plan = ep.rollout_plan()
    if plan is None:
        return False
    if plan.starts:
        log.info("build %s of %s published: warming %d new containers",
                 plan.latest[:12], ep.name, plan.starts)
    for _ in range(plan.starts):
        spawn(ep)
    for cid in plan.drain:   # stop routing to them; in-flight work finishes
        if (victim := ep.by_id(cid)) is not None:
            drain(ep, victim, "rolled")
    return True


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


__all__ = ["MIB", "PAGE_BYTES", "Recycler", "container_rss_mib", "roll", "rss_mib"]
