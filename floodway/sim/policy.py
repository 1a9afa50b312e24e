"""Warm-pool policies the simulator can run, each called once per simulated minute:

    policy(now_s, history, measured, state) -> (WarmTarget, state)

- `DesiredPolicy(config)`: floodway's own `floodway.warmers.desired` on the endpoint's
  `WarmPool` (fixed floor, buffer, windows, and the predictive policy when enabled): the code
  that runs in the local runtime and the Modal warmers.
- `HistogramPolicy(config)`: the hybrid histogram policy of Shahrad et al. 2020 alone (one
  container warm while it says so, its keep-alive as the scaledown window), without the
  Little's-law sizing of `floodway.warmers.predictive.predictive`: the baseline the predictive
  policy is compared against. It calls the same `predictive()` with
  ``first_container="histogram"`` and keeps only that part.

Both run with ``tick_s`` = 60 s, the period at which the simulator (like the Modal warmer
cron) runs them: `DesiredPolicy` with `SIM_PARAMS` (floodway's defaults: the break-even
keep-alive), `HistogramPolicy` with `HISTOGRAM_PARAMS` (the paper's policy and constants).
`history` holds whole past minutes only (the simulator never shows a policy the future).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from floodway.config import WarmPool
from floodway.warmers.predictive import PredictiveParams, SizingState, predictive
from floodway.warmers.target import (
    History,
    Measured,
    PolicyState,
    WarmTarget,
    clamp_scaledown_s,
    desired,
)

# The simulator runs a policy once a minute, as the Modal warmer cron does.
SIM_PARAMS = PredictiveParams(tick_s=60.0)
# The paper's policy for the first container, as published (the baseline).
HISTOGRAM_PARAMS = replace(SIM_PARAMS, first_container="histogram")


class Policy(Protocol):
    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: Any) -> tuple[WarmTarget, Any]: ...


@dataclass(frozen=True)
class DesiredPolicy:
    """`floodway.warmers.desired` on `config` (`params` tunes the predictive part)."""

    config: WarmPool
    params: PredictiveParams | None = SIM_PARAMS

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState | None) -> tuple[WarmTarget, PolicyState]:
        return desired(now_s, history, self.config, measured, state, params=self.params)


@dataclass(frozen=True)
class HistogramPolicy:
    """The hybrid histogram policy alone (see the module docstring); `config` gives the
    fixed floor, the cap and the scaledown window used before any history exists."""

    config: WarmPool
    params: PredictiveParams = HISTOGRAM_PARAMS

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: Any) -> tuple[WarmTarget, None]:
        pred, _ = predictive(now_s, history.upto(now_s), measured, self.params, SizingState())
        hist = pred.first
        floor = min(max(self.config.min_containers, 1 if hist.warm else 0),
                    self.config.container_cap)
        scaledown = clamp_scaledown_s(self.config.scaledown_window_s
                                      if pred.scaledown_window_s is None
                                      else pred.scaledown_window_s)
        return WarmTarget(floor, 0, scaledown, f"histogram only: {hist.reason}"), None


__all__ = ["HISTOGRAM_PARAMS", "SIM_PARAMS", "DesiredPolicy", "HistogramPolicy", "Policy"]
