"""Tuning of the predictive warm-pool policy (`floodway.warmers.predictive`): one frozen
dataclass shared by its first-container rules (`floodway.warmers.histogram`,
`floodway.warmers.break_even`) and its Little's-law sizing."""

from __future__ import annotations

from dataclasses import dataclass


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


# The defaults, as one shared value (a frozen dataclass: safe as an argument default).
DEFAULT_PARAMS = PredictiveParams()

__all__ = ["DEFAULT_PARAMS", "PredictiveParams"]
