"""The predictive warm-pool policy: learned from an endpoint's per-minute arrival history.

    predictive(now_s, history, measured, params, state) -> (PredictiveTarget, SizingState)

Used by `floodway.warmers.target.desired` when ``WarmPool.predictive`` is True. Two questions,
two answers:

**When** must the first container be warm? By default (``first_container="break_even"``),
the break-even keep-alive below; with ``first_container="histogram"``, the hybrid histogram
policy of Shahrad et al., "Serverless in the Wild: Characterizing and Optimizing the
Serverless Workload at a Large Cloud Provider", USENIX ATC 2020, section 4.2
(`hybrid_histogram`, kept exactly as published: it is the baseline floodway is measured
against):

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

Our adaptations: the container is started `measured.cold_start_s` *before* the pre-warming
point so that it is ready there (the paper's 10 % margin covers prediction error, not load
time, which is seconds for a function runtime but tens of seconds for a GPU model); and
during the minute of the last arrival the endpoint counts as warm (it is serving).

**Break-even keep-alive** (`break_even`, the default). The paper minimises memory-minutes of
cheap function instances and so can afford its 4-hour standard keep-alive and keep-alives to
the 99th percentile; an idle GPU container is expensive, so floodway keeps the first
container warm in an idle minute only when that pays for itself. Keep-alive is caching
(Fuerst & Sharma, "FaasCache: Keeping Serverless Computing Alive with Greedy-Dual Caching",
ASPLOS 2021) and deciding how long to keep it is ski rental: pay idle time by the minute or
"buy" a cold start (Karlin, Manasse, McGeoch & Owicki, "Competitive Randomized Algorithms for
Non-Uniform Problems", Algorithmica 1994 / SODA 1990, and Karlin et al., "Competitive Snoopy
Caching", Algorithmica 1988). Prices, in idle container-minutes:

- a cold start at the first minute of a burst of ``c`` arrivals delays the requests arriving
  during the start, ``max(1, c * cold_start_s / 60)`` of them (at most ``c``;
  `cold_requests_per_start`), each worth ``cold_wait_value * cold_start_s`` idle
  container-seconds: the break-even time of that burst;
- one idle minute costs one.

With fewer than `learn_min_samples` idle times the pattern is unknown and the deterministic
ski-rental rule applies: keep alive for the break-even time (the mean cost of the endpoint's
burst starts so far), then release; it never pays more than twice the optimum in hindsight.
With more, the endpoint's own idle times give the expected gain of each idle minute ``a``
(counted from the end of the last busy minute): keep warm iff

    sum_i cost_i * P_i(IT = a)  >  sum_i [P_i(IT > a) + P_i(IT = a) / 2]

where each past idle time ``i`` ends in a burst of cold-start cost ``cost_i`` and is smoothed
uniformly over +- `kernel_margin` of itself (the paper's 10 % margin; the next idle time is
rarely exactly a past one). Left: cold-start cost saved if the next arrival comes in minute
``a``; right: idle container-minutes spent if it comes later (the whole minute) or in it
(half of it, arrivals being spread over the minute). Since starting and stopping a container
cost no idle time, the minutes are independent decisions: this is the marginal-value rule
that, unlike a fixed percentile, stops extending a keep-alive as soon as the probability of
an arrival per extra idle minute falls below the break-even rate, and pre-warms (ahead by one
caller tick plus the cold start) only into minutes that an arrival is likely to hit -- the
histogram's pre-warm and keep-alive windows as one rule, released after the expected arrival.

**How many** containers beyond the first? Little's law: L = lambda * W, so containers =
ceil(rate * service_s / (concurrency * target_utilization)) (`littles_law`), with the rate =
the busiest of the last `rate_window_min` minutes (a burst is sized by its peak). Whether
*one* container is warm is the histogram's call (a question of when the next arrival comes);
Little's law only raises the floor to 2 or more (a question of how much concurrent work
arrives), otherwise every sparse endpoint would be held warm after each request.

Hysteresis (`hysteresis`) as in Ray Serve's autoscaler (``upscale_delay_s`` /
``downscale_delay_s``, https://docs.ray.io/en/latest/serve/advanced-guides/
advanced-autoscaling.html; defaults 30 s / 600 s in ``ray.serve.config.AutoscalingConfig``):
a higher size is taken after it persisted `upscale_delay_s` (default 0 here: a missed scale-up
costs a cold start per request), a lower one only after it persisted `downscale_delay_s`
(default 3600 s), and then to the highest size asked for during that delay. An alternating load
therefore never flaps. The long default is the break-even rule again: a container beyond the
first is needed only under load, so restarting it delays everything it would have served
during its cold start (rate x cold start, hundreds of requests at 2 or more containers' worth
of traffic), which at `cold_wait_value` is worth hours of idle time; one hour is Modal's
longest scaledown window. `rate_window_min` (15) lets the size follow a burst cycle of up to a
quarter hour (the trace's timers) instead of re-learning each burst's peak from a cold start.

Keep-alive to ``scaledown_window``: with a pre-warming window of 0 the keep-alive becomes the
scaledown window (Modal's own idle timer then enforces it between warmer runs); with a
pre-warming window the paper unloads after the invocation, so the scaledown window is one
minute, the history's resolution (shorter gaps are invisible to it). The floor holds the
container for the rest of the keep-alive, including any part beyond Modal's 3600 s cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from floodway.warmers.target import History, Measured

MINUTE_S = 60.0

# Modes of the hybrid histogram decision.
NO_HISTORY = "no_history"
HISTOGRAM = "histogram"
STANDARD = "standard"
OUT_OF_RANGE = "out_of_range"


@dataclass(frozen=True)
class PredictiveParams:
    """Tuning of the predictive policy. The histogram's defaults are the paper's constants
    (section 4.2) where it gives one; `min_samples`, `oob_threshold` and `fallback_recent`
    are ours, as are the break-even and sizing defaults (module docstring).

    Histogram: `range_min` bins of 1 minute; `head_pct` / `tail_pct` percentiles;
    `margin` (fraction) taken off the head and added to the tail; `cv_threshold` below which
    the histogram is not representative; `min_samples` ITs needed to trust it;
    `oob_threshold` share of out-of-bounds ITs from which the out-of-range predictor is used;
    `fallback_margin` its +- window (the paper's ARIMA margin); `fallback_recent` ITs whose
    median predicts the next IT; `standard_keep_alive_min` (None: `range_min`).
    Sizing: `rate_window_min` minutes whose busiest one gives the rate;
    `target_utilization` of a container in Little's law; `upscale_delay_s` /
    `downscale_delay_s` hysteresis. First container: `first_container` = ``"break_even"``
    (default) or ``"histogram"`` (the paper's policy alone); for the break-even rule,
    `cold_wait_value` idle container-seconds one second of a request's cold-start wait is
    worth, `learn_min_samples` idle times from which the endpoint's own ones are used (before:
    ski-rental keep-alive), `kernel_margin` (fraction) each idle time is smoothed over.
    `tick_s`: seconds between the caller's runs of the
    policy (a warmer cron, the simulator's minute): a pre-warm that falls between two runs is
    asked for at the earlier one, else the container starts up to a run late and the first
    arrivals of a short idle time find it still starting (0: evaluate at the instant only).
    """

    range_min: int = 240
    head_pct: float = 5.0
    tail_pct: float = 99.0
    margin: float = 0.10
    cv_threshold: float = 2.0
    min_samples: int = 10
    oob_threshold: float = 0.5
    fallback_margin: float = 0.15
    fallback_recent: int = 5
    standard_keep_alive_min: float | None = None
    rate_window_min: int = 15
    target_utilization: float = 1.0
    tick_s: float = 0.0
    upscale_delay_s: float = 0.0
    downscale_delay_s: float = 3600.0
    first_container: str = "break_even"
    cold_wait_value: float = 30.0
    learn_min_samples: int = 3
    kernel_margin: float = 0.10

    @property
    def standard_keep_alive(self) -> float:
        """Minutes of the standard keep-alive (the histogram range unless set)."""
        return float(self.range_min if self.standard_keep_alive_min is None
                     else self.standard_keep_alive_min)


# ---------------------------------------------------------------- hybrid histogram

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
                     params: PredictiveParams = PredictiveParams()) -> HistogramDecision:
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


# ---------------------------------------------------------------- break-even keep-alive

@dataclass(frozen=True)
class BreakEvenDecision:
    """The break-even policy's answer at one time (`break_even`).

    `mode`: ``no_history`` | ``busy`` (arrivals this minute) | ``ski_rental`` (fewer than
    `learn_min_samples` idle times: keep alive `break_even_min` after the last busy minute) |
    ``learned`` (per-minute rule on the endpoint's own idle times). `warm`: keep (at least)
    one container warm now. `age_min`: whole idle minutes since the last busy minute.
    `break_even_min`: the mean cold-start cost of a burst start, in idle container-minutes.
    `saved_min` / `idle_min`: for the minute the decision was about, the expected cold-start
    cost saved and the expected idle container-minutes spent by keeping a container warm in
    it (per idle period). `samples`: idle times seen. `reason` in words.
    """

    mode: str
    warm: bool
    age_min: int
    break_even_min: float
    saved_min: float
    idle_min: float
    samples: int
    reason: str


def cold_requests_per_start(count: np.ndarray | float, cold_start_s: float) -> np.ndarray:
    """Requests of a minute with `count` arrivals that a cold start at its first arrival
    delays: those arriving during the start, at least the first one, at most all of them
    (arrivals spread over the minute; the per-minute record knows no finer timing)."""
    c = np.asarray(count, dtype=np.float64)
    return np.minimum(c, np.maximum(1.0, c * cold_start_s / MINUTE_S))


def break_even(now_s: float, history: History, cold_start_s: float,
               params: PredictiveParams = PredictiveParams()) -> BreakEvenDecision:
    """Whether to keep one container warm at `now_s`: keep it in an idle minute only when the
    cold-start cost it is expected to save exceeds the idle container time it is expected to
    cost (see the module docstring, "break-even keep-alive").

    `history` must not extend past `now_s` (use `History.upto`); `cold_start_s` >= 0.
    """
    counts = history.counts
    act = np.flatnonzero(counts)
    if not act.size:
        return BreakEvenDecision(NO_HISTORY, False, 0, 0.0, 0.0, 0.0, 0,
                                 "no arrival yet: nothing to predict")
    last = int(act[-1]) + history.start_minute
    origin_s = (last + 1) * MINUTE_S
    value_min = params.cold_wait_value * cold_start_s / MINUTE_S  # one delayed request
    # The cost of a cold start at the first minute of each burst (an active minute after an
    # idle one, or the first ever), in idle container-minutes.
    starts = act[np.r_[True, np.diff(act) > 1]]
    cost_min = cold_requests_per_start(counts[starts], cold_start_s) * value_min
    mean_cost = float(cost_min.mean())
    if now_s < origin_s:
        return BreakEvenDecision("busy", True, 0, mean_cost, 0.0, 0.0, max(act.size - 1, 0),
                                 "arrivals this minute")
    age = int((now_s - origin_s) // MINUTE_S)
    # The caller runs again `tick_s` later; a container asked for then is ready
    # `cold_start_s` after it: decide now also for the minute that starts before then.
    ahead = origin_s + (age + 1) * MINUTE_S < now_s + params.tick_s + cold_start_s
    ages = [age, age + 1] if ahead else [age]
    its = np.diff(act) - 1
    n = int(its.size)
    if n < params.learn_min_samples:
        warm = any(a < mean_cost for a in ages)
        return BreakEvenDecision(
            "ski_rental", warm, age, mean_cost, 0.0, 0.0, n,
            f"only {n} idle times (< {params.learn_min_samples}): keep alive the break-even "
            f"{mean_cost:.1f} min (a cold start delays "
            f"{mean_cost / max(value_min, 1e-12):.1f} requests); idle {age} min")
    # Each idle time, smoothed over +- kernel_margin of itself (at least its own minute):
    # the next idle time is rarely exactly a past one.
    t = its.astype(np.float64)
    lo = np.floor(t * (1 - params.kernel_margin))
    hi = np.ceil(t * (1 + params.kernel_margin))
    width = hi - lo + 1
    w = cold_requests_per_start(counts[act[1:]], cold_start_s) * value_min
    best = None
    for a in ages:
        inside = ((lo <= a) & (a <= hi)) / width
        saved = float((w * inside).sum()) / n
        # An idle period that lasts past this minute idles it all; one that ends in it, about
        # half of it (arrivals spread over the minute).
        idle = float((np.clip(hi - a, 0, width) / width).sum() + 0.5 * inside.sum()) / n
        if best is None or saved - idle > best[1] - best[2]:
            best = (a, saved, idle)
    a, saved, idle = best  # type: ignore[misc]
    warm = saved > idle
    return BreakEvenDecision(
        "learned", warm, age, mean_cost, saved, idle, n,
        f"{n} idle times: idle minute {a} saves {saved:.2f} vs costs {idle:.2f} "
        f"container-min: {'warm' if warm else 'cold'}")


# ---------------------------------------------------------------- Little's law + hysteresis

def littles_law(rate_per_s: float, service_s: float, concurrency: float,
                target_utilization: float = 1.0) -> int:
    """Containers needed for `rate_per_s` arrivals each holding a slot `service_s` seconds, at
    `concurrency` slots per container: ceil(rate * service / (concurrency * utilization)).
    0 for no traffic. Raises ValueError if concurrency or utilization is not > 0."""
    if concurrency <= 0 or target_utilization <= 0:
        raise ValueError("concurrency and target_utilization must be > 0")
    if rate_per_s <= 0 or service_s <= 0:
        return 0
    # A hair below the integer so that exactly full containers do not round up to one more.
    return max(1, math.ceil(rate_per_s * service_s / (concurrency * target_utilization) - 1e-9))


@dataclass(frozen=True)
class SizingState:
    """Hysteresis memory: the size in force (`containers`), and the pending change, if any:
    since when a lower (higher) size has been asked for and the highest (lowest) asked since.
    """

    containers: int = 0
    lower_since_s: float | None = None
    lower_max: int = 0
    higher_since_s: float | None = None
    higher_min: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SizingState:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def hysteresis(target: int, now_s: float, state: SizingState, upscale_delay_s: float = 0.0,
               downscale_delay_s: float = 300.0) -> SizingState:
    """The size in force after asking for `target` at `now_s` (see the module docstring).

    A higher target applies once it has been asked for continuously for `upscale_delay_s`
    (the lowest asked meanwhile); a lower one once asked for `downscale_delay_s` (the highest
    asked meanwhile). Asking for the size in force cancels any pending change.
    """
    cur = state.containers
    if target > cur:
        since = now_s if state.higher_since_s is None else state.higher_since_s
        low = target if state.higher_since_s is None else min(state.higher_min, target)
        if now_s - since >= upscale_delay_s:
            return SizingState(low)
        return SizingState(cur, higher_since_s=since, higher_min=low)
    if target < cur:
        since = now_s if state.lower_since_s is None else state.lower_since_s
        high = target if state.lower_since_s is None else max(state.lower_max, target)
        if now_s - since >= downscale_delay_s:
            return SizingState(high)
        return SizingState(cur, lower_since_s=since, lower_max=high)
    return SizingState(cur)


# ---------------------------------------------------------------- the policy

@dataclass(frozen=True)
class PredictiveTarget:
    """The predictive policy's share of the warm target.

    `min_containers`: its floor (1 while the histogram says warm; Little's law when it asks
    for 2 or more). `scaledown_window_s`: its keep-alive as a scaledown window (None: keep
    the config's). `histogram`: the full histogram decision; `sized`: Little's law after
    hysteresis; `raw_sized`: before it.
    """

    min_containers: int
    scaledown_window_s: float | None
    scaledown_reason: str
    first: HistogramDecision | BreakEvenDecision
    sized: int
    raw_sized: int
    reason: str


def predictive(now_s: float, history: History, measured: Measured, params: PredictiveParams,
               state: SizingState) -> tuple[PredictiveTarget, SizingState]:
    """The predictive floor and scaledown window at `now_s`, and the next hysteresis state.

    `history` must not extend past `now_s` (use `History.upto`). Pure.
    """
    if params.first_container == "histogram":
        first_dec: HistogramDecision | BreakEvenDecision = hybrid_histogram(
            now_s, history, measured.cold_start_s, params)
    elif params.first_container == "break_even":
        first_dec = break_even(now_s, history, measured.cold_start_s, params)
    else:
        raise ValueError(f"unknown first_container {params.first_container!r}")
    rate = history.peak_rate_per_s(now_s, params.rate_window_min)
    raw = littles_law(rate, measured.service_s, measured.concurrency, params.target_utilization)
    state = hysteresis(raw, now_s, state, params.upscale_delay_s, params.downscale_delay_s)
    sized = state.containers

    first = 1 if first_dec.warm else 0
    if sized >= 2 and sized > first:
        floor = sized
        reason = (f"predictive: Little's law {sized} containers (peak {rate * 60:.0f}/min x "
                  f"{measured.service_s:.3g} s / {measured.concurrency:g} per container"
                  f"{', held by hysteresis' if sized > raw else ''})")
    else:
        floor = first
        reason = f"predictive: {first_dec.reason}"

    if first_dec.mode == NO_HISTORY:
        scaledown, sd_why = None, "config (no history)"
    elif isinstance(first_dec, BreakEvenDecision):
        # The floor holds the container exactly as long as the rule says; once released it
        # goes at the history's resolution.
        scaledown = MINUTE_S
        sd_why = "predictive: release when the floor drops (1 min resolution)"
    elif first_dec.prewarm_min > 0:
        scaledown = MINUTE_S
        sd_why = "predictive: unload after the invocation (1 min resolution)"
    else:
        scaledown = (first_dec.prewarm_min + first_dec.keep_alive_min) * MINUTE_S
        sd_why = f"predictive keep-alive ({first_dec.mode})"
    return (PredictiveTarget(floor, scaledown, sd_why, first_dec, sized, raw, reason), state)


__all__ = [
    "HISTOGRAM", "NO_HISTORY", "OUT_OF_RANGE", "STANDARD", "BreakEvenDecision",
    "HistogramDecision", "break_even", "cold_requests_per_start",
    "PredictiveParams", "PredictiveTarget", "SizingState", "hybrid_histogram", "hysteresis",
    "idle_time_histogram", "littles_law", "predictive",
]
