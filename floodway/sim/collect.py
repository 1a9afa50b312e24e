"""The `SimResult` of one run of `floodway.sim.engine`, from what the run recorded.

`splice_busy` puts the bulk segments' busy intervals among the event loop's, in the order
the event loop would have recorded them (their float sums depend on it):
docs/design/simulator.md ("Collecting the result").
"""

from __future__ import annotations

import math

import numpy as np

from floodway.routers.decide import Action
from floodway.sim.result import ACTIONS, CODES, SimResult, coverage_per_minute
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


def collect(sim, codes: bytearray, wall_s: float) -> SimResult:
    """The `SimResult` of the finished run `sim` (a `floodway.sim.engine.Simulator`), with its
    per-arrival action `codes` (indices into `ACTIONS`) and its wall time."""
    tr, seg = sim.trace, sim.seg
    dec = np.frombuffer(bytes(codes), dtype=np.uint8)
    n = np.bincount(dec, minlength=len(ACTIONS)) if dec.size else np.zeros(len(ACTIONS),
                                                                              dtype=np.int64)
    counts = {a: int(n[CODES[a]]) for a in ACTIONS}
    pieces = np.array(sim.pieces, dtype=np.int64).reshape(-1, 2)
    seg_a = seg_b = np.zeros(0)
    if seg is not None:
        seg_a, seg_b = seg.out_s[:seg.w], seg.out_e[:seg.w]
    busy_a, busy_b = splice_busy(sim.busy_a, sim.busy_b, pieces[:, 0], pieces[:, 1], seg_a,
                                 seg_b)
    last = float(busy_b.max()) if busy_b.size else tr.end_s
    horizon = max(tr.end_s, last)
    boxes = sim.all
    ready_a = np.array([b.ready_s for b in boxes if b.ready_s < horizon])
    ready_b = np.array([min(b.stop_s, horizon) for b in boxes if b.ready_s < horizon])
    start_a = np.array([b.created_s for b in boxes])
    start_b = np.array([min(b.ready_s, b.stop_s, horizon) for b in boxes])
    lat = sim.lat_end - tr.times_s
    handed = sim.handed_off
    if sim.handoff_s:              # answered after its hand-off: a 202, the batch ran on
        late = lat > sim.cfg.route.timeout_s - sim.handoff_s
        handed += int(np.count_nonzero(late))
        lat[late] = math.nan
    served = lat[~np.isnan(lat)]
    p50, p95, p99 = (np.percentile(served, [50, 95, 99]) if served.size
                     else (math.nan,) * 3)
    minutes = math.ceil(horizon / MINUTE_S - 1e-9) - tr.start_minute
    warm_series = coverage_per_minute(ready_a, ready_b, tr.start_minute, minutes) / MINUTE_S
    busy_series = coverage_per_minute(busy_a, busy_b, tr.start_minute, minutes) / MINUTE_S
    arrivals = np.zeros(minutes, dtype=np.int64)
    arrivals[:len(tr.counts)] = tr.counts[:minutes]
    return SimResult(
        requests=tr.requests, dispatched=counts[Action.DISPATCH], queued=counts[Action.QUEUE],
        spill_cold=counts[Action.SPILL_COLD], spill_async=counts[Action.SPILL_ASYNC],
        shed=counts[Action.SHED],
        expired=sim.expired, cold_requests=sim.cold_requests,
        containers_started=sim.started, p50_s=float(p50), p95_s=float(p95),
        p99_s=float(p99),
        warm_min=float((ready_b - ready_a).sum()) / MINUTE_S if ready_a.size else 0.0,
        busy_min=float((busy_b - busy_a).sum()) / MINUTE_S if busy_a.size else 0.0,
        starting_min=float(np.clip(start_b - start_a, 0, None).sum()) / MINUTE_S,
        span_min=(horizon - tr.start_s) / MINUTE_S, usd_per_gpu_s=sim.cfg.usd_per_gpu_s,
        wall_s=wall_s, policy_s=sim.policy_s, series_start_minute=tr.start_minute,
        arrivals=arrivals, warm_avg=warm_series, busy_avg=busy_series, decisions=dec,
        latencies_s=lat, handed_off=handed)


__all__ = ["collect", "splice_busy"]
