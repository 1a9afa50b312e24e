"""Bulk segments on two or more warm containers, for `floodway.sim.fastpath.Segments`.

`run_multi` replays a segment (see `floodway.sim.fastpath`: from an arrival that finds the
queue empty and no batch in flight, up to the next heap event, while every arrival is
dispatched) on plain lists: each container's batches as [rows, start, end, fitted time,
arrivals, (time, arrival) of its last push], its backlog kept with the engine's float
operations, batch ends recorded in the heap's order (by end, equal ends by their last push,
events before arrivals at one instant), the dispatch test of `decide` on each arrival. It stops
where an arrival would not be dispatched, at `bound`, or where that order is not known, and
commits up to the last clean cut (every batch ended).

**Alone stretches** (fitted batch times; `alone_stretches`). An arrival that finds a container
idle is dispatched to the first idle one (backlog 0 is the least; ties go to the first in
start order) and opens a batch alone there, whatever the others hold, if its budget is
positive. Count, per arrival j, the earlier arrivals whose alone batch would still run at t_j
(`inflight`: every later arrival's batch ends after t_j, so counting all ends <= t_j counts
only earlier ones). From a *root* (none in flight: every container idle) up to the first
arrival with two in flight, each arrival therefore finds container 0 or 1 idle and all batches
are alone: each arrival's start and end are its alone ones, and it takes container 0 at a root,
else the other one of the single arrival in flight (the earlier one with the latest end): the
parity of that chain, found once for all arrivals by pointer doubling. Each batch's end is
pushed once, by its arrival, so the heap pops them by (end, arrival), the order a stable sort
by end gives (`gather_stretches`, for all stretches of the run at once: a stretch's ends are
all <= the time of the root it ends at, the next one's all after). A segment at a clean cut
that is a root takes the stretch up to its last root before `bound` in O(1) list operations
(those roots are clean cuts); a container's idle-since is then its last arrival's end (its
batches do not overlap) and its first idle its first arrival's end.
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np

from floodway.routers.decide import HEADROOM


def alone_stretches(times: np.ndarray, end: np.ndarray, budget: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray],
                               tuple[np.ndarray, np.ndarray]]:
    """Per arrival (see the module docstring): `stretch_to[j]`, for a root j, the last root
    r < n at or before the first arrival from j with two in flight or no budget (j itself
    where there is none, or j is no root); `prev_root[x]`: the last root <= x (-1: none);
    `last_on[c][x]` / `next_on[c][x]`: the last arrival <= x / first >= x that takes container
    c (0 or 1) in its stretch (-1 / n: none). `end`: each arrival's batch end were it alone."""
    n = times.size
    idx = np.arange(n)
    if not n or not bool(np.all(end > times)):
        none = np.full(n, -1, dtype=np.int64)
        return idx.copy(), none, (none, none), (none + n + 1, none + n + 1)
    ordered = end if bool(np.all(end[1:] >= end[:-1])) else np.sort(end)
    inflight = idx - np.searchsorted(ordered, times, side="right")
    root = inflight == 0
    ok = (inflight <= 1) & (budget > 0)
    first_bad = np.minimum.accumulate(np.where(ok, n, idx)[::-1])[::-1]
    prev_root = np.maximum.accumulate(np.where(root, idx, -1))
    stretch_to = np.where(root, prev_root[np.minimum(first_bad, n - 1)], idx)
    runmax = np.maximum.accumulate(end)
    latest = np.maximum.accumulate(np.where(end == runmax, idx, 0))    # argmax of end[:j+1]
    # Arrivals with one in flight (`steps`) take the other side of that one (`prev`); by
    # pointer doubling over them only: `ptr` the step reached so far (-1: a root or an
    # arrival outside any stretch, side 0), `par` the parity of the steps taken.
    steps = np.flatnonzero(ok & ~root)
    prev = latest[steps - 1]
    at = np.searchsorted(steps, prev)
    at_c = np.minimum(at, max(steps.size - 1, 0))
    ptr = np.where((at < steps.size) & (steps[at_c] == prev), at, -1) if steps.size else at
    par = np.ones(steps.size, dtype=np.int64)
    while steps.size:
        live = ptr >= 0
        if not live.any():
            break
        hop = ptr[live]
        par[live] ^= par[hop]
        ptr[live] = ptr[hop]
    side = np.zeros(n, dtype=np.int64)
    side[steps] = par
    last_on = tuple(np.maximum.accumulate(np.where(side == c, idx, -1)) for c in (0, 1))
    next_on = tuple(np.minimum.accumulate(np.where(side == c, idx, n)[::-1])[::-1]
                    for c in (0, 1))
    return stretch_to, prev_root, last_on, next_on


def gather_stretches(start: np.ndarray, end: np.ndarray, spans: list[tuple[int, int]],
                     lat_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends) of the alone stretches j..r-1 for each (j, r) of `spans` (non-empty, in
    run order), span after span, each in the heap's order (one stable sort by end for all: see
    the module docstring), and the batches per span (one per arrival); sets their arrivals'
    batch ends in `lat_end`."""
    j, r = (np.array(x, dtype=np.int64) for x in zip(*spans, strict=True))
    lens = r - j
    idx = np.repeat(j - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    lat_end[idx] = end[idx]
    order = idx[np.argsort(end[idx], kind="stable")]
    return start[order], end[order], lens


def run_multi(seg, i: int, width: int, bound: float, durs: list[float] | None):
    """Simulate arrivals from `i` on `width` >= 2 warm containers (all idle, the queue empty)
    before `bound` (see the module docstring). Returns the last clean cut: (k, chunks,
    [(first idle time, container)], each container's idle-since or None, draws used);
    arrivals i..k-1 were all dispatched and ended, and `chunks` holds their busy intervals in
    the heap's order, as (starts, ends) lists or ("S", j, r): an alone stretch, for
    `gather_stretches` to fill in (with its arrivals' `lat_end`) at the end of the run; the
    others' latencies go to `seg.lat_i` / `seg.lat_v`, for `Segments.flush_latencies`."""
    times, rows, dls = seg.times, seg.rows, seg.deadlines
    a, b0, mbr, wait, slots, n = seg.a, seg.b, seg.mbr, seg.wait_s, seg.slots, seg.n
    inf = math.inf
    fitted = seg.stretch_to is not None
    if fitted:                      # numpy arrays, read a few times per stretch only
        stretch_to, ends = seg.stretch_to, seg.end_np
        prev_root, last_on, next_on = seg.prev_root, seg.last_on, seg.next_on
    nd, maxd = 0, len(durs) if durs is not None else 0
    # batches: [rows, start, end, fitted time, arrivals, (time, arrival) of its last push]
    bs: list[list] = [[] for _ in range(width)]
    backlog = [0.0] * width
    idle_at: list = [None] * width
    seen = [False] * width
    first: list[tuple[float, int]] = []
    chunks: list[list] = []         # ["L", starts, ends] of batches run here, ["S", j, r]
    oa: list[float] = []
    ob: list[float] = []
    cur = ""
    lat_i: list[int] = []           # arrivals served here, and their batches' ends
    lat_v: list[float] = []
    busy = 0
    soon = inf                      # no head batch ends before this
    # (k, chunks, size of the last one, len(first), idle_at, draws, len(lat_i))
    cut = (i, 0, 0, 0, idle_at[:], 0, 0)
    j = i
    while True:
        t = times[j] if j < n else inf
        stop = t >= bound
        lim = bound if stop else t
        if soon <= lim:
            recs = []
            soon = inf
            for c in range(width):
                q = bs[c]
                while q and (q[0][2] < lim if stop else q[0][2] <= lim):
                    bt = q.pop(0)
                    e = bt[2]
                    backlog[c] -= bt[3]
                    lat_i += bt[4]
                    lat_v += [e] * len(bt[4])
                    if q:
                        nb = q[0]
                        nb[1] = e
                        nb[5] = (e, -1)     # pushed as it begins (order among ties: unknown)
                        if durs is None:
                            nb[2] = e + nb[3]
                        elif nd < maxd:
                            nb[2] = e + durs[nd]
                            nd += 1
                        else:
                            nb[2] = inf      # out of draws: no cut after this
                    else:
                        backlog[c] = 0.0
                        busy -= 1
                    recs.append((e, bt[5], bt[1], c, not q))
                if q and q[0][2] < soon:
                    soon = q[0][2]
            if len(recs) > 1:
                if durs is not None:
                    break
                # The heap's order: by end, equal ends by push order, i.e. by when each was
                # last pushed, and at one instant events (-1) before arrivals (by index); two
                # events' pushes at one instant: unknown.
                recs.sort(key=lambda x: (x[0], x[1]))
                if len({x[:2] for x in recs}) < len(recs):
                    break
            if cur != "L":
                oa, ob, cur = [], [], "L"
                chunks.append(["L", oa, ob])
            for e, _, st, c, went_idle in recs:
                oa.append(st)
                ob.append(e)
                if went_idle:
                    idle_at[c] = e
                    if not seen[c]:
                        seen[c] = True
                        first.append((e, c))
        if not busy:
            cut = (j, len(chunks), len(oa) if cur == "L" else chunks[-1][2] if cur else 0,
                   len(first), idle_at[:], nd, len(lat_i))
            if stop:
                break
            if fitted:
                r = int(stretch_to[j])
                if r > j and times[r] >= bound:
                    r = int(prev_root[bisect_left(times, bound, j, r) - 1])
                if r > j:               # an alone stretch on containers 0 and 1
                    new = []
                    for c in (0, 1):
                        m = int(last_on[c][r - 1])
                        if m >= j:
                            idle_at[c] = float(ends[m])
                            if not seen[c]:
                                f = int(next_on[c][j])
                                new.append((float(ends[f]), f, c))
                    for e, _, c in sorted(new):     # heap order: by end, then arrival
                        seen[c] = True
                        first.append((e, c))
                    if cur == "S" and chunks[-1][2] == j:
                        chunks[-1][2] = r
                    else:
                        chunks.append(["S", j, r])
                        cur = "S"
                    j = r
                    continue
        elif stop:
            break
        rr = 1 if rows is None else rows[j]
        budget = dls[j] - t
        if budget <= 0:
            break
        best, bbl, idle = -1, 0.0, False
        for c in range(width):
            if len(bs[c]) < slots:
                bl = backlog[c]
                if bl == 0:
                    idle = True
                if best < 0 or bl < bbl:
                    best, bbl = c, bl
        if best < 0:
            break
        if not idle:
            budget *= HEADROOM
            alone = a * min(rr, mbr) + b0
            if alone > budget or bbl + alone > budget:
                break
        q = bs[best]
        if q:
            last = q[-1]
            if last[1] > t and last[0] + rr <= mbr:
                last[0] += rr
                est = a * last[0] + b0
                backlog[best] += est - last[3]
                last[3] = est
                if last[1] < inf and durs is None:
                    if last[5][1] >= 0:     # its event fires at the old end, re-pushed
                        last[5] = (last[2], -1)
                    last[2] = last[1] + est
                last[4].append(j)
                j += 1
                continue
        est = a * rr + b0
        backlog[best] += est - 0.0
        if q:
            q.append([rr, inf, inf, est, [j], None])
        else:
            st = t if rr >= mbr else t + wait
            if durs is None:
                e = st + est
            elif nd < maxd:
                e = st + durs[nd]
                nd += 1
            else:
                break
            q.append([rr, st, e, est, [j], (t, j)])
            busy += 1
            if e < soon:
                soon = e
        j += 1
    k, nc, size, nf, idle_at, nd, nlat = cut
    if nlat:
        seg.lat_i += lat_i[:nlat]
        seg.lat_v += lat_v[:nlat]
    out: list = []
    for x, piece in enumerate(chunks[:nc]):
        last_one = x == nc - 1
        if piece[0] == "S":
            out.append(("S", piece[1], size if last_one else piece[2]))
        elif piece[1]:
            m = size if last_one else len(piece[1])
            if m:
                out.append((piece[1][:m], piece[2][:m]))
    return k, out, first[:nf], idle_at, nd


__all__ = ["alone_stretches", "gather_stretches", "run_multi"]
