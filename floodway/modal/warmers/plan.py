"""Which warmer functions an app gets on Modal, and when they fire.

    plan = warmer_plan(fw_app)      # -> [WarmerSpec(name, cron, timezone, endpoints, edges)]

- ``warm_cron_<i>``: one function per distinct (cron expression, timezone) among the
  `autoscaler_crons` of every endpoint's `Window`s: a window's start minus its lead minus the
  cold start (edge "start"), and its end (edge "end"). Calls that share an expression (two
  endpoints with the same window, or one window's end that is another's start) share one
  function. Numbered in order of first appearance in the app.
- ``warm_tick``: one function firing every minute (``* * * * *``, so on the same minute
  boundaries as the per-minute traffic history), for the endpoints with
  ``WarmPool(predictive=True)``: the predictive policy needs re-evaluating as traffic comes.

Why not one function per window edge: Modal plans cap the number of deployed crons per
workspace (https://modal.com/pricing), and every warmer is also a deployed function. So
expressions are shared, and when an app needs more than `MAX_WINDOW_CRONS` distinct ones (or
an edge is not expressible as a crontab line, `CronShiftError`), its windowed endpoints are
served by ``warm_tick`` instead: one cron in all, at the cost of one short CPU call a minute.

**Edge crons and the cold start.** The crons are fixed at deploy time, from the cold-start
prior (`SCHEDULE_MEASURED`: `floodway.core.priors.COLD_START_PRIOR_S`) and rounded out to
whole minutes; the bodies run with the measured cold start raised to at least what the
schedule assumed (`edge_measured`), so the window is already warm by `desired()`'s reckoning
when its start cron fires. If the measured cold start exceeds the prior, a window-only
endpoint gets its floor (measured - prior) late: raise ``Window.lead_s`` to cover it, or set
``predictive=True`` (the tick uses the measured one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from floodway.core.priors import COLD_START_PRIOR_S
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.warmers.schedule import CronShiftError, autoscaler_crons, lead_total_s
from floodway.warmers.target import MINUTE_S, Measured

log = logging.getLogger(__name__)

TICK_NAME = "warm_tick"
CRON_PREFIX = "warm_cron_"
TICK_CRON = "* * * * *"
# Distinct edge expressions an app may use before its windows move to warm_tick.
MAX_WINDOW_CRONS = 4
# The cold start the edge crons are placed with at deploy time: the prior.
SCHEDULE_MEASURED = Measured(cold_start_s=COLD_START_PRIOR_S)


@dataclass(frozen=True)
class WarmerSpec:
    """One generated warmer: the function `name`, fired at each match of `cron` in
    `timezone`, re-applying the targets of `endpoints` (of each of its lanes, for an
    endpoint with `Route.lanes`: `apply.units_of`). `edges`: which window edges it
    serves, as ``"<endpoint>:<start|end>"`` (empty for the tick)."""

    name: str
    cron: str
    timezone: str
    endpoints: tuple[str, ...]
    edges: tuple[str, ...] = ()


def warmer_plan(fw_app: App, *, max_window_crons: int = MAX_WINDOW_CRONS) -> list[WarmerSpec]:
    """The warmers `fw_app` needs (see the module doc): edge crons, then the tick, if any."""
    by_expr: dict[tuple[str, str], dict[str, list[str]]] = {}
    tick: list[str] = [ep.name for ep in fw_app if ep.warm.predictive]
    for ep in fw_app:
        try:
            calls = [c for w in ep.warm.windows for c in autoscaler_crons(w, SCHEDULE_MEASURED)]
        except CronShiftError as e:
            log.warning("endpoint %s: a window edge is not a crontab line (%s); the "
                        "%s function serves it every minute", ep.name, e, TICK_NAME)
            tick.append(ep.name)
            continue
        for c in calls:
            eps = by_expr.setdefault((c.cron, c.timezone), {})
            eps.setdefault(ep.name, []).append(c.edge)
    windowed = [ep.name for ep in fw_app if ep.warm.windows]
    if len(by_expr) > max_window_crons:
        log.warning("%d distinct window edge crons exceed %d: %s serves %s every minute "
                    "instead", len(by_expr), max_window_crons, TICK_NAME, ", ".join(windowed))
        by_expr, tick = {}, [*tick, *windowed]
    specs = [WarmerSpec(f"{CRON_PREFIX}{i}", cron, tz, tuple(eps),
                        tuple(f"{ep}:{edge}" for ep, edges in eps.items()
                              for edge in dict.fromkeys(edges)))
             for i, ((cron, tz), eps) in enumerate(by_expr.items())]
    tick = [ep.name for ep in fw_app if ep.name in set(tick)]     # app order, no repeats
    if tick:
        specs.append(WarmerSpec(TICK_NAME, TICK_CRON, "UTC", tuple(tick)))
    return specs


def edge_measured(ep: Endpoint, measured: Measured) -> Measured:
    """`measured` with the cold start raised so that every window of `ep` is warm by the
    time its start cron fires (the crons were placed with `SCHEDULE_MEASURED`, rounded out to
    whole minutes): a container is then ready at most a minute early, never late."""
    need = measured.cold_start_s
    for w in ep.warm.windows:
        offset_s = np.ceil(lead_total_s(w, SCHEDULE_MEASURED) / MINUTE_S - 1e-9) * MINUTE_S
        need = max(need, float(offset_s) - float(w.lead_s))
    return Measured(need, measured.service_s, measured.concurrency)


__all__ = ["CRON_PREFIX", "MAX_WINDOW_CRONS", "SCHEDULE_MEASURED", "TICK_CRON", "TICK_NAME",
           "WarmerSpec", "edge_measured", "warmer_plan"]
