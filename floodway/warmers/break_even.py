"""The break-even keep-alive for an endpoint's first container (the predictive policy's
default, ``PredictiveParams(first_container="break_even")``).

    break_even(now_s, history, cold_start_s, params) -> BreakEvenDecision

The hybrid histogram (`floodway.warmers.histogram`) minimises memory-minutes of cheap
function instances and so can afford its 4-hour standard keep-alive and keep-alives to the
99th percentile; an idle GPU container is expensive, so floodway keeps the first container
warm in an idle minute only when that pays for itself. Keep-alive is caching (Fuerst &
Sharma, "FaasCache: Keeping Serverless Computing Alive with Greedy-Dual Caching", ASPLOS
2021) and deciding how long to keep it is ski rental: pay idle time by the minute or "buy" a
cold start (Karlin, Manasse, McGeoch & Owicki, "Competitive Randomized Algorithms for
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
uniformly over +- `kernel_margin` of itself (the histogram's 10 % margin; the next idle time
is rarely exactly a past one). Left: cold-start cost saved if the next arrival comes in
minute ``a``; right: idle container-minutes spent if it comes later (the whole minute) or in
it (half of it, arrivals being spread over the minute). Since starting and stopping a
container cost no idle time, the minutes are independent decisions: this is the
marginal-value rule that, unlike a fixed percentile, stops extending a keep-alive as soon as
the probability of an arrival per extra idle minute falls below the break-even rate, and
pre-warms (ahead by one caller tick plus the cold start) only into minutes that an arrival is
likely to hit -- the histogram's pre-warm and keep-alive windows as one rule, released after
the expected arrival.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from floodway.warmers.histogram import MINUTE_S, NO_HISTORY
from floodway.warmers.params import DEFAULT_PARAMS, PredictiveParams

if TYPE_CHECKING:
    from floodway.warmers.target import History


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
               params: PredictiveParams = DEFAULT_PARAMS) -> BreakEvenDecision:
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


__all__ = ["BreakEvenDecision", "break_even", "cold_requests_per_start"]
