"""The `SimResult` of one run of `floodway.sim.engine`, from what the run recorded.

Busy intervals come from two sources: the event loop records each batch as it ends
(`_Sim.busy_a` / `busy_b`), and bulk segments (`floodway.sim.fastpath`) record theirs as
pieces ``(at, starts, ends)``: intervals that the event loop would have recorded just before
its `at`-th one. Two kinds of piece are recorded as index ranges only, ``(at, kind, p, q)``,
and gathered here with numpy, each kind all at once (their batch ends, the arrivals'
latencies, are set in `lat_end` then too): ``"K"``, the chain of one container's busy periods
p..q-1 (`floodway.sim.busy.BusyPeriods.gather_all`), and ``"S"``, the alone stretch of
arrivals p..q-1 on two containers (`floodway.sim.multi.gather_stretches`). `splice_busy` then
puts every piece in its place, so the arrays are in the event loop's order (their float sums
depend on it) without splitting the gathered arrays into one array per piece.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

from floodway.sim.result import SimResult, coverage_per_minute
from floodway.sim.trace import MINUTE_S


def splice_busy(busy_a: list[float], busy_b: list[float], at: np.ndarray, lens: np.ndarray,
                seg_a: np.ndarray, seg_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The busy intervals as arrays, in the order the event loop recorded them: the listed
    ones, with the segments' pieces (`lens[x]` intervals each, concatenated in `seg_a` /
    `seg_b`) each put before the `at[x]`-th listed one (`at` non-decreasing)."""
    sa, sb = np.array(busy_a, dtype=np.float64), np.array(busy_b, dtype=np.float64)
    if not lens.size:
        return sa, sb
    before = np.concatenate([[0], np.cumsum(lens)])
    pos_b = np.repeat(at, lens) + np.arange(before[-1])
    pos_s = np.arange(sa.size) + before[np.searchsorted(at, np.arange(sa.size), side="right")]
    out_a, out_b = np.empty(sa.size + before[-1]), np.empty(sa.size + before[-1])
    out_a[pos_s], out_b[pos_s] = sa, sb
    out_a[pos_b], out_b[pos_b] = seg_a, seg_b
    return out_a, out_b


def segment_busy(pieces: list[tuple], gathers: dict) -> tuple[np.ndarray, ...]:
    """(at, lens, starts, ends) of the segments' `pieces` in order (see the module docstring):
    plain pieces (lists or arrays) joined with one conversion per group, each kind of range
    piece gathered by ``gathers[kind](spans)`` -> (starts, ends, intervals per span), and every
    group put in place with one scatter."""
    at = np.fromiter((p[0] for p in pieces), dtype=np.int64, count=len(pieces))
    lens = np.zeros(len(pieces), dtype=np.int64)
    groups: dict = {"lists": [], "arrays": []}
    for x, p in enumerate(pieces):
        key = p[1] if len(p) == 4 else "lists" if isinstance(p[1], list) else "arrays"
        groups.setdefault(key, []).append(x)
    done = []
    for key, sel in groups.items():
        if not sel:
            continue
        if key == "lists":
            fs = np.array(list(chain.from_iterable(pieces[x][1] for x in sel)))
            fe = np.array(list(chain.from_iterable(pieces[x][2] for x in sel)))
            n = np.array([len(pieces[x][1]) for x in sel], dtype=np.int64)
        elif key == "arrays":
            fs = np.concatenate([pieces[x][1] for x in sel])
            fe = np.concatenate([pieces[x][2] for x in sel])
            n = np.array([len(pieces[x][1]) for x in sel], dtype=np.int64)
        else:
            fs, fe, n = gathers[key]([pieces[x][2:] for x in sel])
        lens[sel] = n
        done.append((sel, fs, fe, n))
    off = np.cumsum(lens) - lens
    seg_a, seg_b = np.empty(int(lens.sum())), np.empty(int(lens.sum()))
    for sel, fs, fe, n in done:
        pos = np.repeat(off[sel] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        seg_a[pos], seg_b[pos] = fs, fe
    return at, lens, seg_a, seg_b


def collect(sim, codes: bytearray, wall_s: float) -> SimResult:
    """The `SimResult` of the finished run `sim` (a `floodway.sim.engine._Sim`), with its
    per-arrival action `codes` (indices into `engine.ACTIONS`) and its wall time."""
    tr, seg = sim.trace, sim.seg
    dec = np.frombuffer(bytes(codes), dtype=np.uint8)
    counts = np.bincount(dec, minlength=5) if dec.size else np.zeros(5, dtype=np.int64)
    if seg is not None:
        seg.flush_latencies()
    gathers = {} if seg is None else {
        "K": lambda spans: seg.busy.gather_all(spans, sim.lat_end),
        "S": lambda spans: seg.gather_stretches(spans, sim.lat_end)}
    busy_a, busy_b = splice_busy(sim.busy_a, sim.busy_b,
                                 *segment_busy(sim.pieces, gathers))
    last = float(busy_b.max()) if busy_b.size else tr.end_s
    horizon = max(tr.end_s, last)
    boxes = sim.all
    ready_a = np.array([b.ready_s for b in boxes if b.ready_s < horizon])
    ready_b = np.array([min(b.stop_s, horizon) for b in boxes if b.ready_s < horizon])
    start_a = np.array([b.created_s for b in boxes])
    start_b = np.array([min(b.ready_s, b.stop_s, horizon) for b in boxes])
    lat = sim.lat_end - tr.times_s
    served = lat[~np.isnan(lat)]
    p50, p95, p99 = (np.percentile(served, [50, 95, 99]) if served.size
                     else (math.nan,) * 3)
    minutes = math.ceil(horizon / MINUTE_S - 1e-9) - tr.start_minute
    warm_series = coverage_per_minute(ready_a, ready_b, tr.start_minute, minutes) / MINUTE_S
    busy_series = coverage_per_minute(busy_a, busy_b, tr.start_minute, minutes) / MINUTE_S
    arrivals = np.zeros(minutes, dtype=np.int64)
    arrivals[:len(tr.counts)] = tr.counts[:minutes]
    return SimResult(
        requests=tr.requests, dispatched=int(counts[0]), queued=int(counts[1]),
        spill_cold=int(counts[2]), spill_async=int(counts[3]), shed=int(counts[4]),
        expired=sim.expired, cold_requests=sim.cold_requests,
        containers_started=sim.started, p50_s=float(p50), p95_s=float(p95),
        p99_s=float(p99),
        warm_min=float((ready_b - ready_a).sum()) / MINUTE_S if ready_a.size else 0.0,
        busy_min=float((busy_b - busy_a).sum()) / MINUTE_S if busy_a.size else 0.0,
        starting_min=float(np.clip(start_b - start_a, 0, None).sum()) / MINUTE_S,
        span_min=(horizon - tr.start_s) / MINUTE_S, usd_per_gpu_s=sim.cfg.usd_per_gpu_s,
        wall_s=wall_s, policy_s=sim.policy_s, series_start_minute=tr.start_minute,
        arrivals=arrivals, warm_avg=warm_series, busy_avg=busy_series, decisions=dec,
        latencies_s=lat)


__all__ = ["collect", "segment_busy", "splice_busy"]
