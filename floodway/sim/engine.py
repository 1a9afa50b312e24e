"""A discrete-event simulator of one endpoint's container pool, driven by the real
`floodway.routers.decide.decide` for every arrival and the real warm-pool policy
(`floodway.warmers.desired`, or another `floodway.sim.policy.Policy`) every minute.

    simulate(trace, route=..., warm=..., batching=..., cold=..., service=...) -> SimResult

The model (times in seconds on the trace's clock):

- Containers go starting -> ready (idle or busy) -> stopped. A start takes a cold start drawn
  from `ColdStartModel` with the run's seeded numpy Generator. Starting time is billed.
- A ready container runs one batch at a time and holds at most
  ``route.max_inflight_per_container`` batches (its slots; as in `decide`, slots pipeline work,
  they add no throughput). A request sent to it joins its newest batch that has not started
  yet if the rows fit in ``batching.max_batch_rows``, else opens a new batch. A batch on an
  idle container starts ``batching.wait_ms`` after it opens (the batcher's wait) unless full;
  one behind another starts when the previous one ends. Batch time comes from `ServiceModel`.
- The router's queue is FIFO: whenever a container becomes ready or ends a batch, queued
  requests fill its free slots in order (at most max_batch_rows rows per batch); a queued
  request whose deadline has passed is dropped (`expired`), as the batcher drops it.
- Every arrival is decided by `decide(Snapshot, Request)` with the request's deadline
  (arrival + ``route.timeout_s``): dispatch to the warm container `decide` picks (least
  backlog among those with a free slot, first in start order), queue, spill_cold (start a
  container, the request then waits in the queue), spill_async (counted, not simulated
  further) or shed. The snapshot is the pool as the local runtime reports it: a container's
  `backlog_s` is the fitted time of its batches in flight, a starting one's `ready_in_s` its
  remaining start time, `cold_start_s` the slowest measured start, all one tenant.
- Every minute, on the minute, the policy gets the per-minute arrival counts of the minutes
  that have *ended* (no look-ahead) and returns a `WarmTarget`. The pool obeys it with Modal's
  semantics (`WarmTarget.keep`, as the local pool): ``keep = max(min_containers, containers
  working + buffer_containers)``; containers are started at once (ahead of demand) while
  fewer than `keep` are live, at the tick and whenever a container gets busy (the buffer is
  only nonzero while the policy saw the endpoint active, in the minutes that ended); an idle
  container is stopped once it has been idle for ``scaledown_window_s`` and more than `keep`
  are live (the longest idle first); a request that arrives while no warm container can take
  it waits for a start (a cold start).
- At the start of the trace the pool holds the config's ``min_containers``, already warm (as
  a deployed endpoint would); the simulated span is the trace's whole minutes, plus the time
  the last batch needs to end.

Speed (exact: `fast=True`, the default, gives the same `SimResult` as `fast=False`, which
calls `decide` on every arrival; tests/unit/sim/test_engine.py compares every field):

- The dispatch test (`floodway.sim.fastpath.dispatch_box`): with the router's queue empty,
  `decide` can only dispatch or not by its steps 2 and 4 (budget > 0; an idle warm container;
  else alone and least backlog + alone within budget x HEADROOM), which the engine evaluates
  on its own state with the same float expressions; any other case builds the `Snapshot`
  (about 10 us in CPython) and calls `decide`.
- Bulk segments (`floodway.sim.fastpath.Segments`): from an arrival that finds the queue empty
  and no batch in flight, up to the next heap event, arrivals that are all dispatched are
  replayed by a compiled kernel over arrays (`floodway.sim.kernel`, numba) instead of heap
  events and objects, on any number of warm containers, and backed off to the last instant
  the pool was idle again if one would not be dispatched. Their latencies are set by the
  kernel; their busy intervals are spliced among the event loop's at the end, in the order
  the event loop would have recorded them (`floodway.sim.collect`).
- The policy sees the minutes that have ended as an O(1) view of the trace's counts
  (`History.view_of`), checked once.

Containers, batches, the queue and the policy's ticks are in `floodway.sim.pool.Pool`.

`check=True` runs `decide` on every arrival as well (no bulk segments) and raises
`DecisionMismatch` if the dispatch test ever disagrees.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from floodway.config import Batching, Route, WarmPool
from floodway.routers.decide import (
    Action,
    ContainerView,
    Decision,
    Request,
    Snapshot,
    decide,
)
from floodway.sim.collect import collect
from floodway.sim.fastpath import Segments, dispatch_box
from floodway.sim.kernel import prepare
from floodway.sim.model import ColdStartModel, ServiceModel
from floodway.sim.policy import DesiredPolicy, Policy
from floodway.sim.pool import _CHECK, _TICK, Pool, _Box
from floodway.sim.result import SimResult
from floodway.sim.trace import Trace
from floodway.warmers.target import History, Measured

ACTIONS = (Action.DISPATCH, Action.QUEUE, Action.SPILL_COLD, Action.SPILL_ASYNC, Action.SHED)
_CODE = {a: i for i, a in enumerate(ACTIONS)}
assert _CODE[Action.DISPATCH] == 0        # bulk segments leave their arrivals' codes at 0
TENANT = "anonymous"



class DecisionMismatch(AssertionError):
    """The fast path and `decide()` disagreed (raised only with ``check=True``)."""



@dataclass(frozen=True)
class SimConfig:
    """An endpoint as the simulator sees it: its own `Route`, `WarmPool`, `Batching`, the
    measured cold-start and service models, the policy (default: `DesiredPolicy(warm)`), the
    $ per container-second, the seed of the run's Generator, and `fast` (the exact
    dispatch fast path) / `check` (compare every decision against `decide`)."""

    route: Route = Route()
    warm: WarmPool = WarmPool()
    batching: Batching = Batching()
    cold: ColdStartModel = ColdStartModel()
    service: ServiceModel = ServiceModel()
    policy: Policy | None = None
    usd_per_gpu_s: float = 0.000222
    seed: int = 0
    fast: bool = True
    check: bool = False


def simulate(trace: Trace, config: SimConfig | None = None, **kw) -> SimResult:
    """Simulate `trace` against one endpoint (`config`, or `SimConfig(**kw)`). The result's
    `wall_s` is this whole call (setup, the run and building the result) except compiling the
    fast path's kernel, which the first call in a process does first (`kernel.prepare`)."""
    prepare()
    wall0 = time.perf_counter()
    result = _Sim(trace, config or SimConfig(**kw)).run()
    return replace(result, wall_s=time.perf_counter() - wall0)


class _Sim(Pool):
    def __init__(self, trace: Trace, cfg: SimConfig) -> None:
        self.trace, self.cfg = trace, cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.policy = cfg.policy or DesiredPolicy(cfg.warm)
        self.fit = cfg.service.fit
        self.mbr = cfg.batching.max_batch_rows
        self.wait_s = cfg.batching.wait_ms / 1000.0
        self.slots = cfg.route.max_inflight_per_container
        self.cap = cfg.warm.container_cap
        self.cold_est = cfg.cold.estimate_s
        self.measured = Measured.from_batches(self.cold_est, self.fit.seconds(self.mbr),
                                              self.mbr)
        self.heap: list[tuple] = []
        self.seq = 0
        self.live: list[_Box] = []           # starting + warm, in start order
        self.all: list[_Box] = []
        self.queue: deque[int] = deque()
        self.queued_rows = 0
        self.floor = cfg.warm.min_containers
        self.buffer = 0
        self.scaledown_s = float(cfg.warm.scaledown_window_s)
        self.pstate = None
        self.started = 0
        self.cold_requests = 0
        self.expired = 0
        self.busy_a: list[float] = []
        self.busy_b: list[float] = []
        self.policy_s = 0.0
        self.working = 0                     # live containers with a batch in flight
        self.seg: Segments | None = None
        self.pieces: list[tuple] = []        # (at, count): segments' busy intervals
        self.bulk_runs = 0                   # segments run in bulk, and their arrivals
        self.bulk_requests = 0

    # ------------------------------------------------------------ decisions
    def snapshot(self, now: float) -> Snapshot:
        views = []
        for b in self.live:
            if b.warm:
                views.append(ContainerView(str(b.id), "busy" if b.batches else "ready",
                                           max(0, self.slots - len(b.batches)), self.slots,
                                           b.backlog_s, 0.0))
            else:
                views.append(ContainerView(str(b.id), "starting", 0, self.slots, 0.0,
                                           max(0.0, b.ready_s - now)))
        q = len(self.queue)
        return Snapshot(now_s=now, containers=tuple(views), service=self.fit,
                        cold_start_s=self.cold_est, max_batch_rows=self.mbr,
                        max_queue=self.cfg.route.max_queue, max_containers=self.cap,
                        spill=self.cfg.route.spill, queued=q, queued_rows=self.queued_rows,
                        tenant_queued={TENANT: q} if q else {})

    def best_free(self) -> _Box | None:
        """decide()'s choice: least backlog among warm containers with a free slot, the
        first in start order on a tie."""
        best = None
        slots = self.slots
        for b in self.live:
            if b.warm and len(b.batches) < slots and (best is None
                                                      or b.backlog_s < best.backlog_s):
                best = b
        return best

    def act(self, d: Decision, i: int, r: int, now: float) -> None:
        a = d.action
        if a == Action.DISPATCH:
            box = self.best_free()
            assert box is not None and self.assign(box, i, r, now)
        elif a == Action.QUEUE or a == Action.SPILL_COLD:
            if a == Action.SPILL_COLD:
                self.start_box(now)
            self.queue.append(i)
            self.queued_rows += r
            self.drain_all(now)
        elif d.start_cold:                # scaled to zero: spilled or shed, but start one
            self.start_box(now)

    # ------------------------------------------------------------ the run
    def bulk(self, i: int, codes: bytearray) -> int:
        """Run the arrivals from i in bulk while each is dispatched, up to the next heap event
        (the caller checked that the queue is empty and no batch is in flight); returns the
        first arrival not run (i if none). See `floodway.sim.fastpath`."""
        boxes = [b for b in self.live if b.warm]
        if not boxes:
            return i
        # One more busy container than this starts a buffer container (`Pool.assign`): while
        # the live ones are under the cap, once floor or busy + buffer exceeds them.
        nlive = len(self.live)
        max_busy = len(boxes)
        if self.buffer and nlive < self.cap:
            max_busy = 0 if self.floor > nlive else min(max_busy, nlive - self.buffer)
            if max_busy <= 0:           # the first dispatch starts one: the kernel would stop
                return i
        seg, sd, rng = self.seg, self.scaledown_s, self.rng
        # Before the next event, and before any idle check a segment's end could push.
        bound = min(self.heap[0][0] if self.heap else math.inf, self.times[i] + sd)
        durs = None
        if seg.samples:                    # sampled batch times: draw ahead, keep what is used
            state = rng.bit_generator.state
            pick = rng.integers(len(seg.samples), size=min(seg.n - i, 256) * 2)
            durs = seg.samples_np[pick]
        k, added, first_e, first_c, idle_at, drawn = seg.run(i, len(boxes), max_busy, bound,
                                                             durs)
        if durs is not None:
            rng.bit_generator.state = state
            if drawn:
                rng.integers(len(seg.samples), size=drawn)
        if k == i:
            return i
        if added:                          # busy intervals, spliced in at the end
            self.pieces.append((len(self.busy_a), added))
        for e, c in zip(first_e, first_c, strict=True):     # first idle, in event order
            box = boxes[c]
            due = e + sd
            if due < box.check_at_s:
                box.check_at_s = due
                self.push(due, _CHECK, box)
        for box, at in zip(boxes, idle_at, strict=True):
            if at == at:                   # not nan: it went idle in the segment
                box.idle_since_s = at
        # codes[i:k] stay 0: DISPATCH (the run starts with every code 0)
        self.bulk_runs += 1
        self.bulk_requests += k - i
        return k

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        tr, cfg = self.trace, self.cfg
        n = tr.requests
        # Read one by one as Python numbers through memoryviews: no per-element objects to
        # build and free for a million arrivals, most of which bulk segments take as arrays.
        times_np = np.ascontiguousarray(tr.times_s, dtype=np.float64)
        rows_np = None if tr.rows is None else np.ascontiguousarray(tr.rows, dtype=np.int64)
        self.times = memoryview(times_np)
        self.rows = None if rows_np is None else memoryview(rows_np)
        timeout = cfg.route.timeout_s
        deadline_np = times_np + timeout
        self.deadline = memoryview(deadline_np)
        self.lat_end = np.full(n, math.nan)
        self.counts = tr.counts
        self.history = History(tr.start_minute, tr.counts)    # checked once, cut each minute
        codes = bytearray(n)
        start_s, end_s = tr.start_s, tr.end_s
        for _ in range(min(cfg.warm.min_containers, self.cap)):
            self.start_box(start_s, warm_now=True).idle_since_s = start_s
        for b in self.live:
            self.went_idle(b, start_s)
        self.push(start_s, _TICK, None)

        heap, handle = self.heap, self.handle
        times, rows, deadlines = self.times, self.rows, self.deadline
        fast, check = cfg.fast, cfg.check
        if fast and not check and n:
            self.seg = Segments(times_np, rows_np, deadline_np, self.lat_end, self.fit,
                                self.mbr, self.wait_s, self.slots, cfg.service.samples_s)
        bulk = self.seg is not None and self.seg.usable
        queue, live, slots, fit, mbr = self.queue, self.live, self.slots, self.fit, self.mbr
        dispatch_code = _CODE[Action.DISPATCH]
        i = 0
        while i < n:
            t = times[i]
            while heap and heap[0][0] <= t:
                handle(heapq.heappop(heap), end_s)
            if bulk and not queue and not self.working:
                j = self.bulk(i, codes)
                if j > i:
                    i = j
                    continue
            r = 1 if rows is None else rows[i]
            box = None
            tried = fast and not queue
            if tried:
                box = dispatch_box(live, slots, fit, mbr, t, deadlines[i], r)
            if check:
                d = decide(self.snapshot(t), Request(rows=r, deadline_s=deadlines[i],
                                                     tenant=TENANT))
                if tried and ((box is not None) != (d.action == Action.DISPATCH) or
                              (box is not None and box.backlog_s != d.est_wait_s)):
                    raise DecisionMismatch(f"request {i} at {t}: fast path "
                                           f"{'dispatch' if box else 'defer'}, decide {d}")
            if box is not None:
                self.assign(box, i, r, t)
                codes[i] = dispatch_code
                i += 1
                continue
            if not check:
                d = decide(self.snapshot(t), Request(rows=r, deadline_s=deadlines[i],
                                                     tenant=TENANT))
            codes[i] = _CODE[d.action]
            self.act(d, i, r, t)
            i += 1
        while heap:
            handle(heapq.heappop(heap), end_s)
        return collect(self, codes, time.perf_counter() - wall0)


__all__ = ["ACTIONS", "DecisionMismatch", "SimConfig", "simulate"]
