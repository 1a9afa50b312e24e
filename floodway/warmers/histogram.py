"""The hybrid histogram keep-alive / pre-warm policy for an endpoint's first container.

    hybrid_histogram(now_s, history, cold_start_s, params) -> HistogramDecision

Shahrad et al., "Serverless in the Wild: Characterizing and Optimizing the Serverless
Workload at a Large Cloud Provider", USENIX ATC 2020, section 4.2, kept exactly as published:
it is the baseline floodway's predictive policy (`floodway.warmers.predictive`) is measured
against, and its rule with ``PredictiveParams(first_container="histogram")``.

1. Idle times (ITs) between consecutive invocations go into a per-endpoint histogram with
   1-minute bins over a range of 4 hours (240 bins); ITs of 4 hours or more are
   out-of-bounds (OOB). Here an IT is the number of whole idle minutes between two minutes
   with arrivals (`History.idle_times_min`): the history is per minute, as in the paper's
   trace.
2. Head = the 5th percentile of the in-range ITs (rounded down to its bin's start), tail =
   the 99th percentile (rounded up to its bin's end). Pre-warming window = head - 10 %,
   keep-alive until tail + 10 %, both counted from the end of the last invocation: the
   container is unloaded after an invocation, loaded again after the pre-warming window, and
   kept until the keep-alive window ends. A head of 0 means "do not unload" (pre-warming
   window 0, keep alive until tail + 10 %).
3. The histogram is representative only if the coefficient of variation (CV) of its bin
   counts is at least 2 (a few dominant bins; the paper's threshold). Otherwise -- and here,
   also with fewer than `min_samples` ITs, a number the paper does not give -- the standard
   keep-alive applies: no pre-warming, keep-alive = the histogram range (4 h).
4. When too many ITs are out of bounds (here: half or more, the paper gives no number), the
   paper predicts the next IT with ARIMA and warms from prediction - 15 % to + 15 %.
   **Substitution (documented):** floodway predicts the next IT as the median of the last 5
   ITs instead of fitting ARIMA (no statistics dependency, exact on periodic series, robust to
   one outlier); the +-15 % window is the paper's.

Our adaptations: the container is started `cold_start_s` *before* the pre-warming point so
that it is ready there (the paper's 10 % margin covers prediction error, not load time, which
is seconds for a function runtime but tens of seconds for a GPU model); and during the minute
of the last arrival the endpoint counts as warm (it is serving).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from floodway.warmers.params import DEFAULT_PARAMS, PredictiveParams

if TYPE_CHECKING:
    from floodway.warmers.target import History

MINUTE_S = 60.0

# Modes of a first-container decision (`no_history` is shared with the break-even rule).
NO_HISTORY = "no_history"
HISTOGRAM = "histogram"
STANDARD = "standard"
OUT_OF_RANGE = "out_of_range"


@dataclass(frozen=True)
class HistogramDecision:
    """The hybrid histogram policy's answer at one time.

    `mode`: ``histogram`` | ``standard`` (not representative or too few ITs) |
    ``out_of_range`` (too many ITs beyond the range) | ``no_history`` (no arrival yet).
    `warm`: keep (at least) one container warm now. `prewarm_min`: pre-warming window,
    minutes after the end of the last arrival's minute; `keep_alive_min`: keep-alive window,
    minutes from the pre-warming point (the paper's definition). `warm_from_s` /
    `warm_until_s`: the resulting interval in unix seconds (start already moved earlier by
    the cold start); None with no history. `samples` ITs, `oob` of them out of bounds,
    `cv` of the bin counts. `reason` in words.
    """

    mode: str
    warm: bool
    prewarm_min: float
    keep_alive_min: float
    warm_from_s: float | None
    warm_until_s: float | None
    samples: int
    oob: int
    cv: float
    reason: str


def idle_time_histogram(idle_times_min: np.ndarray, range_min: int) -> tuple[np.ndarray, int]:
    """Bin counts of whole-minute ITs over [0, range_min) minutes, shape (range_min,), and the
    number of ITs out of bounds (>= range_min)."""
    its = np.asarray(idle_times_min, dtype=np.int64)
    inside = its[(its >= 0) & (its < range_min)]
    return np.bincount(inside, minlength=range_min)[:range_min], int(its.size - inside.size)


def _percentile_bin(bins: np.ndarray, pct: float) -> int:
    """The first bin whose cumulative share of the counts reaches `pct` percent."""
    cum = np.cumsum(bins)
    return int(np.searchsorted(cum, pct / 100.0 * cum[-1] - 1e-9, side="left"))


def hybrid_histogram(now_s: float, history: History, cold_start_s: float,
                     params: PredictiveParams = DEFAULT_PARAMS) -> HistogramDecision:
    """Whether to keep one container warm at `now_s`, by Shahrad et al. 2020, section 4.2
    (see the module docstring for the algorithm and our substitutions).

    `history` must not extend past `now_s` (use `History.upto`); `cold_start_s` >= 0.
    """
    its = history.idle_times_min()
    last = history.last_arrival_minute()
    if last is None:
        return HistogramDecision(NO_HISTORY, False, 0.0, 0.0, None, None, 0, 0, 0.0,
                                 "no arrival yet: nothing to predict")
    origin_s = (last + 1) * MINUTE_S  # the idle period starts after the last busy minute
    bins, oob = idle_time_histogram(its, params.range_min)
    n = int(its.size)
    mean = bins.mean()
    cv = float(bins.std() / mean) if mean > 0 else 0.0

    if n >= params.min_samples and oob / n >= params.oob_threshold:
        recent = its[-max(params.fallback_recent, 1):]
        pred = float(np.median(recent))
        mode = OUT_OF_RANGE
        prewarm = pred * (1 - params.fallback_margin)
        until = (pred + 1) * (1 + params.fallback_margin)
        why = (f"{oob}/{n} idle times beyond {params.range_min} min: next idle time "
               f"predicted {pred:.0f} min (median of the last {recent.size})")
    elif n < params.min_samples or cv < params.cv_threshold:
        mode = STANDARD
        prewarm, until = 0.0, params.standard_keep_alive
        why = (f"only {n} idle times (< {params.min_samples})" if n < params.min_samples
               else f"histogram not representative (CV {cv:.2f} < {params.cv_threshold:g})")
        why += f": standard keep-alive {until:.0f} min"
    else:
        mode = HISTOGRAM
        head = _percentile_bin(bins, params.head_pct)          # bin start: rounded down
        tail = _percentile_bin(bins, params.tail_pct) + 1      # bin end: rounded up
        prewarm = head * (1 - params.margin)
        until = tail * (1 + params.margin)
        why = (f"idle-time histogram of {n} ({oob} out of range, CV {cv:.1f}): "
               f"p{params.head_pct:g} {head} min, p{params.tail_pct:g} {tail} min")

    warm_from_s = (origin_s + prewarm * MINUTE_S - cold_start_s) if prewarm > 0 \
        else last * MINUTE_S
    warm_until_s = origin_s + until * MINUTE_S
    busy = now_s < origin_s
    # The next run of the caller comes `tick_s` later: start now if the pre-warm point is
    # before then.
    warm = busy or warm_from_s - params.tick_s < now_s < warm_until_s or \
        warm_from_s <= now_s < warm_until_s
    if busy:
        state = "arrivals this minute"
    elif now_s < warm_from_s:
        state = f"pre-warm in {warm_from_s - now_s:.0f} s"
    elif warm:
        state = f"keep-alive for {warm_until_s - now_s:.0f} s more"
    else:
        state = "keep-alive over"
    return HistogramDecision(mode, warm, prewarm, until - prewarm, warm_from_s, warm_until_s,
                             n, oob, cv, f"{why}; {state}")


__all__ = ["HISTOGRAM", "NO_HISTORY", "OUT_OF_RANGE", "STANDARD", "HistogramDecision",
           "hybrid_histogram", "idle_time_histogram"]
