"""The pool of one simulated endpoint: containers, their batches, the router's queue, the
warm-pool policy every minute and the events that drive them (`Pool`, the base of
`floodway.sim.engine.Simulator`), the deadline hand-off and the async jobs, run in batches
of their own on idle containers. It carries out `floodway.core.reconcile`'s plans and decides
nothing about its size itself. Events are heap entries ``(time, kind, seq, obj, extra)``,
ordered as docs/design/simulator.md ("The pool") says.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_right
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from floodway.config import Route
from floodway.core import handoff
from floodway.core.estimators import ColdStartEstimator, ServiceEstimator, measured
from floodway.core.reconcile import EPS_S, Box, Do, reconcile, starts_needed
from floodway.core.snapshot import pipeline_slots
from floodway.routers.batch_item import JOB_BATCH_SHARE
from floodway.routers.tokens import batch_tokens
from floodway.sim.costs import request_tokens
from floodway.sim.model import LOAD_WINDOW_S
from floodway.sim.policy import DesiredPolicy
from floodway.sim.trace import MINUTE_S, Trace
from floodway.warmers.target import History, WarmTarget

if TYPE_CHECKING:
    from floodway.sim.engine import SimConfig

# Event kinds; at equal times the heap orders by kind: a container that becomes ready or
# frees a slot does so before a policy tick or idle check at the same instant.
READY, DONE, TICK, CHECK = 0, 1, 2, 3


def handoff_margin_s(route: Route) -> float:
    """Seconds before a request's deadline (``route.timeout_s`` after its arrival) at which
    it is handed off to the async queue: the router's margin
    (`floodway.core.handoff.handoff_margin_s`); 0.0 when the route does not spill to async
    (no hand-off: a queued request waits until its deadline)."""
    if "async" not in route.spill:
        return 0.0
    return handoff.handoff_margin_s(route.timeout_s)


class SimBatch:
    """One batch on a simulated container: its requests (trace indices), rows and times."""

    __slots__ = ("reqs", "rows", "tok", "cut_s", "start_s", "end_s", "dur_s", "est_s", "fac",
                 "low")

    def __init__(self) -> None:
        self.reqs: list[int] = []
        self.rows = 0
        self.tok = 0                 # its longest row's tokens (0: rows alone)
        self.cut_s = math.inf        # when the batcher sends it: nothing joins after
        self.start_s = math.inf      # inf: behind another batch, start not known yet
        self.end_s = math.inf
        self.dur_s = -1.0            # a sampled duration (service samples), else -1
        self.est_s = 0.0             # the fitted time added to the container's backlog
        self.fac = 1.0               # its contention factor, set when it starts
        self.low = False             # async jobs' (no latency recorded)


class SimBox:
    """One simulated container."""

    __slots__ = ("id", "key", "warm", "stopped", "created_s", "ready_s", "stop_s", "batches",
                 "backlog_s", "idle_since_s", "check_at_s", "seen")

    def __init__(self, cid: int, created_s: float, ready_s: float) -> None:
        self.id = cid
        self.key = str(cid)              # its id in snapshots and reconcile plans
        self.warm = False
        self.stopped = False
        self.created_s = created_s
        self.ready_s = ready_s
        self.stop_s = math.inf
        self.batches: deque[SimBatch] = deque()
        self.backlog_s = 0.0
        self.idle_since_s = ready_s
        self.check_at_s = math.inf
        self.seen: Box | None = None     # the last `box()`, while still true

    @property
    def state(self) -> str:
        """starting | ready | busy, as `floodway.core.reconcile` and the snapshot name them."""
        return ("busy" if self.batches else "ready") if self.warm else "starting"

    def box(self) -> Box:
        """This container as `floodway.core.reconcile.reconcile` sees it."""
        seen = self.seen
        busy = self.warm and bool(self.batches)
        state = "busy" if busy else "ready" if self.warm else "starting"
        if seen is None or seen.state != state or seen.idle_since_s != self.idle_since_s:
            seen = self.seen = Box(self.key, state, busy, self.idle_since_s)
        return seen


class Pool:
    """Containers, batches, the queue, the async jobs and the policy of one run of `trace`
    with `cfg` (a `floodway.sim.engine.SimConfig`); `setup` reads the trace into arrays,
    starts the initial floor and pushes the first policy tick, then events are `handle`d in
    time order. Requests are trace indices; every time is on the trace's clock."""

    def __init__(self, trace: Trace, cfg: SimConfig) -> None:
        self.trace, self.cfg = trace, cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.policy = cfg.policy or DesiredPolicy(cfg.warm)
        self.fit = cfg.service.fit           # the router's service fit (it may follow batches)
        self.estimator: ServiceEstimator | None = None   # made when it first follows one
        self.mbr = cfg.batching.max_batch_rows
        self.wait_s = cfg.batching.wait_ms / 1000.0
        self.slots = pipeline_slots(cfg.route.max_inflight_per_container)
        self.cap = cfg.warm.container_cap
        self.cold_est = cfg.cold.estimate_s
        self.measured = measured(ColdStartEstimator(self.cold_est), ServiceEstimator(self.fit),
                                 self.mbr)
        self.scaledown_s = float(cfg.warm.scaledown_window_s)
        self.target = WarmTarget(min(cfg.warm.min_containers, self.cap), 0, self.scaledown_s,
                                 "the configured floor, before the policy's first tick")
        self.pstate = None
        self.heap: list[tuple] = []
        self.seq = 0
        self.live: list[SimBox] = []         # starting + warm, in start order
        self.all: list[SimBox] = []
        self.queue: deque[int] = deque()
        self.queued_rows = 0
        self.queued_tokens = 0
        # The trace as arrays (`setup`); token costs: None and 0 decide by rows.
        self.times = self.deadline = self.rows = self.tok = None
        self.times_np = self.deadline_np = self.rows_np = self.tok_np = None
        self.max_tokens = 0
        self.lat_end = self.counts = self.history = None
        self.started = self.cold_requests = self.expired = 0
        self.busy_a: list[float] = []
        self.busy_b: list[float] = []
        self.policy_s = 0.0
        self.working = 0                     # live containers with a batch in flight
        # (min, buffer, warm, live) -> max_busy: how `keep` answers, remembered.
        self.busy_limits: dict[tuple[int, int, int, int], int] = {}
        # The async jobs (request indices, in order), and the hand-off's margin.
        self.jobs: deque[int] = deque()
        self.jobs_run = 0
        self.jobs_end_s = math.nan
        self.handed_off = 0                  # queued requests withdrawn at their hand-off
        self.handoff_s = handoff_margin_s(cfg.route)

    def setup(self) -> None:
        """The trace as arrays, the initial warm floor, and the first tick."""
        tr, cfg = self.trace, self.cfg
        n = tr.requests
        # Read one by one as Python numbers through memoryviews: no per-element objects to
        # build and free for a million arrivals, most of which bulk segments take as arrays.
        self.times_np = np.ascontiguousarray(tr.times_s, dtype=np.float64)
        self.rows_np = None if tr.rows is None else np.ascontiguousarray(tr.rows,
                                                                          dtype=np.int64)
        self.deadline_np = self.times_np + cfg.route.timeout_s
        self.times, self.deadline = memoryview(self.times_np), memoryview(self.deadline_np)
        self.rows = None if self.rows_np is None else memoryview(self.rows_np)
        self.tok_np = request_tokens(tr, cfg.max_seq_len, self.fit)
        self.tok = None if self.tok_np is None else memoryview(self.tok_np)
        self.max_tokens = 0 if self.tok_np is None else batch_tokens(cfg.batching)
        self.lat_end = np.full(n, math.nan)
        self.counts = tr.counts
        self.history = History(tr.start_minute, tr.counts)    # checked once, cut each minute
        start_s = tr.start_s
        for _ in range(min(cfg.warm.min_containers, self.cap)):
            self.start_box(start_s, warm_now=True).idle_since_s = start_s
        for b in self.live:
            self.went_idle(b, start_s)
        self.push(start_s, TICK, None)

    # ------------------------------------------------------------ events and containers
    def push(self, t: float, kind: int, obj: object, extra: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, obj, extra))

    def start_box(self, now: float, warm_now: bool = False) -> SimBox:
        cold = 0.0 if warm_now else self.cfg.cold.sample(self.rng)
        box = SimBox(len(self.all), now, now + cold)
        self.all.append(box)
        self.live.append(box)
        if warm_now:
            box.warm = True
            box.created_s = now
        else:
            self.started += 1
            self.push(box.ready_s, READY, box)
            self.starts_changed()
        return box

    def starts_changed(self) -> None:
        """The containers starting changed (the engine's segments read them)."""

    def stop_box(self, box: SimBox, now: float) -> None:
        box.stopped = True
        box.stop_s = now
        self.live.remove(box)

    def went_idle(self, box: SimBox, now: float) -> None:
        box.idle_since_s = now
        due = now + self.scaledown_s
        if due < box.check_at_s:
            box.check_at_s = due
            self.push(due, CHECK, box)

    # ------------------------------------------------------------ batches
    def assign(self, box: SimBox, idx: int, rows: int, now: float) -> bool:
        """Give request `idx` to the router's forming batch: the newest batch not yet cut of
        `box`, else of any warm container (first in start order), if its rows (and padded
        tokens) fit; else open a new one on `box` if a slot is free. False if neither.

        As the runtime's batcher does, a batch is cut (sent to the container) ``wait_s``
        after its oldest request arrived, at once when full: one behind another is cut
        then too and stops growing, and what arrives later waits for a slot (in the
        router's queue) rather than riding in it. The batcher forms one batch at a time,
        whatever container `decide` picks (measured: two texts 1 ms apart, two containers
        idle, ran as one batch of 2)."""
        tok = 0 if self.tok is None else self.tok[idx]
        for other in (box, *self.live):
            last = other.batches[-1] if other.batches and other.warm else None
            if last is not None and last.start_s > now and now <= last.cut_s and \
                    last.rows + rows <= self.mbr and (not self.max_tokens or (
                        last.rows + rows) * max(last.tok, tok) <= self.max_tokens):
                self._grow(other, last, idx, rows, tok)
                return True
        bs = box.batches
        if len(bs) >= self.slots:
            return False
        b = SimBatch()
        bs.append(b)
        self._grow(box, b, idx, rows, tok)
        full = b.rows >= self.mbr or 0 < self.max_tokens <= b.rows * b.tok
        b.cut_s = now if full else max(now, self.times[idx] + self.wait_s)
        if len(bs) == 1:
            self._first(box, b, now)
        return True

    def _first(self, box: SimBox, b: SimBatch, now: float) -> None:
        """`b` is the only batch of `box`: it gets busy, and `b` begins when it is cut."""
        self.working += 1
        # Modal's buffer: idle containers on top of the busy ones, started as one gets busy.
        # Only the busy count changed, so reconcile's plan is rule 1 alone (its idle
        # checks are already scheduled): `starts_needed` without building every Box.
        for _ in range(starts_needed(self.target.keep(self.working, self.cap),
                                     len(self.live))):
            self.start_box(now)
        self._begin(box, b, b.cut_s)

    def open_batch(self, box: SimBox, reqs: list[int], rows: int, tok: int, now: float,
                   low: bool = False) -> None:
        """A batch of `reqs` (`rows` rows, the longest `tok` tokens) cut at `now` on `box`,
        which has nothing in flight (`run_jobs`'s job batches)."""
        b = SimBatch()
        b.reqs, b.rows, b.tok, b.low, b.cut_s = reqs, rows, tok, low, now
        b.est_s = self.fit.seconds(rows, rows * tok)
        box.batches.append(b)
        box.backlog_s = self._backlog(box)
        self._first(box, b, now)

    def _grow(self, box: SimBox, b: SimBatch, idx: int, rows: int, tok: int = 0) -> None:
        b.reqs.append(idx)
        b.rows += rows
        if tok > b.tok:
            b.tok = tok
        b.est_s = self.fit.seconds(b.rows, b.rows * b.tok)
        box.backlog_s = self._backlog(box)
        if b.start_s < math.inf and b.dur_s < 0:     # joined before it started: runs longer
            b.end_s = b.start_s + self._run_s(b) * b.fac

    def _run_s(self, b: SimBatch) -> float:
        """Seconds `b` runs before contention: the model's, where the router's estimate
        (`fit`, `b.est_s`) may have moved away from it (`ServiceModel.follow_batches`)."""
        svc = self.cfg.service
        est = b.est_s if self.fit is svc.fit else svc.fit.seconds(b.rows, b.rows * b.tok)
        return svc.batch_s(b.rows, est)

    def _learn(self, b: SimBatch, now: float) -> None:
        """The router's estimate after `b` ran (the runtime records each batch's seconds)."""
        est = self.estimator
        if est is None:
            svc = self.cfg.service
            est = self.estimator = ServiceEstimator(svc.fit, svc.follow_batches)
        est.record(b.rows, now - b.start_s, b.rows * b.tok)
        self.fit = est.fit

    def _backlog(self, box: SimBox) -> float:
        """The container's backlog as the snapshot builder sums it (`container_view`; a
        running total would round differently): its batches' fitted times, oldest first,
        or with tokens their row costs plus the per-token cost of all their tokens."""
        if self.tok is None:
            return sum(x.est_s for x in box.batches)
        fit = self.fit
        return sum(fit.seconds(x.rows) for x in box.batches) + \
            fit.per_token_s * sum(x.rows * x.tok for x in box.batches)

    def _begin(self, box: SimBox, b: SimBatch, start: float) -> None:
        b.start_s = start
        svc = self.cfg.service
        # Containers share the machine: a batch runs slower the more are busy as it starts
        # (its own too), and the faster requests arrive (the router's and client's cores).
        b.fac = svc.factor(self.working) if svc.contention else 1.0
        if svc.load.active:
            t = self.times
            b.fac *= svc.load.factor((bisect_right(t, start) - bisect_right(
                t, start - LOAD_WINDOW_S)) / LOAD_WINDOW_S, self.working)
        if svc.samples_s:
            b.dur_s = svc.samples_s[int(self.rng.integers(len(svc.samples_s)))] * b.fac
            b.end_s = start + b.dur_s
        else:
            b.end_s = start + self._run_s(b) * b.fac
        self.push(b.end_s, DONE, box, b)

    def on_done(self, box: SimBox, b: SimBatch, now: float) -> None:
        if b.end_s > now:                  # it grew after this event was pushed
            self.push(b.end_s, DONE, box, b)
            return
        box.batches.popleft()
        if self.cfg.service.follow_batches:
            self._learn(b, now)
        box.backlog_s = self._backlog(box) if box.batches else 0.0
        if not box.batches:
            self.working -= 1
        self.busy_a.append(b.start_s)
        self.busy_b.append(now)
        times, lat_end = self.times, self.lat_end
        ready = box.ready_s
        if b.low:
            self.jobs_end_s = now
        else:
            for i in b.reqs:
                lat_end[i] = now
                if times[i] < ready:
                    self.cold_requests += 1
        if box.batches:
            self._begin(box, box.batches[0], now)
        if self.queue:
            self.drain(box, now)
        if not box.batches and not self.run_jobs(box, now):
            self.went_idle(box, now)

    def drain(self, box: SimBox, now: float) -> None:
        q, rows, times_dl, tok = self.queue, self.rows, self.deadline, self.tok
        margin = self.handoff_s
        while q:
            i = q[0]
            r = 1 if rows is None else rows[i]
            if times_dl[i] - margin <= now:
                q.popleft()
                self.queued_rows -= r
                self.queued_tokens -= 0 if tok is None else r * tok[i]
                if margin:
                    self.handed_off += 1
                    self.jobs.append(i)
                else:
                    self.expired += 1
                continue
            if not self.assign(box, i, r, now):
                return
            q.popleft()
            self.queued_rows -= r
            self.queued_tokens -= 0 if tok is None else r * tok[i]

    def drain_all(self, now: float) -> None:
        for box in self.live:
            if not self.queue:
                return
            if box.warm:
                self.drain(box, now)

    def max_busy(self, warm: int) -> int:
        """How many of the `warm` containers may be busy at once: one more would make the
        warm target keep more containers than are live (a start, `Pool.assign`)."""
        target, nlive = self.target, len(self.live)
        key = (target.min_containers, target.buffer_containers, warm, nlive)
        busy = self.busy_limits.get(key)
        if busy is None:
            keep, cap = target.keep, self.cap
            busy = warm
            if keep(warm, cap) > nlive:
                busy = 0
                while keep(busy + 1, cap) <= nlive:
                    busy += 1
            self.busy_limits[key] = busy
        return busy

    # ------------------------------------------------------------ async jobs
    def add_job(self, idx: int, now: float) -> None:
        """Request `idx` became an async job at `now`: it waits, or runs at once on an idle
        container."""
        self.jobs.append(idx)
        if not self.queue:
            for box in self.live:
                if not self.jobs:
                    return
                if box.warm and not box.batches:
                    self.run_jobs(box, now)

    def run_jobs(self, box: SimBox, now: float) -> bool:
        """Open a job batch on `box` (warm, nothing in flight) if jobs wait and no sync
        request is queued; True if it did."""
        jobs = self.jobs
        if not jobs or self.queue or box.batches or not box.warm:
            return False
        limit_s = JOB_BATCH_SHARE * self.cfg.route.timeout_s
        take, rows, tok = [], 0, 0
        for idx in jobs:
            r = 1 if self.rows is None else self.rows[idx]
            t = 0 if self.tok is None else self.tok[idx]
            hi, n = max(tok, t), rows + r
            if take and (n > self.mbr or (self.max_tokens and n * hi > self.max_tokens)
                         or self.fit.seconds(n, n * hi) > limit_s):
                break
            take.append(idx)
            rows, tok = n, hi
        for _ in take:
            jobs.popleft()
        self.jobs_run += len(take)
        self.open_batch(box, take, rows, tok, now, low=True)
        return True

    # ------------------------------------------------------------ policy
    def on_tick(self, now: float) -> None:
        k = int(round(now / MINUTE_S)) - self.trace.start_minute
        hist = History.view_of(self.history, min(max(k, 0), len(self.counts)))
        t0 = time.perf_counter()
        self.target, self.pstate = self.policy(now, hist, self.measured, self.pstate)
        self.policy_s += time.perf_counter() - t0
        window, self.scaledown_s = self.scaledown_s, self.target.scaledown_window_s
        # As many live as the target keeps and the same window: nothing to start or stop, and
        # every idle container's check is already due when its window runs out.
        if len(self.live) != self.target.keep(self.working, self.cap) or \
                window != self.scaledown_s:
            self.reconcile(now)

    def reconcile(self, now: float) -> None:
        """Carry out `floodway.core.reconcile.reconcile` for the live containers now: start
        and stop what it says, then make sure each idle container whose scaledown window ends
        later has its idle check by then (the window may have changed)."""
        live = self.live
        plan = reconcile(self.target.keep(self.working, self.cap), [b.box() for b in live],
                         now, self.scaledown_s)
        if plan.actions:
            by_id = {b.key: b for b in live}
            for a in plan.actions:
                if a.do == Do.START:
                    self.start_box(now)
                else:
                    self.stop_box(by_id[a.container], now)
        # Idle containers due later (reconcile names the earliest, unless it only started
        # some): each is checked when its window runs out.
        if plan.next_check_s < math.inf or plan.starts:
            for box in live:
                if box.warm and not box.batches:
                    due = box.idle_since_s + self.scaledown_s
                    if now < due < box.check_at_s:
                        box.check_at_s = due
                        self.push(due, CHECK, box)

    def on_check(self, box: SimBox, now: float) -> None:
        """An idle check of `box`: reconcile once its scaledown window has run out, else check
        again when it does."""
        if now >= box.check_at_s - EPS_S:
            box.check_at_s = math.inf
        if box.stopped or not box.warm or box.batches:
            return
        due = box.idle_since_s + self.scaledown_s
        if due > now + EPS_S:
            if due < box.check_at_s:
                box.check_at_s = due
                self.push(due, CHECK, box)
            return
        if len(self.live) > self.target.keep(self.working, self.cap):     # one may stop
            self.reconcile(now)

    def on_ready(self, box: SimBox, now: float) -> None:
        box.warm = True
        self.starts_changed()
        if self.queue:
            self.drain(box, now)
        if not box.batches and not self.run_jobs(box, now):
            self.went_idle(box, now)

    def handle(self, ev: tuple, end_s: float) -> None:
        t, kind, _, obj, extra = ev
        if kind == DONE:
            self.on_done(obj, extra, t)
        elif kind == READY:
            self.on_ready(obj, t)
        elif t <= end_s:
            if kind == TICK:
                self.on_tick(t)
                if t + MINUTE_S < end_s:
                    self.push(t + MINUTE_S, TICK, None)
            else:
                self.on_check(obj, t)


__all__ = ["CHECK", "DONE", "READY", "TICK", "Pool", "SimBatch", "SimBox",
           "handoff_margin_s"]
