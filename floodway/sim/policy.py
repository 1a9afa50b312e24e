"""Warm-pool policies the simulator can run, each called once per simulated minute:

    policy(now_s, history, measured, state) -> (WarmTarget, state)

`DesiredPolicy` (floodway's own `floodway.warmers.desired`) and `HistogramPolicy` (the
hybrid histogram policy of Shahrad et al., "Serverless in the Wild", USENIX ATC 2020,
alone: the baseline). `history` holds whole past minutes only. docs/design/simulator.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from floodway.config import WarmPool
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.sources import ConfigFloor, HistogramFloor, Source, sources_for
from floodway.warmers.target import History, Measured, PolicyState, WarmTarget, compose

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
    sources: tuple[Source, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", sources_for(self.config, self.params))

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState | None) -> tuple[WarmTarget, PolicyState]:
        c = self.config
        return compose(self.sources, now_s, history, measured, state, cap=c.container_cap,
                       buffer_containers=c.buffer_containers,
                       scaledown_window_s=c.scaledown_window_s)


@dataclass(frozen=True)
class HistogramPolicy:
    """The hybrid histogram policy alone (see the module docstring); `config` gives the
    fixed floor, the cap and the scaledown window used before any history exists. No
    buffer: the paper's policy keeps one container or none."""

    config: WarmPool
    params: PredictiveParams = HISTOGRAM_PARAMS
    sources: tuple[Source, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", (ConfigFloor(self.config.min_containers),
                                             HistogramFloor(self.params)))

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: Any) -> tuple[WarmTarget, None]:
        c = self.config
        target, _ = compose(self.sources, now_s, history, measured, None,
                            cap=c.container_cap, buffer_containers=0,
                            scaledown_window_s=c.scaledown_window_s)
        return target, None


__all__ = ["HISTOGRAM_PARAMS", "SIM_PARAMS", "DesiredPolicy", "HistogramPolicy", "Policy"]
