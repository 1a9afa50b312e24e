"""A discrete-event simulator of one endpoint's container pool, driven by the real
`floodway.routers.decide.decide` for every arrival and the real warm-pool policy
(`floodway.warmers.desired`, or another `floodway.sim.policy.Policy`) every minute.

    simulate(trace, route=..., warm=..., batching=..., cold=..., service=...) -> SimResult

Times in seconds on the trace's clock. `fast=True` (the default) takes exact shortcuts
(`floodway.sim.fastpath`) and gives the same `SimResult` as `fast=False`, which calls
`decide` on every arrival; `check=True` runs both and raises `DecisionMismatch` where the
dispatch test disagrees. The model and the shortcuts: docs/design/simulator.md.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left
from dataclasses import dataclass, replace

import numpy as np

from floodway.config import Batching, Route, WarmPool
from floodway.core.estimators import RATE_WINDOW_S, ArrivalRate
from floodway.core.snapshot import ContainerLoad, QueueLoad, build_snapshot
from floodway.routers.decide import QUEUE_SHARE, Action, Decision, Request, Snapshot, decide
from floodway.sim.collect import collect
from floodway.sim.fastpath import Segments, dispatch_box
from floodway.sim.kernel import prepare
from floodway.sim.model import ColdStartModel, ServiceModel
from floodway.sim.policy import Policy
from floodway.sim.pool import CHECK, Pool, SimBox
from floodway.sim.result import ACTIONS, CODES, SimResult
from floodway.sim.trace import Trace

DISPATCH_CODE = CODES[Action.DISPATCH]
assert DISPATCH_CODE == 0                 # the segment kernel writes 0 for a dispatch
# What the arrival rate counts: requests that reach the batcher (ArrivalRate's docstring).
ADMITTED = frozenset({Action.DISPATCH, Action.QUEUE, Action.SPILL_COLD})
_ADMITS = tuple(a in ADMITTED for a in ACTIONS)
TENANT = "anonymous"
PRIORITY = 1                              # every simulated request: normal priority


class DecisionMismatch(AssertionError):
    """The fast path and `decide()` disagreed (raised only with ``check=True``)."""


@dataclass(frozen=True)
class SimConfig:
    """An endpoint as the simulator sees it: its own `Route`, `WarmPool`, `Batching`, the
    measured cold-start and service models, the policy (default: `DesiredPolicy(warm)`), the
    $ per container-second, the seed of the run's Generator, `fast` (the exact dispatch
    fast path) / `check` (compare every decision against `decide`), and `max_seq_len`: the
    build's, for an endpoint that takes text (requests may then cost tokens,
    `floodway.sim.costs`), else None."""

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
    max_seq_len: int | None = None


def simulate(trace: Trace, config: SimConfig | None = None, **kw) -> SimResult:
    """Simulate `trace` against one endpoint (`config`, or `SimConfig(**kw)`). The result's
    `wall_s` is this whole call (setup, the run and building the result) except compiling the
    fast path's kernel, which the first call in a process does first (`kernel.prepare`)."""
    prepare()
    wall0 = time.perf_counter()
    result = Simulator(trace, config or SimConfig(**kw)).run()
    return replace(result, wall_s=time.perf_counter() - wall0)


class Simulator(Pool):
    """One run: the pool (`floodway.sim.pool.Pool`) with the router's decision for every
    arrival (`decide()`, or the exact fast path and bulk segments: the module docstring)."""

    def __init__(self, trace: Trace, cfg: SimConfig) -> None:
        super().__init__(trace, cfg)
        self.row_tokens = 0.0                # a request's mean tokens (`setup`; 0: rows alone)
        self.cum = None                      # admitted rows before each arrival (`setup`)
        self.seg: Segments | None = None
        self.pieces: list[tuple] = []        # (at, count): segments' busy intervals
        self.bulk_runs = self.bulk_requests = 0     # segments run in bulk, and their arrivals
        # The arrival rate: the runtime's estimator in the reference mode, else cumulative
        # admitted rows (`cum`) and the first arrival of the window (`win_lo`).
        self.arrivals = None if cfg.fast else ArrivalRate()
        self.win_lo = 0
        self.starts_changed()

    def starts_changed(self) -> None:
        """What segments need of the containers starting: when each was asked for, and
        whether decide()'s queue has room for one request with nothing queued (its step 5:
        a share of max_queue, plus the slots of the starting containers)."""
        self.starting_s = np.array([b.created_s for b in self.live if not b.warm])
        self.can_queue = math.floor(self.cfg.route.max_queue * QUEUE_SHARE[PRIORITY]) + \
            self.slots * len(self.starting_s) > 0

    # ------------------------------------------------------------ decisions
    def rate(self, i: int, now: float) -> float:
        """Rows/s admitted in the window before arrival `i` at `now` (`ArrivalRate.rate`)."""
        if self.arrivals is not None:
            return self.arrivals.rate(now)
        lo = self.win_lo = bisect_left(self.times, now - RATE_WINDOW_S, self.win_lo, i)
        return (self.cum[i] - self.cum[lo]) / RATE_WINDOW_S

    def snapshot(self, now: float, i: int) -> Snapshot:
        """`decide()`'s view of the pool for arrival `i` at `now` (`build_snapshot`)."""
        slots = self.slots
        tokens = self.tok is not None
        loads = [ContainerLoad(b.key, b.state, tuple([x.rows for x in b.batches]), slots,
                               0.0 if b.warm else now - b.created_s,
                               tuple([x.rows * x.tok for x in b.batches]) if tokens else ())
                 for b in self.live]
        q = len(self.queue)
        queue = QueueLoad(_at_priority(self.queued_rows), _at_priority(q),
                          {TENANT: q} if q else {},
                          _at_priority(self.queued_tokens) if tokens else None)
        return build_snapshot(now, self.cfg, loads, queue, service=self.fit,
                              cold_start_s=self.cold_est, arrival_rows_per_s=self.rate(i, now),
                              row_tokens=self.row_tokens, max_batch_tokens=self.max_tokens)

    def decision(self, i: int, now: float, rows: int) -> Decision:
        return decide(self.snapshot(now, i), Request(
            rows=rows, deadline_s=self.deadline[i], priority=PRIORITY, tenant=TENANT,
            row_tokens=0 if self.tok is None else self.tok[i]))

    def best_free(self) -> SimBox | None:
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
            self.queued_tokens += 0 if self.tok is None else r * self.tok[i]
            self.drain_all(now)
        else:
            if d.start_cold:              # scaled to zero: spilled or shed, but start one
                self.start_box(now)
            if a == Action.SPILL_ASYNC:
                self.add_job(i, now)

    # ------------------------------------------------------------ the run
    def bulk(self, i: int) -> int:
        """Run the arrivals from i in bulk while each is dispatched, up to the next heap event
        (the caller checked that the queue is empty and no batch is in flight); returns the
        first arrival not run (i if none). See `floodway.sim.fastpath`."""
        boxes = [b for b in self.live if b.warm]
        max_busy = self.max_busy(len(boxes)) if boxes else 0
        if not max_busy:                   # the first dispatch starts one: the kernel would stop
            return i
        seg, sd, rng = self.seg, self.scaledown_s, self.rng
        # Before the next event, and before any idle check a segment's end could push.
        bound = min(self.heap[0][0] if self.heap else math.inf, self.times[i] + sd)
        durs = None
        if seg.samples:                    # sampled batch times: draw ahead, keep what is used
            state = rng.bit_generator.state
            pick = rng.integers(len(seg.samples), size=min(seg.n - i, 256) * 2)
            durs = seg.samples_np[pick]
        k, added, first_e, first_c, idle_at, drawn, self.win_lo = seg.run(
            i, len(boxes), max_busy, bound, durs, self.win_lo, self.codes, self.can_queue,
            self.starting_s, self.cold_est)
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
                self.push(due, CHECK, box)
        for box, at in zip(boxes, idle_at, strict=True):
            if at == at:                   # not nan: it went idle in the segment
                box.idle_since_s = at
        self.bulk_runs += 1
        self.bulk_requests += k - i
        return k

    def setup(self) -> None:
        """The pool's setup (the trace as arrays, the initial floor, the first tick), then the
        admitted rows' running sum and the segments."""
        super().setup()
        tr, cfg = self.trace, self.cfg
        n = tr.requests
        cum_np = np.zeros(n + 1, dtype=np.int64)
        self.cum = memoryview(cum_np)
        tok_np = self.tok_np
        self.row_tokens = 0.0 if tok_np is None or not n else float(tok_np.mean())
        if cfg.fast and not cfg.check and n and tok_np is None and cfg.service.plain:
            self.seg = Segments(self.times_np, self.rows_np, self.deadline_np, self.lat_end,
                                cum_np, self.fit, self.mbr, self.wait_s, self.slots,
                                cfg.service.samples_s)

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        self.setup()
        n, end_s, fast, check = self.trace.requests, self.trace.end_s, self.cfg.fast, \
            self.cfg.check
        codes = bytearray(n)
        self.codes = np.frombuffer(codes, dtype=np.uint8)      # the same bytes, for segments
        heap, handle, rate, arrivals = self.heap, self.handle, self.rate, self.arrivals
        times, rows, deadlines, cum = self.times, self.rows, self.deadline, self.cum
        bulk = self.seg is not None and self.seg.usable
        dispatch_code = DISPATCH_CODE
        queue, live, slots, mbr, bw = self.queue, self.live, self.slots, self.mbr, self.wait_s
        i = 0
        while i < n:
            t = times[i]
            while heap and heap[0][0] <= t:
                handle(heapq.heappop(heap), end_s)
            if bulk and not queue and not self.working and not self.jobs:
                j = self.bulk(i)
                if j > i:
                    i = j
                    continue
            r = 1 if rows is None else rows[i]
            box = None
            tried = fast and not queue and self.tok is None
            if tried:
                box = dispatch_box(live, slots, self.fit, mbr, t, deadlines[i], r, bw, rate, i)
            if check:
                d = self.decision(i, t, r)
                if tried and ((box is not None) != (d.action == Action.DISPATCH) or
                              (box is not None and box.backlog_s != d.est_wait_s)):
                    raise DecisionMismatch(f"request {i} at {t}: fast path "
                                           f"{'dispatch' if box else 'defer'}, decide {d}")
            if box is not None:
                self.assign(box, i, r, t)
                codes[i] = dispatch_code       # (a segment backed off may have left another)
                cum[i + 1] = cum[i] + r
                i += 1
                continue
            if not check:
                d = self.decision(i, t, r)
            c = codes[i] = CODES[d.action]
            if _ADMITS[c]:
                cum[i + 1] = cum[i] + r
                if arrivals is not None:
                    arrivals.record(t, r)
            else:
                cum[i + 1] = cum[i]
            self.act(d, i, r, t)
            i += 1
        while heap:
            handle(heapq.heappop(heap), end_s)
        return collect(self, codes, time.perf_counter() - wall0)


def _at_priority(n: int) -> tuple[int, int, int]:
    """`n` at `PRIORITY` in a (low, normal, high) triple."""
    return (n, 0, 0) if PRIORITY == 0 else (0, n, 0) if PRIORITY == 1 else (0, 0, n)


__all__ = ["ACTIONS", "ADMITTED", "CODES", "DecisionMismatch", "SimConfig", "Simulator",
           "simulate"]
