"""Warm-pool policies: pure functions of (clock, traffic history, WarmPool config) that say
how many containers to keep warm. The local runtime, the Modal warmers and the simulator all
call the same functions.

    target.py      desired(now_s, history, config, measured, state) -> (WarmTarget, PolicyState)
    schedule.py    cron windows with timezone and lead time; update_autoscaler cron times
    predictive.py  hybrid histogram keep-alive / pre-warm (Shahrad et al. 2020) + Little's law
    history.py     TrafficHistory: per-minute arrivals per endpoint in SQLite
"""

from floodway.warmers.history import TrafficHistory
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.schedule import CronCall, Transition, autoscaler_crons, window_transitions
from floodway.warmers.target import History, Measured, PolicyState, WarmTarget, desired

__all__ = [
    "CronCall", "History", "Measured", "PolicyState", "PredictiveParams", "TrafficHistory",
    "Transition", "WarmTarget", "autoscaler_crons", "desired", "window_transitions",
]
