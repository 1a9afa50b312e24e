"""Warm-pool sources: each part of an endpoint's warm policy behind one protocol.

    source(now_s, history, measured, state) -> (Floor | None, PolicyState)
    sources_for(config, params) -> (Source, ...)     # what `desired()` composes

A source says how many containers it wants warm now and why (`Floor.part`), and optionally
the scaledown window it wants (`Floor.scaledown_s`, seconds; None: no opinion). It answers
None when it has no say now (a window that is neither open nor within its lead). It may keep
memory between calls in `PolicyState` (an immutable value: it returns the state to pass on,
the same object when nothing changed).

The sources of a `WarmPool` (`sources_for`), in this order:

- `ConfigFloor`: ``min_containers``, always;
- `WindowFloor`, one per `Window`: its ``min_containers`` while open or within ``lead_s`` + the
  measured cold start of opening (`floodway.warmers.schedule.window_status`);
- `PredictiveFloor`, with ``predictive=True``: the predictive policy's floor and keep-alive
  (`floodway.warmers.predictive.predictive`), its hysteresis in ``PolicyState.sizing``.

`HistogramFloor` is the hybrid histogram alone (the simulator's baseline policy,
`floodway.sim.policy.HistogramPolicy`).

Sources only ask. The bounds (at most ``max_containers``), the buffer (only while the
endpoint is active) and the clamping of the scaledown window to Modal's range are applied
once, by `floodway.warmers.target.compose`, whatever the sources are -- as Ray Serve
proposes to wrap any custom autoscaling policy in the bounds and delays of its config
(https://github.com/ray-project/ray/issues/58622), so a new policy cannot forget them. A new
warm policy is one more source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from floodway.config import WarmPool, Window
    from floodway.warmers.params import PredictiveParams
    from floodway.warmers.target import History, Measured, PolicyState


@dataclass(frozen=True)
class Part:
    """A number of containers and, in words, the source that asked for it."""

    containers: int
    why: str


@dataclass(frozen=True)
class Floor:
    """A source's answer: its floor `part`, and the scaledown window it wants
    (`scaledown_s`, seconds, None: none) with its reason `scaledown_why`."""

    part: Part
    scaledown_s: float | None = None
    scaledown_why: str = ""


class Source(Protocol):
    """One part of a warm policy (see the module docstring). `history` holds whole minutes
    up to the minute of `now_s` only (unix seconds); pure: no clock, no I/O."""

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState) -> tuple[Floor | None, PolicyState]: ...


@dataclass(frozen=True)
class ConfigFloor:
    """``WarmPool.min_containers``, always."""

    min_containers: int

    @cached_property
    def _floor(self) -> Floor:
        # The same answer every time: built once (desired() runs every simulated minute).
        return Floor(Part(self.min_containers, f"config min_containers {self.min_containers}"))

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState) -> tuple[Floor | None, PolicyState]:
        return self._floor, state


@dataclass(frozen=True)
class WindowFloor:
    """One scheduled `Window`'s ``min_containers`` while it holds its floor (open, or within
    its lead plus the measured cold start of opening); no say otherwise."""

    window: Window

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState) -> tuple[Floor | None, PolicyState]:
        from floodway.warmers.schedule import window_status

        st = window_status(self.window, now_s, measured)
        return (Floor(Part(st.min_containers, st.reason)) if st.warm else None), state


@dataclass(frozen=True)
class PredictiveFloor:
    """The predictive policy (`floodway.warmers.predictive.predictive`): its floor, and its
    keep-alive as the scaledown window once there is history. Its Little's-law hysteresis
    lives in ``state.sizing``."""

    params: PredictiveParams

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState) -> tuple[Floor | None, PolicyState]:
        from floodway.warmers.predictive import SizingState, predictive

        pred, sizing = predictive(now_s, history, measured, self.params,
                                  state.sizing or SizingState())
        if sizing is not state.sizing:
            state = type(state)(sizing)
        return Floor(Part(pred.min_containers, pred.reason), pred.scaledown_window_s,
                     pred.scaledown_reason), state


@dataclass(frozen=True)
class HistogramFloor:
    """The hybrid histogram policy alone (Shahrad et al. 2020; `floodway.warmers.histogram`):
    one container while it says warm, its keep-alive as the scaledown window, no Little's-law
    sizing and no memory. `params` should say ``first_container="histogram"``."""

    params: PredictiveParams

    def __call__(self, now_s: float, history: History, measured: Measured,
                 state: PolicyState) -> tuple[Floor | None, PolicyState]:
        from floodway.warmers.predictive import SizingState, predictive

        pred, _ = predictive(now_s, history, measured, self.params, SizingState())
        first = pred.first
        return Floor(Part(1 if first.warm else 0, f"histogram only: {first.reason}"),
                     pred.scaledown_window_s, pred.scaledown_reason), state


@lru_cache(maxsize=256)
def sources_for(config: WarmPool, params: PredictiveParams | None = None
                ) -> tuple[Source, ...]:
    """The sources of `config` in composition order (see the module docstring); `params`
    tunes the predictive one (default `PredictiveParams()`). Both are frozen: the answer is
    cached (`desired()` runs every simulated minute and twice a second per endpoint)."""
    out: list[Source] = [ConfigFloor(config.min_containers)]
    out.extend(WindowFloor(w) for w in config.windows)
    if config.predictive:
        from floodway.warmers.params import DEFAULT_PARAMS

        out.append(PredictiveFloor(DEFAULT_PARAMS if params is None else params))
    return tuple(out)


__all__ = ["ConfigFloor", "Floor", "HistogramFloor", "Part", "PredictiveFloor", "Source",
           "WindowFloor", "sources_for"]
