"""Exact shortcuts for `floodway.sim.engine`: a dispatch test equal to `decide`'s, and bulk
segments of dispatch-only traffic simulated without the event heap.

**The dispatch test** (`dispatch_box`). With the router's queue empty, `decide` returns
dispatch exactly when (its steps 2 and 4, with the snapshot the engine builds: one tenant, no
arrival rate, no batch wait, so the batch a request rides in holds ``min(rows,
max_batch_rows)`` rows) ``budget = deadline - now > 0`` and either a warm container with a
free slot has no backlog (an idle one), or ``alone = fit.seconds(min(rows, max_batch_rows))``
and the least backlog among warm containers with a free slot both fit ``budget * HEADROOM``
(``alone <= budget`` and ``backlog + alone <= budget``). The test evaluates the same float
expressions in the same order, so it agrees with `decide` bit for bit; the engine sends the
request to the same container either way (least backlog, first in start order on a tie).

**Segments** (`Segments.run`, `Segments.run1`). From an arrival that finds the queue empty and
no batch in flight, and up to the next heap event (a policy tick, an idle check, a container
becoming ready: `bound`), the pool changes only through arrivals and batch ends, and while
every arrival is dispatched the router's queue stays empty. A segment replays exactly that:
the warm containers' batches as plain lists (rows, start, end, fitted time), batch ends
processed before an arrival at the same instant (as the heap does), each arrival decided by
the dispatch test on the segment's own backlogs (kept with the same float operations as the
engine: ``+= est - old``, ``-= est``, 0.0 when empty), joined to the newest unstarted batch
if its rows fit, else given a new batch (started ``wait_s`` later on an idle container, or
when the batch ahead ends). Batch ends between two arrivals are recorded in the heap's order:
by time, equal times by push order: by when each was last pushed (when an arrival opened it,
when it began behind another, or at its old end, re-pushed after it grew), at one instant
events before arrivals (the heap runs first) and arrivals by index. It stops at the first
arrival that would not be dispatched (no free slot, budget, deadline), at `bound`, or where
that order is not known (equal ends both pushed by events at one instant; with sampled batch
times, several containers' ends in one gap, whose draws the heap would order by time), and
backs off to the last *clean cut*: an arrival that found every batch ended.
Everything before the cut is committed (decisions, latencies, busy intervals in the heap's
order, each container's idle-since, and its first idle check, pushed as `went_idle` would
have: the bound is at most ``t_first + scaledown_window``, so such a check falls after the
segment); everything after it is left to the event loop, which redoes it. So a segment never
changes the outcome, only the cost: a few list operations per arrival instead of heap events,
objects and method calls.

**Isolated runs.** With fitted batch times, an arrival whose batch (alone, on an idle
container) ends no later than the next arrival, and whose budget is positive, leaves the pool
idle again for the next one; a run of such arrivals goes one by one to the first warm container
with closed-form results (start ``t + wait_s``, or ``t`` if its rows fill a batch; end
``start + fit.seconds(rows)``; latency ``end - t``). `Segments` computes these starts and ends
and, per arrival, the end of the run that starts there, once with numpy; a segment at a clean
cut skips a whole run in O(1) list operations (cut at `bound` by bisection: ends never
decrease within a run), and long runs are kept as index ranges, filled in with numpy.

**Two or more warm containers** (`Segments.run`): `floodway.sim.multi`, where stretches in
which every arrival finds an idle container are taken in O(1).

**One warm container** (`run1`, the common case): a batch holds consecutive arrivals, so the
loop keeps only (rows, fitted time, first arrival) per batch in flight; and the busy period
that would start at each arrival is precomputed for all of them at once with numpy
(`floodway.sim.busy.BusyPeriods`), so that a clean cut on the chain of busy periods from the
first arrival takes every following valid one before `bound` in O(1) (one bisection on their
ends), their batches gathered with numpy at the end of the segment.

With sampled batch times (`ServiceModel.samples_s`) the engine draws a block of samples ahead
with ``rng.integers(k, size=m)``, which yields the same numbers as m single draws (numpy
takes bounded integers one after another from the bit generator's stream, however many are
asked for at once), then restores the generator and draws again exactly as many as the
committed part used, so the stream stays the event loop's.
"""

from __future__ import annotations

import math

import numpy as np

from floodway.routers.decide import HEADROOM, ServiceTime
from floodway.sim.busy import BusyPeriods
from floodway.sim.multi import alone_stretches, gather_stretches, run_multi

LONG_RUN = 32      # isolated runs at least this long are kept as index ranges
STRETCHES_AFTER = 16   # segments on two or more containers before alone stretches are found


def dispatch_box(live: list, slots: int, fit: ServiceTime, mbr: int, now: float,
                 deadline: float, rows: int):
    """The container `decide` dispatches to with an empty queue (see the module docstring),
    or None where `decide` would not dispatch."""
    budget = deadline - now
    if budget <= 0:
        return None
    best = None
    best_bl = 0.0
    idle = False
    for b in live:
        if b.warm and len(b.batches) < slots:
            bl = b.backlog_s
            if bl == 0:
                idle = True
            if best is None or bl < best_bl:
                best, best_bl = b, bl
    if best is None:
        return None
    if idle:
        return best
    budget *= HEADROOM
    alone = fit.seconds(min(rows, mbr))
    if alone > budget:
        return None
    return best if best_bl + alone <= budget else None


class Segments:
    """Bulk segments over one trace (see the module docstring).

    `times`, `deadlines`: the event loop's lists; `lat_end`: its per-arrival batch ends (nan
    until served), which segments fill in. With fitted batch times (numpy arrays):
    `start_np` / `end_np`: each arrival's batch start and end were it alone on an idle
    container; `run_end[i]`: the first j >= i whose batch would not end by arrival j + 1 or
    whose budget is not positive; `stretch_to`, `prev_root`, `last_on`, `next_on`: the alone
    stretches on two or more containers (`floodway.sim.multi.alone_stretches`); `busy`: the
    busy periods of one container (`BusyPeriods`, or None where its margin check fails).
    `usable`: every batch has a positive fitted time (a busy container never ties with an
    idle one on backlog) and every
    sample is positive.
    """

    def __init__(self, times_np: np.ndarray, times: list[float], rows: np.ndarray | None,
                 deadlines_np: np.ndarray, deadlines: list[float], lat_end: np.ndarray,
                 fit: ServiceTime, mbr: int, wait_s: float, slots: int,
                 samples_s: tuple[float, ...]):
        n = len(times)
        r = np.ones(n, dtype=np.int64) if rows is None else rows
        est = fit.per_row_s * r + fit.per_batch_s
        self.usable = bool(n) and bool(np.all(est > 0)) and (not samples_s or
                                                            min(samples_s) > 0)
        self.times, self.rows = times, None if rows is None else rows.tolist()
        self.deadlines, self.lat_end, self.n = deadlines, lat_end, n
        self.a, self.b, self.mbr, self.wait_s, self.slots = (fit.per_row_s, fit.per_batch_s,
                                                             mbr, wait_s, slots)
        self.samples = samples_s
        self.lat_i: list[int] = []      # arrivals served by `run_multi`, and their batch ends
        self.lat_v: list[float] = []
        self.run_end = self.busy = self.stretch_to = None
        self.times_np, self.multi_runs = times_np, 0
        if not samples_s and self.usable:
            self.start_np = np.where(r >= mbr, times_np, times_np + wait_s)
            self.end_np = self.start_np + est
            nxt = np.empty(n)
            nxt[:-1] = times_np[1:]
            nxt[-1:] = np.inf
            budget = deadlines_np - times_np
            ok = (self.end_np <= nxt) & (budget > 0)
            idx = np.where(ok, n, np.arange(n))
            self.run_end = np.minimum.accumulate(idx[::-1])[::-1]
            self.budget_np = budget
            self.busy = BusyPeriods(times_np, rows, budget, self.start_np, self.end_np, fit,
                                    mbr, slots)
            if not self.busy.usable:
                self.busy = None

    def flush_latencies(self) -> None:
        """Set the batch ends that `run_multi` kept in `lat_i` / `lat_v` in `lat_end`."""
        if self.lat_i:
            self.lat_end[np.array(self.lat_i, dtype=np.int64)] = np.array(self.lat_v)
            self.lat_i, self.lat_v = [], []

    def run(self, i: int, width: int, bound: float, durs: list[float] | None):
        """Segments on two or more warm containers: `floodway.sim.multi.run_multi`. The alone
        stretches cost a pass over every arrival: they are found once such segments have been
        needed `STRETCHES_AFTER` times (before that, and without them, segments are only
        slower, never different)."""
        self.multi_runs += 1
        if (self.stretch_to is None and self.run_end is not None
                and self.multi_runs >= STRETCHES_AFTER):
            self.stretch_to, self.prev_root, self.last_on, self.next_on = alone_stretches(
                self.times_np, self.end_np, self.budget_np)
        return run_multi(self, i, width, bound, durs)

    def gather_stretches(self, spans: list[tuple[int, int]], lat_end: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The busy intervals of the alone stretches j..r-1 for each (j, r) in `spans`, all
        at once: `floodway.sim.multi.gather_stretches`."""
        return gather_stretches(self.start_np, self.end_np, spans, lat_end)

    def run1(self, i: int, bound: float, durs: list[float] | None):
        """`run` for one warm container, the common case, made lean (see the module
        docstring): batches in flight as (rows, fitted time, first arrival), only the head one
        with a start and an end; long isolated runs and chains of valid busy periods skipped
        whole."""
        times, rows, dls = self.times, self.rows, self.deadlines
        a, b0, mbr, wait, slots, n = self.a, self.b, self.mbr, self.wait_s, self.slots, self.n
        run_end, inf, headroom = self.run_end, math.inf, HEADROOM
        end_np = self.end_np if run_end is not None else None
        nd, maxd = 0, len(durs) if durs is not None else 0
        qr: list[int] = []              # batches in flight: rows, fitted time, first arrival
        qe: list[float] = []
        qf: list[int] = []
        hs = he = inf                   # the head batch's start and end (inf: none)
        backlog = 0.0
        idle_at = first_idle = None
        busy = self.busy
        if busy is not None:
            valid, bend, bnxt = busy.valid, busy.end, busy.nxt
            pos, bad_at, cend, clist = busy.pos, busy.bad_at, busy.chain_end, busy.chain
        # Pieces in order: ("L", starts, ends, first arrivals) of batches run here, ("R", j, r)
        # isolated runs, ("C", [j...]) chains of busy periods; the last one may still grow.
        chunks: list[tuple] = []
        oa: list[float] = []
        ob: list[float] = []
        of: list[int] = []
        chain: list[int] = []
        cur = ""
        cut = (i, 0, 0, None, 0)
        j = i
        while True:
            t = times[j] if j < n else inf
            stop = t >= bound
            if he <= t or (stop and he < bound):
                lim = bound if stop else t
                while he <= lim and (he < lim or not stop):
                    if cur != "L":
                        oa, ob, of, cur = [], [], [], "L"
                        chunks.append(("L", oa, ob, of))
                    oa.append(hs)
                    ob.append(he)
                    of.append(qf[0])
                    backlog -= qe[0]
                    del qr[0], qe[0], qf[0]
                    if qr:
                        hs = he
                        if durs is None:
                            he = hs + qe[0]
                        elif nd < maxd:
                            he = hs + durs[nd]
                            nd += 1
                        else:
                            he = inf            # out of draws: no cut after this
                            break
                    else:
                        backlog = 0.0
                        idle_at = he
                        if first_idle is None:
                            first_idle = he
                        hs = he = inf
            if not qr:
                cut = (j, len(chunks), len(chain) if cur == "C" else len(oa), idle_at, nd)
                if stop:
                    break
                if run_end is not None:
                    r = int(run_end[j])
                    if r >= j + LONG_RUN:   # a long isolated run: alone, one by one
                        if end_np[r - 1] >= bound:
                            r = j + int(end_np[j:r].searchsorted(bound))
                        if r > j:
                            chunks.append(("R", j, r))
                            cur = "R"
                            idle_at = float(end_np[r - 1])
                            if first_idle is None:
                                first_idle = float(end_np[j])
                            j = r
                            continue
                if busy is not None and pos[j] >= 0:
                    p = int(pos[j])         # on the chain: every valid busy period before bound
                    q = int(bad_at[p])
                    if q > p and cend[q - 1] >= bound:
                        q = p + int(cend[p:q].searchsorted(bound))
                    if q > p:
                        chunks.append(("K", p, q))
                        cur = "K"
                        idle_at = float(cend[q - 1])
                        if first_idle is None:
                            first_idle = float(cend[p])
                        j = int(clist[q]) if q < len(clist) else n
                        continue
                if busy is not None and valid[j] and bend[j] < bound:
                    if cur != "C":
                        chain, cur = [], "C"
                        chunks.append(("C", chain))
                    chain.append(j)
                    idle_at = float(bend[j])
                    if first_idle is None:
                        first_idle = idle_at
                    j = int(bnxt[j])
                    continue
            elif stop:
                break
            rr = 1 if rows is None else rows[j]
            budget = dls[j] - t
            if budget <= 0:
                break
            if qr:
                if len(qr) >= slots:
                    break
                budget *= headroom
                alone = a * (rr if rr < mbr else mbr) + b0
                if alone > budget or backlog + alone > budget:
                    break
                if (hs > t or len(qr) > 1) and qr[-1] + rr <= mbr:
                    nr = qr[-1] + rr
                    qr[-1] = nr
                    est = a * nr + b0
                    backlog += est - qe[-1]
                    qe[-1] = est
                    if len(qr) == 1 and durs is None:
                        he = hs + est
                else:
                    est = a * rr + b0
                    backlog += est - 0.0
                    qr.append(rr)
                    qe.append(est)
                    qf.append(j)
                j += 1
                continue
            est = a * rr + b0
            backlog += est - 0.0
            hs = t if rr >= mbr else t + wait
            if durs is None:
                he = hs + est
            elif nd < maxd:
                he = hs + durs[nd]
                nd += 1
            else:
                break
            qr.append(rr)
            qe.append(est)
            qf.append(j)
            j += 1
        k, nc, nl, idle_at, nd = cut
        kept = chunks[:nc]
        if kept and kept[-1][0] in "LC":
            kept[-1] = (kept[-1][0],) + tuple(x[:nl] for x in kept[-1][1:])
        out = []
        lat = self.lat_end
        for x, piece in enumerate(kept):        # latencies: each batch's end, per arrival
            kind = piece[0]
            if kind == "R":
                lat[piece[1]:piece[2]] = self.end_np[piece[1]:piece[2]]
                out.append((self.start_np[piece[1]:piece[2]], self.end_np[piece[1]:piece[2]]))
                continue
            if kind == "K":                     # gathered at the end, all at once
                out.append(piece)
                continue
            if not piece[1]:
                continue
            if kind == "C":
                out.append(self.busy.gather(np.array(piece[1]), lat))
                continue
            nk = kept[x + 1] if x + 1 < len(kept) else None     # where this "L" piece ends
            stop_at = k if nk is None else nk[1][0] if nk[0] == "C" else \
                int(self.busy.chain[nk[1]]) if nk[0] == "K" else nk[1]
            fs, fe = np.array(piece[1]), np.array(piece[2])
            cnt = np.diff(np.array(piece[3] + [stop_at], dtype=np.int64))
            lo = piece[3][0]
            lat[lo:lo + int(cnt.sum())] = np.repeat(fe, cnt)
            out.append((fs, fe))
        first = [(first_idle, 0)] if out else []
        return k, out, first, [idle_at], nd


__all__ = ["LONG_RUN", "STRETCHES_AFTER", "Segments", "dispatch_box"]
