"""The bulk-segment kernel, compiled with numba, for `floodway.sim.fastpath.Segments`:
`run_segment` replays one segment arrival by arrival with the event loop's float operations.

One compiled loop by design (exempt from the function-size rule), compiled on first use with
``cache=True`` (the cache lies next to this module); every argument has one type (contiguous
float64 / int64 arrays, plain floats and ints), so there is one compiled version. Compiled
code checks no bounds: the sizes that keep it in range, and what it replays, are in
docs/design/simulator.md ("The kernel").
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

# Why a segment stopped (counted per run, so tests can see every branch taken).
BOUND, NO_BUDGET, NO_SLOT, BACKLOG, TIE, SAMPLED_TIE, OUT_OF_DRAWS, BUFFER, QUEUED = range(9)
REASONS = ("bound", "no budget", "no free slot", "backlog", "unknown order", "sampled tie",
           "out of draws", "buffer start", "left queued")


@njit(cache=True)
def _before(e0, p0, a0, e1, p1, a1):
    """(end, push time, push arrival) lexicographic order: the heap's order of two ends."""
    if e0 != e1:
        return e0 < e1
    if p0 != p1:
        return p0 < p1
    return a0 < a1


@njit(cache=True)
def _forming(head, cnt, S, bst, bcut, brows, c, t, rr, mbr):
    """Container c's newest batch if `rr` more rows can join it at `t` (not started, not
    cut, rows fit: the router's forming batch), else -1."""
    tl = head[c] + cnt[c] - 1 - (S if head[c] + cnt[c] - 1 >= S else 0)
    ok = cnt[c] > 0 and bst[c, tl] > t and t <= bcut[c, tl] and brows[c, tl] + rr <= mbr
    return tl if ok else -1


@njit(cache=True)
def _backlog(bes, c, h, k, S):
    """Container c's backlog: the fitted times of its `k` batches from ring slot `h`, summed
    oldest first from 0.0 (as Python's sum() over them)."""
    bl = 0.0
    for _ in range(k):
        bl += bes[c, h]
        h = h + 1 if h + 1 < S else 0
    return bl


@njit(cache=True)
def _rate(times, cum, lo, j, t, window):
    """(rows/s admitted in the window before arrival j at t, the window's first arrival),
    moving `lo` forward (`ArrivalRate.rate`: arrivals at ``t' >= t - window``)."""
    cut = t - window
    while times[lo] < cut:
        lo += 1
    return (cum[j] - cum[lo]) / window, lo


@njit(cache=True)
def _earliest(backlog, width, st_created, cold_est, t):
    """`water_fill` of no work ahead: the earliest time a live container is available, the
    warm ones after their backlog, the starting ones after their remaining start as the
    snapshot builder estimates it (`start_remaining_s` with the cold-start estimate raised to
    the longest running start)."""
    soonest = np.inf
    for c in range(width):
        if backlog[c] < soonest:
            soonest = backlog[c]
    cold = cold_est
    for s in range(st_created.size):
        if t - st_created[s] > cold:
            cold = t - st_created[s]
    for s in range(st_created.size):
        el = t - st_created[s]
        left = cold - el if el < cold else el
        if left < soonest:
            soonest = left
    return soonest


@njit(cache=True)
def run_segment(times, rows, dls, a, b0, mbr, wait, slots, headroom, width, max_busy, i,
                bound, durs, sampled, opener, bend, lat_end, out_s, out_e, w0, first_e, first_c,
                idle_at, cum, lo, window, bw, codes, qcode, can_queue, st_created, cold_est):
    """Replay arrivals from `i` on `width` idle warm containers before `bound` (see the module
    docstring), while at most `max_busy` containers are busy at once (one more starts a buffer
    container). `durs`: sampled batch times to draw in order (`sampled`), else unused.
    `idle_at` is set to each container's idle-since at the cut (nan: not idle before it).
    `cum`: cumulative admitted rows (``cum[j]``: of the arrivals before j), written for each
    arrival replayed; `lo`: an arrival at or before the first in the rate window of arrival
    `i`; `window`: the rate window (s); `bw`: the batcher's wait (s). `codes`: each arrival's
    decision code, written (0 dispatch, `qcode` queue); `can_queue`: the queue has room for a
    request (decide's step 5 with nothing queued); `st_created`: the start times of the
    containers starting during the segment; `cold_est`: the cold-start estimate (s).
    Returns (k, w, nf, nd, why, lo): arrivals i..k-1 committed, their busy intervals in
    ``out_s[w0:w]`` / ``out_e[w0:w]``, the first `nf` entries of `first_e` / `first_c` the
    containers' first idle instants in event order, `nd` draws used, why it stopped, and a
    window pointer valid for arrival k."""
    n = times.size
    inf = np.inf
    maxd = durs.size
    S = slots
    brows = np.zeros((width, S), np.int64)
    bst = np.empty((width, S))
    bcut = np.empty((width, S))     # when each batch is cut (sent): no joining after
    ben = np.empty((width, S))
    bes = np.empty((width, S))
    bop = np.empty((width, S), np.int64)
    bpt = np.empty((width, S))
    bpa = np.empty((width, S), np.int64)
    head = np.zeros(width, np.int64)
    cnt = np.zeros(width, np.int64)
    backlog = np.zeros(width)
    seen = np.zeros(width, np.bool_)
    m = width * S
    rend = np.empty(m)              # the batches ended in one step: end, push, start, ...
    rpt = np.empty(m)
    rpa = np.empty(m, np.int64)
    rst = np.empty(m)
    rc = np.empty(m, np.int64)
    ridle = np.empty(m, np.bool_)
    idle_at[:] = np.nan
    cut_idle = idle_at.copy()
    nd = nf = 0
    w = w0
    busy = 0                        # containers with a batch in flight
    soon = inf                      # no head batch ends before this
    cut_k, cut_w, cut_nf, cut_nd, cut_lo = i, w0, 0, 0, lo
    why = BOUND
    sampled_tie = False
    j = i
    while True:
        t = times[j] if j < n else inf
        stop = t >= bound
        lim = bound if stop else t
        if soon <= lim:
            nr = 0
            soon = inf
            drew = -1                       # the container whose next batch drew a time
            for c in range(width):
                while cnt[c]:
                    h = head[c]
                    e = ben[c, h]
                    if (e >= lim) if stop else (e > lim):
                        break
                    bend[bop[c, h]] = e
                    rend[nr], rpt[nr], rpa[nr], rst[nr], rc[nr] = e, bpt[c, h], bpa[c, h], \
                        bst[c, h], c
                    h = h + 1 if h + 1 < S else 0
                    head[c] = h
                    cnt[c] -= 1
                    backlog[c] = _backlog(bes, c, h, cnt[c], S)
                    if cnt[c]:
                        bst[c, h] = e
                        bpt[c, h] = e       # pushed as it begins (order among ties: unknown)
                        bpa[c, h] = -1
                        if not sampled:
                            ben[c, h] = e + bes[c, h]
                        else:
                            sampled_tie |= drew >= 0 and drew != c
                            drew = c
                            if nd < maxd:
                                ben[c, h] = e + durs[nd]
                                nd += 1
                            else:
                                ben[c, h] = inf     # out of draws: no cut after this
                        ridle[nr] = False
                    else:
                        busy -= 1
                        ridle[nr] = True
                    nr += 1
                if cnt[c] and ben[c, head[c]] < soon:
                    soon = ben[c, head[c]]
            if sampled_tie:                 # draws of two containers: drawn in time order
                why = SAMPLED_TIE
                break
            if nr > 1:
                for x in range(1, nr):      # insertion sort into the heap's order
                    y = x
                    while y and _before(rend[y], rpt[y], rpa[y], rend[y - 1], rpt[y - 1],
                                        rpa[y - 1]):
                        rend[y], rend[y - 1] = rend[y - 1], rend[y]
                        rpt[y], rpt[y - 1] = rpt[y - 1], rpt[y]
                        rpa[y], rpa[y - 1] = rpa[y - 1], rpa[y]
                        rst[y], rst[y - 1] = rst[y - 1], rst[y]
                        rc[y], rc[y - 1] = rc[y - 1], rc[y]
                        ridle[y], ridle[y - 1] = ridle[y - 1], ridle[y]
                        y -= 1
                tie = False
                for x in range(1, nr):
                    if rend[x] == rend[x - 1] and rpt[x] == rpt[x - 1] and rpa[x] == rpa[x - 1]:
                        tie = True
                if tie:
                    why = TIE
                    break
            for x in range(nr):
                out_s[w] = rst[x]
                out_e[w] = rend[x]
                w += 1
                if ridle[x]:
                    c = rc[x]
                    idle_at[c] = rend[x]
                    if not seen[c]:
                        seen[c] = True
                        first_e[nf] = rend[x]
                        first_c[nf] = c
                        nf += 1
        if busy == 0:
            cut_k, cut_w, cut_nf, cut_nd, cut_lo = j, w, nf, nd, lo
            cut_idle[:] = idle_at
            if stop:
                break
        elif stop:
            break
        rr = rows[j]
        budget = dls[j] - t
        if budget <= 0:
            why = NO_BUDGET
            break
        best, bbl, idle = -1, 0.0, False
        for c in range(width):
            if cnt[c] < S:
                bl = backlog[c]
                if bl == 0:
                    idle = True
                if best < 0 or bl < bbl:
                    best, bbl = c, bl
        code = 0
        if best < 0:
            # No free slot: decide's step 5 with nothing queued queues it if the earliest
            # container to be available, plus the batch it would ride in, fits; the engine
            # then drains it at once into the first container whose newest batch has not
            # started and has room. If none has, it stays queued: the kernel stops.
            if not can_queue:
                why = NO_SLOT
                break
            budget *= headroom
            if a * min(rr, mbr) + b0 > budget:
                why = NO_SLOT
                break
            soonest = _earliest(backlog, width, st_created, cold_est, t)
            rate, lo = _rate(times, cum, lo, j, t, window)
            service = a * min(mbr, rr + math.ceil(rate * (soonest + bw))) + b0
            if soonest + service > budget:
                why = NO_SLOT
                break
            for c in range(width):
                if _forming(head, cnt, S, bst, bcut, brows, c, t, rr, mbr) >= 0:
                    best = c
                    break
            if best < 0:
                why = QUEUED
                break
            code = qcode
        elif not idle:
            budget *= headroom
            alone = a * min(rr, mbr) + b0
            if alone > budget:
                why = BACKLOG
                break
            rate, lo = _rate(times, cum, lo, j, t, window)
            service = a * min(mbr, rr + math.ceil(rate * (bbl + bw))) + b0
            if bbl + service > budget:
                why = BACKLOG
                break
        codes[j] = code
        cum[j + 1] = cum[j] + rr
        # The forming batch: `best`'s, else any container's (as `Pool.assign` joins it).
        c, tl = best, _forming(head, cnt, S, bst, bcut, brows, best, t, rr, mbr)
        k = 0
        while tl < 0 and k < width:
            tl = _forming(head, cnt, S, bst, bcut, brows, k, t, rr, mbr)
            if tl >= 0:
                c = k
            k += 1
        if tl >= 0:
            brows[c, tl] += rr
            est = a * brows[c, tl] + b0
            bes[c, tl] = est
            backlog[c] = _backlog(bes, c, head[c], cnt[c], S)
            if bst[c, tl] < inf and not sampled:
                if bpa[c, tl] >= 0:     # its event fires at the old end, pushed again
                    bpt[c, tl] = ben[c, tl]
                    bpa[c, tl] = -1
                ben[c, tl] = bst[c, tl] + est
            opener[j] = bop[c, tl]
            j += 1
            continue
        est = a * rr + b0
        st = e = pt = inf
        pa = -1
        if not cnt[c]:
            if busy >= max_busy:
                why = BUFFER
                break
            st = t if rr >= mbr else t + wait
            if not sampled:
                e = st + est
            elif nd < maxd:
                e = st + durs[nd]
                nd += 1
            else:
                why = OUT_OF_DRAWS
                break
            pt, pa = t, j
            busy += 1
            if e < soon:
                soon = e
        tl = head[c] + cnt[c]
        if tl >= S:
            tl -= S
        brows[c, tl], bst[c, tl], ben[c, tl], bes[c, tl] = rr, st, e, est
        bcut[c, tl] = t if rr >= mbr else t + wait
        bop[c, tl], bpt[c, tl], bpa[c, tl] = j, pt, pa
        cnt[c] += 1
        backlog[c] = _backlog(bes, c, head[c], cnt[c], S)
        opener[j] = j
        j += 1
    for x in range(i, cut_k):       # each committed arrival: its batch's end
        lat_end[x] = bend[opener[x]]
    idle_at[:] = cut_idle
    return cut_k, cut_w, cut_nf, cut_nd, why, cut_lo


_prepared = False


def prepare() -> float:
    """Compile `run_segment` (or load it from the cache) now, with the argument types
    `floodway.sim.fastpath.Segments` passes, so that no simulation's wall time includes it.
    Returns the seconds it took (0 once done in this process)."""
    global _prepared
    if _prepared:
        return 0.0
    t0 = time.perf_counter()
    f1, i1 = np.zeros(1), np.ones(1, np.int64)
    run_segment(f1, i1, np.ones(1), 0.001, 0.001, 1, 0.0, 1, 0.85, 1, 1, 0, float(np.inf),
                np.zeros(0), False, np.empty(1, np.int64), np.empty(1), np.full(1, np.nan),
                np.empty(1), np.empty(1), 0, np.empty(1), np.empty(1, np.int64), np.empty(1),
                np.zeros(2, np.int64), 0, 5.0, 0.0, np.zeros(1, np.uint8), 1, True, np.zeros(0),
                30.0)
    _prepared = True
    return time.perf_counter() - t0


__all__ = ["REASONS", "prepare", "run_segment"]
