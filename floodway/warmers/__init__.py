"""Warm-pool policies: pure functions of (clock, traffic history, WarmPool config) that say
how many containers to keep warm. The local runtime, the Modal warmers and the simulator all
call the same functions.

    target.py      desired(now_s, history, config, measured, state) -> (WarmTarget, PolicyState);
                   compose(sources, ...): the bounds, buffer and scaledown applied once
    sources.py     the Source protocol: the config floor, each Window, the predictive policy
    schedule.py    cron windows with timezone and lead time; update_autoscaler cron times
    predictive.py  the predictive policy: first container + Little's law with hysteresis
    histogram.py   hybrid histogram keep-alive / pre-warm (Shahrad et al. 2020)
    break_even.py  break-even (ski-rental) keep-alive, the predictive policy's default
    params.py      PredictiveParams
    history.py     TrafficHistory: per-minute arrivals per endpoint in SQLite
"""

from floodway.warmers.history import TrafficHistory
from floodway.warmers.params import PredictiveParams
from floodway.warmers.schedule import CronCall, Transition, autoscaler_crons, window_transitions
from floodway.warmers.sources import Floor, Part, Source, sources_for
from floodway.warmers.target import (
    History,
    Measured,
    PolicyState,
    WarmTarget,
    compose,
    desired,
)

__all__ = [
    "CronCall", "Floor", "History", "Measured", "Part", "PolicyState", "PredictiveParams",
    "Source", "TrafficHistory", "Transition", "WarmTarget", "autoscaler_crons", "compose",
    "desired", "sources_for", "window_transitions",
]
