"""Exact shortcuts for `floodway.sim.engine`: a dispatch test equal to `decide`'s bit for bit
(`dispatch_box`), and bulk segments of traffic that is dispatched (or queued and drained at
once) replayed without the event heap (`Segments`, over `floodway.sim.kernel`), committed
up to their last clean cut, so they change the cost, never the outcome. Why each is exact:
docs/design/simulator.md ("The dispatch test and bulk segments").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from floodway.config import MAX_CONTAINERS_LIMIT
from floodway.core.estimators import RATE_WINDOW_S
from floodway.routers.decide import HEADROOM, Action, ServiceTime
from floodway.sim.kernel import REASONS, run_segment
from floodway.sim.result import CODES

QUEUE_CODE = CODES[Action.QUEUE]


def dispatch_box(live: list, slots: int, fit: ServiceTime, mbr: int, now: float,
                 deadline: float, rows: int, batch_wait_s: float,
                 rate: Callable[[int, float], float], i: int):
    """The container `decide` dispatches to with an empty queue (see the module docstring),
    or None where `decide` would not dispatch. `rate(i, now)`: the arrival rate (rows/s) that
    arrival `i` sees, asked only when no container is idle."""
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
    arriving = rate(i, now) * (best_bl + batch_wait_s)
    service = fit.seconds(min(mbr, rows + math.ceil(arriving)))
    return best if best_bl + service <= budget else None


class Segments:
    """Bulk segments over one trace (see the module docstring).

    The trace as arrays for the kernel (`times`, `rows`, `deadlines`), its scratch (`opener`,
    `bend`: per arrival), the run's `lat_end` (per-arrival batch ends, nan until served) and
    `cum` (cumulative admitted rows, shape (n + 1,): ``cum[j]`` of the arrivals before j),
    which segments fill in and the engine too, and every segment's busy intervals,
    ``out_s[:w]`` / ``out_e[:w]``.
    `usable`: every batch has a positive fitted time (a busy container never ties with an
    idle one on backlog) and every sample is positive. `stops`: how many segments stopped for
    each of `floodway.sim.kernel.REASONS`.
    """

    def __init__(self, times: np.ndarray, rows: np.ndarray | None, deadlines: np.ndarray,
                 lat_end: np.ndarray, cum: np.ndarray, fit: ServiceTime, mbr: int,
                 wait_s: float, slots: int, samples_s: tuple[float, ...]):
        n = times.size
        # Contiguous and writeable (a read-only array is another type to numba: a second
        # compilation), of the types the kernel is compiled for.
        r = np.ones(n, dtype=np.int64) if rows is None else np.require(rows, np.int64, "CW")
        est = fit.per_row_s * r + fit.per_batch_s
        self.usable = bool(n) and bool(np.all(est > 0)) and (not samples_s or
                                                            min(samples_s) > 0)
        self.n, self.times, self.rows = n, np.require(times, np.float64, "CW"), r
        self.deadlines = np.require(deadlines, np.float64, "CW")
        self.lat_end, self.cum = lat_end, cum
        # Plain floats: the kernel is compiled once for these types.
        self.a, self.b = float(fit.per_row_s), float(fit.per_batch_s)
        self.mbr, self.wait_s, self.slots = int(mbr), float(wait_s), int(slots)
        self.samples = samples_s
        self.samples_np = np.array(samples_s, dtype=np.float64)
        self.no_draws = np.zeros(0)
        self.opener = np.empty(n, dtype=np.int64)
        self.bend = np.empty(n)
        self.out_s, self.out_e = np.empty(n), np.empty(n)
        self.w = 0
        # by width: at most MAX_CONTAINERS_LIMIT warm containers
        self.scratch: list[tuple | None] = [None] * (MAX_CONTAINERS_LIMIT + 1)
        self.stops = [0] * len(REASONS)

    def run(self, i: int, width: int, max_busy: int, bound: float, durs: np.ndarray | None,
            lo: int, codes: np.ndarray, can_queue: bool, starting_s: np.ndarray,
            cold_est: float):
        """Replay arrivals from `i` on `width` idle warm containers before `bound` with the
        kernel, while at most `max_busy` of them are busy at once (one more would start a
        buffer container); `durs`: the drawn batch times (sampled times), else None; `lo`: an
        arrival at or before the first of arrival i's rate window; `codes`: the run's
        decision codes (uint8, written); `can_queue`: the queue has room for a request;
        `starting_s`: when the containers starting now were asked for; `cold_est`: the
        cold-start estimate. Returns (k, intervals
        committed, first idle times and their containers in event order (lists), each
        container's idle-since (nan: not idle in the segment), draws used, a rate-window
        pointer valid for arrival k)."""
        out = self.scratch[width]
        if out is None:                 # the kernel's small outputs, reused run after run
            out = self.scratch[width] = (np.empty(width), np.empty(width, dtype=np.int64),
                                         np.empty(width))
        first_e, first_c, idle_at = out
        k, w, nf, nd, why, lo = run_segment(
            self.times, self.rows, self.deadlines, self.a, self.b, self.mbr, self.wait_s,
            self.slots, HEADROOM, width, int(max_busy), i, float(bound),
            self.no_draws if durs is None else durs, durs is not None, self.opener, self.bend,
            self.lat_end, self.out_s, self.out_e, self.w, first_e, first_c, idle_at, self.cum,
            int(lo), RATE_WINDOW_S, self.wait_s, codes, QUEUE_CODE, bool(can_queue),
            starting_s, float(cold_est))
        self.stops[why] += 1
        added, self.w = w - self.w, w
        if k == i:
            return k, 0, (), (), (), nd, lo
        if nf:
            return (k, added, first_e[:nf].tolist(), first_c[:nf].tolist(), idle_at.tolist(),
                    nd, lo)
        return k, added, (), (), idle_at.tolist(), nd, lo


__all__ = ["Segments", "dispatch_box"]
