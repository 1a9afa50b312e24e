"""The pool of one simulated endpoint: containers, their batches, the router's queue, the
warm-pool policy every minute and the events that drive them (`Pool`, the base of
`floodway.sim.engine`'s simulator; the model is described there).

Events are heap entries ``(time, kind, seq, obj, extra)``: at equal times a container that
becomes ready or frees a slot does so before a policy tick or idle check (`kind`), and events
of one kind in the order they were pushed (`seq`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque

from floodway.sim.trace import MINUTE_S
from floodway.warmers.target import History

# Event kinds; at equal times the heap orders by kind: a container that becomes ready or
# frees a slot does so before a policy tick or idle check at the same instant.
_READY, _DONE, _TICK, _CHECK = 0, 1, 2, 3
_EPS_S = 1e-9


class _Batch:
    __slots__ = ("reqs", "rows", "start_s", "end_s", "dur_s", "est_s")

    def __init__(self) -> None:
        self.reqs: list[int] = []
        self.rows = 0
        self.start_s = math.inf      # inf: behind another batch, start not known yet
        self.end_s = math.inf
        self.dur_s = -1.0            # a sampled duration (service samples), else -1
        self.est_s = 0.0             # the fitted time added to the container's backlog


class _Box:
    """One simulated container."""

    __slots__ = ("id", "warm", "stopped", "created_s", "ready_s", "stop_s", "batches",
                 "backlog_s", "idle_since_s", "check_at_s")

    def __init__(self, cid: int, created_s: float, ready_s: float) -> None:
        self.id = cid
        self.warm = False
        self.stopped = False
        self.created_s = created_s
        self.ready_s = ready_s
        self.stop_s = math.inf
        self.batches: deque[_Batch] = deque()
        self.backlog_s = 0.0
        self.idle_since_s = ready_s
        self.check_at_s = math.inf



class Pool:
    """Containers, batches, the queue and the policy of one run. The simulator sets the run's
    attributes (`cfg`, `rng`, `policy`, `measured`, `fit`, `mbr`, `wait_s`, `slots`, `cap`,
    `heap`, `live`, `all`, `queue`, the trace's `times`, `rows`, `deadline`, `counts`,
    `history`, `lat_end`, and the counters) before the first event."""

    heap: list[tuple]
    queue: deque[int]

    # ------------------------------------------------------------ events and containers
    def push(self, t: float, kind: int, obj: object, extra: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, obj, extra))

    def start_box(self, now: float, warm_now: bool = False) -> _Box:
        cold = 0.0 if warm_now else self.cfg.cold.sample(self.rng)
        box = _Box(len(self.all), now, now + cold)
        self.all.append(box)
        self.live.append(box)
        if warm_now:
            box.warm = True
            box.created_s = now
        else:
            self.started += 1
            self.push(box.ready_s, _READY, box)
        return box

    def stop_box(self, box: _Box, now: float) -> None:
        box.stopped = True
        box.stop_s = now
        self.live.remove(box)

    def keep(self) -> int:
        return max(self.floor, self.working + self.buffer) if self.buffer else self.floor

    def went_idle(self, box: _Box, now: float) -> None:
        box.idle_since_s = now
        due = now + self.scaledown_s
        if due < box.check_at_s:
            box.check_at_s = due
            self.push(due, _CHECK, box)

    # ------------------------------------------------------------ batches
    def assign(self, box: _Box, idx: int, rows: int, now: float) -> bool:
        """Give request `idx` to `box`: join its newest unstarted batch, else open a new one
        if a slot is free. False if neither is possible."""
        bs = box.batches
        if bs:
            last = bs[-1]
            if last.start_s > now and last.rows + rows <= self.mbr:
                self._grow(box, last, idx, rows)
                return True
            if len(bs) >= self.slots:
                return False
        b = _Batch()
        bs.append(b)
        self._grow(box, b, idx, rows)
        if len(bs) == 1:
            self.working += 1
            # Modal's buffer: idle containers on top of the busy ones, started as one gets busy.
            while self.buffer and len(self.live) < min(self.keep(), self.cap):
                self.start_box(now)
            self._begin(box, b, now if b.rows >= self.mbr else now + self.wait_s)
        return True

    def _grow(self, box: _Box, b: _Batch, idx: int, rows: int) -> None:
        b.reqs.append(idx)
        b.rows += rows
        est = self.fit.seconds(b.rows)
        box.backlog_s += est - b.est_s
        b.est_s = est
        if b.start_s < math.inf and b.dur_s < 0:
            b.end_s = b.start_s + est     # joined before it started: it runs longer

    def _begin(self, box: _Box, b: _Batch, start: float) -> None:
        b.start_s = start
        svc = self.cfg.service
        if svc.samples_s:
            b.dur_s = svc.samples_s[int(self.rng.integers(len(svc.samples_s)))]
            b.end_s = start + b.dur_s
        else:
            b.end_s = start + b.est_s
        self.push(b.end_s, _DONE, box, b)

    def on_done(self, box: _Box, b: _Batch, now: float) -> None:
        if b.end_s > now:                  # it grew after this event was pushed
            self.push(b.end_s, _DONE, box, b)
            return
        box.batches.popleft()
        box.backlog_s -= b.est_s
        if not box.batches:
            box.backlog_s = 0.0            # no drift from float subtraction
            self.working -= 1
        self.busy_a.append(b.start_s)
        self.busy_b.append(now)
        times, lat_end = self.times, self.lat_end
        ready = box.ready_s
        for i in b.reqs:
            a = times[i]
            lat_end[i] = now
            if a < ready:
                self.cold_requests += 1
        if box.batches:
            self._begin(box, box.batches[0], now)
        if self.queue:
            self.drain(box, now)
        if not box.batches:
            self.went_idle(box, now)

    def drain(self, box: _Box, now: float) -> None:
        q, rows, times_dl = self.queue, self.rows, self.deadline
        while q:
            i = q[0]
            r = 1 if rows is None else rows[i]
            if times_dl[i] <= now:
                q.popleft()
                self.queued_rows -= r
                self.expired += 1
                continue
            if not self.assign(box, i, r, now):
                return
            q.popleft()
            self.queued_rows -= r

    def drain_all(self, now: float) -> None:
        for box in self.live:
            if not self.queue:
                return
            if box.warm:
                self.drain(box, now)

    # ------------------------------------------------------------ policy
    def on_tick(self, now: float) -> None:
        k = int(round(now / MINUTE_S)) - self.trace.start_minute
        hist = History.view_of(self.history, min(max(k, 0), len(self.counts)))
        t0 = time.perf_counter()
        target, self.pstate = self.policy(now, hist, self.measured, self.pstate)
        self.policy_s += time.perf_counter() - t0
        self.floor = min(target.min_containers, self.cap)
        self.buffer = target.buffer_containers
        changed = target.scaledown_window_s != self.scaledown_s
        self.scaledown_s = target.scaledown_window_s
        self.reconcile(now, changed)

    def reconcile(self, now: float, recheck: bool) -> None:
        keep = min(self.keep(), self.cap)
        n = len(self.live)
        while n < keep:
            self.start_box(now)
            n += 1
        if n <= keep and not recheck:
            return
        idle = sorted((b for b in self.live if b.warm and not b.batches),
                      key=lambda b: b.idle_since_s)
        for box in idle:
            due = box.idle_since_s + self.scaledown_s
            if due <= now + _EPS_S and len(self.live) > keep:
                self.stop_box(box, now)
            elif due > now and due < box.check_at_s:
                box.check_at_s = due
                self.push(due, _CHECK, box)

    def on_check(self, box: _Box, now: float) -> None:
        if now >= box.check_at_s - _EPS_S:
            box.check_at_s = math.inf
        if box.stopped or not box.warm or box.batches:
            return
        due = box.idle_since_s + self.scaledown_s
        if due > now + _EPS_S:
            if due < box.check_at_s:
                box.check_at_s = due
                self.push(due, _CHECK, box)
            return
        if len(self.live) > min(self.keep(), self.cap):
            self.stop_box(box, now)

    def on_ready(self, box: _Box, now: float) -> None:
        box.warm = True
        if self.queue:
            self.drain(box, now)
        if not box.batches:
            self.went_idle(box, now)

    def handle(self, ev: tuple, end_s: float) -> None:
        t, kind, _, obj, extra = ev
        if kind == _DONE:
            self.on_done(obj, extra, t)
        elif kind == _READY:
            self.on_ready(obj, t)
        elif t <= end_s:
            if kind == _TICK:
                self.on_tick(t)
                if t + MINUTE_S < end_s:
                    self.push(t + MINUTE_S, _TICK, None)
            else:
                self.on_check(obj, t)



__all__ = ["Pool"]
