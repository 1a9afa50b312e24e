"""What the warmers apply on Modal: `desired()` re-applied through the autoscaler.

    body = warmer_function(fw_app, spec, classes)   # the zero-argument Modal function body
    applied = run_warmer(fw_app, endpoints, autoscale=..., stores=...)

**What is generated**: `to_modal` registers each `WarmerSpec` of `warmer_plan` as a CPU Modal
function with ``schedule=modal.Cron(spec.cron, timezone=spec.timezone)``: ``warm_cron_<i>``
at the window edges, ``warm_tick`` every minute for predictive endpoints (and for windows
whose edges do not fit a few crons: `floodway.modal.warmers.plan`).

**Every body does the same** (`run_warmer`): for each unit of its endpoints (the endpoint,
or each lane of one with `Route.lanes`: a Modal class of its own with the lane's
``min_containers`` / ``max_containers``, `floodway.functions.lanes.served_units`), read the
measured cold start and batch time, or a streaming endpoint's generation fits (the
``floodway-stats`` Dict the GPU classes and routers write, `measured_of`), the unit's
per-minute history (predictive endpoints only, from the ``floodway-traffic`` Dict, where the
routers count each request under the unit it took: `floodway.modal.traffic`) and the
policy state (``floodway-warm``, JSON via `PolicyState.to_dict`) and the backlog, compute
``desired(now, history, ep.warm, measured, state, backlog=...)``, and call the unit's class's
autoscaler only when the settings differ from the last ones applied (kept in
``floodway-warm``), or those are older than `REAPPLY_S`. A cron body never applies its
`CronCall`'s number blindly: windows may overlap, and the config floor and the predictive
policy add to it.

The backlog (`class_backlog`): where Modal's job queue keeps its work. A job is a call of
``run_job``, a CPU function with many inputs per container, which sends the job's rows to
the endpoint's class at once (``predict.remote.aio`` per row): so a backlog of jobs waits in
the class's input queue, whose size is its ``get_current_stats().backlog`` (rows, sync rows
too). As demand (`floodway.warmers.target.backlog_part`) it asks for the containers that drain
it within a cold start, up to ``max_containers``.

What is applied (`autoscaler_settings`): ``min_containers`` = the target's floor,
``scaledown_window`` = its scaledown window, and ``buffer_containers`` = the config's buffer
(capped so floor + buffer <= ``max_containers``) at all times: Modal itself keeps the buffer
only while the function is active (https://modal.com/docs/guide/scale), with no lag, so
passing `desired`'s 0-when-idle would only delay the buffer by a warmer period after a burst
starts.

The autoscaler is updated through `floodway.modal.autoscaler.update_class_autoscaler`. A
later deploy of the app resets it to the decorator's static values. Hence `REAPPLY_S` (a
plain ``modal deploy`` is undone within it by a running tick) and
`floodway.modal.deploy.deploy_and_apply`, which checks the credentials and the router's
keys Secret, deploys, and re-applies at once.

Modal is imported only by the functions that talk to Modal; the rest runs anywhere.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from floodway.core.estimators import ServiceEstimator, measured
from floodway.core.generation import measured_generation
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.functions.lanes import served_units
from floodway.modal import autoscaler
from floodway.modal.autoscaler import Autoscale
from floodway.modal.contract import max_sequences
from floodway.modal.kv import Store
from floodway.modal.stats import (
    STATS_DICT,
    cold_estimator,
    cold_key,
    generation_estimator,
    generation_key,
    service_key,
)
from floodway.modal.traffic import TRAFFIC_DICT, scan_traffic
from floodway.modal.warmers.plan import TICK_NAME, WarmerSpec, edge_measured
from floodway.routers.lanes import lane_keys
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.target import History, Measured, PolicyState, WarmTarget, desired

log = logging.getLogger(__name__)

WARM_DICT = "floodway-warm"
# Seconds after which unchanged settings are applied again (undoes a plain `modal deploy`).
REAPPLY_S = 600.0
# Seconds one warmer call may run on Modal (a few Dict reads and one autoscaler call each).
WARMER_TIMEOUT_S = 120
# The predictive policy knows it runs again a minute later (warm_tick's cron): a pre-warm
# due before then is asked for now.
TICK_PARAMS = PredictiveParams(tick_s=60.0)


@dataclass(frozen=True)
class Stores:
    """Where the warmers read and write: policy state and last settings (`warm`), the
    routers' arrival counts (`traffic`), the GPU classes' cold-start samples (`stats`)."""

    warm: Store
    traffic: Store
    stats: Store


def modal_stores() -> Stores:
    """The three Modal Dicts (created on first use; entries live 7 days after their last
    read or write, https://modal.com/docs/reference/modal.Dict)."""
    import modal

    def d(name: str) -> Any:
        return modal.Dict.from_name(name, create_if_missing=True)

    return Stores(warm=d(WARM_DICT), traffic=d(TRAFFIC_DICT), stats=d(STATS_DICT))


def measured_of(ep: Endpoint, stats: Store) -> Measured:
    """The endpoint's measurements, as the router and the local pool estimate them: the cold
    start from the ``cold:<endpoint>`` samples (`cold_estimator`: `BOOT_S` + the slowest, or
    the prior). A streaming endpoint: its containers' tokens/s with all ``max_sequences``
    sequences running and a request's tokens, from the generation fits a router published
    (``generation:<endpoint>``, `generation_estimator`; the priors without one), through
    the local pool's `floodway.core.generation.measured_generation`. Another: the service
    time and concurrency from the batch time a router measured of its unit
    (``service:<unit>``: the endpoint, or the lane `ep` serves; `Measured.from_batches`),
    else the prior batch time at ``max_batch_rows`` per batch
    (`floodway.core.estimators.measured`). The cold start is the endpoint's: its lanes run
    one build."""
    cold = cold_estimator(stats.get(cold_key(ep.name)))
    if ep.streaming:
        gen = generation_estimator(stats.get(generation_key(ep.name)))
        return measured_generation(cold, gen, max_sequences(ep))
    svc = stats.get(service_key(ep.unit))
    if svc:
        return Measured.from_batches(cold.estimate_s(), float(svc["batch_s"]),
                                     int(svc["batch_rows"]),
                                     float(svc.get("rows_per_request", 1.0)))
    return measured(cold, ServiceEstimator(), ep.batching.max_batch_rows)


# ---------------------------------------------------------------- applying

def capped_buffer(ep: Endpoint, floor: int) -> int:
    """The config's buffer, capped so that `floor` + buffer <= the container cap (Modal would
    otherwise be asked for more idle containers than ``max_containers`` allows): what the
    deploy's static settings and every warmer apply."""
    return max(0, min(ep.warm.buffer_containers, ep.warm.container_cap - floor))


def autoscaler_settings(target: WarmTarget, ep: Endpoint) -> dict[str, int]:
    """The autoscaler's keyword arguments for `target` (see the module doc for why the
    buffer is the config's): min_containers, buffer_containers, scaledown_window (s)."""
    floor = target.min_containers
    return {"min_containers": floor,
            "buffer_containers": capped_buffer(ep, floor),
            "scaledown_window": round(target.scaledown_window_s)}


def _reason(target: WarmTarget, settings: dict[str, int]) -> str:
    """`target.reason` with its buffer part told as Modal applies it."""
    floor_part, _, rest = target.reason.partition("; buffer ")
    scaledown_part = rest.rpartition("; scaledown ")[2]
    return (f"{floor_part}; buffer {settings['buffer_containers']}: kept by Modal while "
            f"active; scaledown {scaledown_part}")


@dataclass(frozen=True)
class Applied:
    """What a warmer decided for one unit (`endpoint`: an endpoint, or a lane's key
    ``"embed:short"``, whose class it sets): the `settings` it wants, whether it `called`
    the autoscaler (False: unchanged since the last call, or failed), why, and any `error`."""

    endpoint: str
    settings: dict[str, int]
    called: bool
    reason: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def class_backlog(classes: Mapping[str, Any]) -> Callable[[Endpoint], int]:
    """endpoint, or lane of one -> rows waiting in its unit's class's input queue (see the
    module doc; `classes` keyed by unit): the stats of ``stream`` for a streaming endpoint,
    else of ``predict``, as the router reads them (`floodway.modal.router.backend`). Raises
    what Modal raises."""
    def backlog(ep: Endpoint) -> int:
        obj = classes[ep.unit]()
        method = obj.stream if ep.streaming else obj.predict
        return int(method.get_current_stats().backlog)
    return backlog


def backlog_requests(ep: Endpoint, stats: Store, rows: int) -> float:
    """`rows` queued as the requests `measured_of` counts: over the rows per request a
    router measured (``service:<unit>``; 1 without, and for a streaming endpoint)."""
    svc = None if ep.streaming else stats.get(service_key(ep.unit))
    return rows / max(float((svc or {}).get("rows_per_request", 1.0)), 1e-9)


def apply_target(ep: Endpoint, app: str, now_s: float, *, autoscale: Autoscale, stores: Stores,
                 history: History | None = None, force: bool = False,
                 backlog_rows: int = 0) -> Applied:
    """Compute `ep`'s target at `now_s` and apply it to its class if it changed (see the
    module doc). `ep`: a unit (`served_units`): an endpoint, or one lane of it, whose
    arrivals, policy state and last settings are kept under its unit key (``embed:short``).

    `history`: the unit's arrivals (None: read them when the endpoint is predictive, else
    none are needed). `force`: call the autoscaler even when unchanged (after a deploy).
    `backlog_rows`: rows waiting in the class's queue (`class_backlog`), counted as demand.
    Raises what the stores or `autoscale` raise; the state and the last settings are stored
    only after a successful call.
    """
    measured = edge_measured(ep, measured_of(ep, stores.stats))
    if history is None:
        history = (scan_traffic(stores.traffic, app, [ep.unit], now_s)[0][ep.unit]
                   if ep.warm.predictive else History.empty(now_s))
    state_key, applied_key = ("state", app, ep.unit), ("applied", app, ep.unit)
    raw_state = stores.warm.get(state_key)
    state = PolicyState.from_dict(json.loads(raw_state) if raw_state else None)
    target, new_state = desired(now_s, history, ep.warm, measured, state, params=TICK_PARAMS,
                                backlog=backlog_requests(ep, stores.stats, backlog_rows))
    settings = autoscaler_settings(target, ep)
    reason = _reason(target, settings)
    last = stores.warm.get(applied_key) or {}
    fresh = now_s - float(last.get("at", -np.inf)) < REAPPLY_S
    called = force or last.get("settings") != settings or not fresh
    if called:
        autoscale(ep.unit, dict(settings))
        stores.warm.put(applied_key, {"settings": settings, "at": now_s, "reason": reason})
    state_json = json.dumps(new_state.to_dict(), sort_keys=True)
    if state_json != raw_state:
        stores.warm.put(state_key, state_json)
    return Applied(ep.unit, settings, called, reason)


def run_warmer(fw_app: App, endpoints: Sequence[str], *, autoscale: Autoscale, stores: Stores,
               now_s: float | None = None, force: bool = False, prune: bool = False,
               backlog: Callable[[Endpoint], int] | None = None) -> list[Applied]:
    """The body of every warmer: `apply_target` for each unit of `endpoints` (`units_of`:
    an endpoint with lanes is applied lane by lane, each to its own class; unknown names
    are skipped), reading the traffic Dict once for all predictive ones. One unit's failure
    is logged and reported in its `Applied.error`; the others still run. `prune`: also delete
    stale router keys (the tick does). `now_s`: unix seconds (default: the clock).
    `backlog`: unit -> rows in its class's queue (`class_backlog`; None: none read); a failed
    read counts no backlog (logged), the target is still applied."""
    now_s = time.time() if now_s is None else now_s
    eps = units_of(fw_app, endpoints)
    predictive = [ep.unit for ep in eps if ep.warm.predictive]
    histories: dict[str, History] = {}
    if predictive or prune:
        histories, stale = scan_traffic(stores.traffic, fw_app.name, predictive, now_s)
        for key in stale if prune else ():
            try:
                stores.traffic.pop(key)
            except KeyError:
                pass                            # another warmer got there first
    out: list[Applied] = []
    for ep in eps:
        try:
            out.append(apply_target(ep, fw_app.name, now_s, autoscale=autoscale, stores=stores,
                                    history=histories.get(ep.unit), force=force,
                                    backlog_rows=_backlog_of(ep, backlog)))
        except Exception as e:  # noqa: BLE001 - one endpoint must not stop the others
            log.warning("warmer: endpoint %s: %s: %s", ep.unit, type(e).__name__, e)
            out.append(Applied(ep.unit, {}, False, "", f"{type(e).__name__}: {e}"))
    return out


def units_of(fw_app: App, names: Sequence[str]) -> list[Endpoint]:
    """The units (`floodway.functions.lanes.served_units`) `names` mean, in their order, each
    once: an endpoint without lanes itself, one with lanes each of its lanes (in lane order),
    a unit key (``"embed:short"``) that lane alone; unknown names are skipped."""
    units = served_units(fw_app)
    keys = [k for n in names for k in ([n] if n in units else lane_keys(units, n))]
    return [units[k] for k in dict.fromkeys(keys)]


def _backlog_of(ep: Endpoint, backlog: Callable[[Endpoint], int] | None) -> int:
    if backlog is None:
        return 0
    try:
        return max(0, int(backlog(ep)))
    except Exception as e:  # noqa: BLE001 - stats are advisory: the rest of the target holds
        log.warning("warmer: endpoint %s: backlog unknown: %s: %s", ep.unit, type(e).__name__, e)
        return 0


def warmer_function(fw_app: App, spec: WarmerSpec, classes: Mapping[str, Any],
                    ) -> Callable[[], list[dict]]:
    """The body of the Modal function for `spec`: `run_warmer` over `spec.endpoints` with the
    Modal Dicts (`modal_stores`) and the app's classes (`autoscaler.class_autoscale`), both
    looked up when it runs. Returns one `Applied.as_dict` per endpoint (shown in Modal's logs)."""
    prune = spec.name == TICK_NAME

    def warm() -> list[dict]:
        applied = run_warmer(fw_app, spec.endpoints,
                             autoscale=autoscaler.class_autoscale(classes),
                             stores=modal_stores(), prune=prune,
                             backlog=class_backlog(classes))
        for a in applied:
            print(f"{spec.name}: {summary_line(a)}", flush=True)
        return [a.as_dict() for a in applied]

    warm.__doc__ = (f"Re-apply the warm targets of {', '.join(spec.endpoints)} "
                    f"(fires at {spec.cron!r} {spec.timezone}).")
    return warm


def summary_line(a: Applied) -> str:
    """One line per endpoint, as `floodway deploy` and the warmers print it."""
    if a.error:
        return f"{a.endpoint}: error: {a.error}"
    s = a.settings
    verb = "applied" if a.called else "unchanged"
    return (f"{a.endpoint}: {verb} min_containers={s['min_containers']} "
            f"buffer_containers={s['buffer_containers']} "
            f"scaledown_window={s['scaledown_window']}s ({a.reason})")


__all__ = [
    "REAPPLY_S", "TICK_PARAMS", "WARM_DICT", "WARMER_TIMEOUT_S", "Applied", "Stores",
    "apply_target", "autoscaler_settings", "backlog_requests", "capped_buffer",
    "class_backlog", "measured_of", "modal_stores", "run_warmer", "summary_line", "units_of",
    "warmer_function",
]
