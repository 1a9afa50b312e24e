"""The predictive warm-pool policy: learned from an endpoint's per-minute arrival history.

    predictive(now_s, history, measured, params, state) -> (PredictiveTarget, SizingState)

A warm-pool source (`floodway.warmers.sources.PredictiveFloor`) that `desired()` composes
when ``WarmPool.predictive`` is True. Two questions, two answers:

**When** must the first container be warm? By default (``first_container="break_even"``),
the break-even keep-alive (`floodway.warmers.break_even`: keep a container in an idle minute
only when the cold-start cost it is expected to save exceeds its idle time); with
``first_container="histogram"``, the hybrid histogram policy of Shahrad et al., USENIX ATC
2020 (`floodway.warmers.histogram`, kept exactly as published: the baseline).

**How many** containers beyond the first? Little's law: L = lambda * W, so containers =
ceil(rate * service_s / (concurrency * target_utilization)) (`littles_law`), with the rate =
the busiest of the last `rate_window_min` minutes (a burst is sized by its peak). Whether
*one* container is warm is the first-container rule's call (a question of when the next
arrival comes); Little's law only raises the floor to 2 or more (a question of how much
concurrent work arrives), otherwise every sparse endpoint would be held warm after each
request.

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

from floodway.warmers.break_even import BreakEvenDecision, break_even, cold_requests_per_start
from floodway.warmers.histogram import (
    HISTOGRAM,
    MINUTE_S,
    NO_HISTORY,
    OUT_OF_RANGE,
    STANDARD,
    HistogramDecision,
    hybrid_histogram,
    idle_time_histogram,
)
from floodway.warmers.params import PredictiveParams

if TYPE_CHECKING:
    from floodway.warmers.target import History, Measured


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
