"""Warm pools on Modal: scheduled warmers that re-apply `desired()` through the autoscaler.

    plan = warmer_plan(fw_app)             # -> [WarmerSpec(name, cron, timezone, endpoints)]
    body = warmer_function(fw_app, spec, classes)   # the zero-argument Modal function body
    recorder = ArrivalRecorder(app_name, kv)         # the router's `on_arrival` hook
    applied = deploy_and_apply(module_app, fw_app)   # `floodway deploy APP`

**What is generated** (`to_modal` registers each `WarmerSpec` as a CPU Modal function with
``schedule=modal.Cron(spec.cron, timezone=spec.timezone)``):

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

**Every body does the same** (`run_warmer`): for each of its endpoints, read the measured cold
start (the ``floodway-stats`` Dict the GPU class's enter hook writes, as the router reads it),
the per-minute history (predictive endpoints only, from the ``floodway-traffic`` Dict) and the
policy state (``floodway-warm``, JSON via `PolicyState.to_dict`), compute
``desired(now, history, ep.warm, measured, state)``, and call the autoscaler only when the
settings differ from the last ones applied (kept in ``floodway-warm``), or those are older
than `REAPPLY_S`. A cron body never applies its `CronCall`'s number blindly: windows may
overlap, and the config floor and the predictive policy add to it.

What is applied (`autoscaler_settings`): ``min_containers`` = the target's floor,
``scaledown_window`` = its scaledown window, and ``buffer_containers`` = the config's buffer
(capped so floor + buffer <= ``max_containers``) at all times: Modal itself keeps the buffer
only while the function is active (https://modal.com/docs/guide/scale), with no lag, so
passing `desired`'s 0-when-idle would only delay the buffer by a warmer period after a burst
starts.

The call is ``Cls().update_autoscaler(min_containers=, buffer_containers=,
scaledown_window=)`` on the endpoint's class: unspecified settings keep their value, and a
later deploy of the app resets all of them to the decorator's static values
(https://modal.com/docs/reference/modal.Cls, ``update_autoscaler``). Hence `REAPPLY_S` (a
plain ``modal deploy`` is undone within it by a running tick) and `deploy_and_apply`, which
re-applies right after deploying. In modal 1.6 the Cls method goes through the service
function's ``update_autoscaler``, which warns that it is deprecated in favour of
``Function.autoscaler.update`` (Cls has no such namespace yet): a log line, not an error.

**Edge crons and the cold start.** The crons are fixed at deploy time, from the cold-start
prior `SCHEDULE_MEASURED` (30 s) and rounded out to whole minutes; the bodies run with the
measured cold start raised to at least what the schedule assumed (`edge_measured`), so the
window is already warm by `desired()`'s reckoning when its start cron fires. If the measured
cold start exceeds the prior, a window-only endpoint gets its floor (measured - prior) late:
raise ``Window.lead_s`` to cover it, or set ``predictive=True`` (the tick uses the measured one).

**Traffic history on Modal** (`ArrivalRecorder`): each router container counts user arrivals
per endpoint and minute in memory and writes its own key, ``("arrivals", app, endpoint,
router_id)`` -> ``{epoch minute: count}`` (its last `HISTORY_MINUTES` minutes), at most once
per `FLUSH_S` and only after new arrivals. One writer per key: routers never race, and a
rewrite of the current minute replaces its earlier count, never adds to it (no double count).
Readers (`scan_traffic`) sum every router's key for the endpoint; ``warm_tick`` deletes keys
whose newest minute is older than `HISTORY_MINUTES` (routers that went away). Warm-up
inferences and probes never pass through the hook (it is called for ``POST /v1/<endpoint>``
and ``/jobs`` only, after admission).

Modal is imported only by the functions that talk to Modal; the rest runs anywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.schedule import CronShiftError, autoscaler_crons, lead_total_s
from floodway.warmers.target import (
    COLD_START_PRIOR_S,
    MINUTE_S,
    History,
    Measured,
    PolicyState,
    WarmTarget,
    desired,
    minute_of,
)

log = logging.getLogger(__name__)

TRAFFIC_DICT = "floodway-traffic"
WARM_DICT = "floodway-warm"
STATS_DICT = "floodway-stats"      # written by the GPU class (modal_router.record_cold_start)
TICK_NAME = "warm_tick"
CRON_PREFIX = "warm_cron_"
TICK_CRON = "* * * * *"
# Distinct edge expressions an app may use before its windows move to warm_tick.
MAX_WINDOW_CRONS = 4
# Minutes of history kept per router key and read by the warmers: one day, which covers the
# predictive policy's 4-hour idle-time histogram range several times over.
HISTORY_MINUTES = 1440
# Seconds between a router's writes of its counts (and the most an arrival waits to be seen).
FLUSH_S = 30.0
# Seconds after which unchanged settings are applied again (undoes a plain `modal deploy`).
REAPPLY_S = 600.0
# Seconds one warmer call may run on Modal (a few Dict reads and one autoscaler call each).
WARMER_TIMEOUT_S = 120
# The cold start the edge crons are placed with at deploy time: the router's prior.
SCHEDULE_MEASURED = Measured(cold_start_s=COLD_START_PRIOR_S)
# The predictive policy knows it runs again a minute later (warm_tick's cron): a pre-warm
# due before then is asked for now.
TICK_PARAMS = PredictiveParams(tick_s=60.0)
# Scheduling and snapshot restore, which a container cannot time itself (as the router adds).
BOOT_S = 5.0


# ---------------------------------------------------------------- stores

class Store(Protocol):
    """The slice of a synchronous `modal.Dict` the warmers use (a `MemoryStore` in tests)."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def put(self, key: Any, value: Any) -> Any: ...

    def pop(self, key: Any) -> Any: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...


class MemoryStore:
    """A `Store` over a dict (tests, offline runs); `data` is the dict, shared if given
    (e.g. with a `MemoryKV` that a recorder writes through)."""

    def __init__(self, data: dict | None = None):
        self.data = {} if data is None else data

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def pop(self, key: Any) -> Any:
        return self.data.pop(key)

    def items(self) -> list[tuple[Any, Any]]:
        return list(self.data.items())


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


# (endpoint name, settings) -> anything; settings are update_autoscaler's keyword arguments.
Autoscale = Callable[[str, dict[str, int]], Any]


def class_autoscale(classes: Mapping[str, Any]) -> Autoscale:
    """`Autoscale` through the app's own classes (inside a container of the deployed app,
    where they are hydrated): ``classes[endpoint]().update_autoscaler(**settings)``."""
    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return classes[endpoint]().update_autoscaler(**settings)
    return call


def deployed_autoscale(app_name: str) -> Autoscale:
    """`Autoscale` through the deployed app, looked up by name (from outside Modal):
    ``modal.Cls.from_name(app_name, ClassName)().update_autoscaler(**settings)``."""
    import modal

    from floodway.deploy.modal_objects import class_name

    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return modal.Cls.from_name(app_name, class_name(endpoint))().update_autoscaler(
            **settings)
    return call


# ---------------------------------------------------------------- the plan

@dataclass(frozen=True)
class WarmerSpec:
    """One generated warmer: the function `name`, fired at each match of `cron` in
    `timezone`, re-applying the targets of `endpoints`. `edges`: which window edges it serves,
    as ``"<endpoint>:<start|end>"`` (empty for the tick)."""

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


# ---------------------------------------------------------------- inputs

def measured_of(ep: Endpoint, stats: Store) -> Measured:
    """The endpoint's measurements: cold start = `BOOT_S` + the slowest recent sample in
    ``stats["cold:<endpoint>"]`` (the router's estimate), else the 30 s prior. Service time
    and concurrency from the batch time a router measured (``stats["service:<endpoint>"]``,
    `Measured.from_batches`, as the local pool sizes), else the prior service time at the
    route's slots per container."""
    samples = stats.get(f"cold:{ep.name}") or []
    cold = BOOT_S + max(float(s["init_s"]) for s in samples) if samples else COLD_START_PRIOR_S
    svc = stats.get(f"service:{ep.name}")
    if svc:
        return Measured.from_batches(cold, float(svc["batch_s"]), int(svc["batch_rows"]),
                                     float(svc.get("rows_per_request", 1.0)))
    return Measured(cold_start_s=cold, concurrency=float(ep.route.max_inflight_per_container))


def edge_measured(ep: Endpoint, measured: Measured) -> Measured:
    """`measured` with the cold start raised so that every window of `ep` is warm by the
    time its start cron fires (the crons were placed with `SCHEDULE_MEASURED`, rounded out to
    whole minutes): a container is then ready at most a minute early, never late."""
    need = measured.cold_start_s
    for w in ep.warm.windows:
        offset_s = np.ceil(lead_total_s(w, SCHEDULE_MEASURED) / MINUTE_S - 1e-9) * MINUTE_S
        need = max(need, float(offset_s) - float(w.lead_s))
    return Measured(need, measured.service_s, measured.concurrency)


def _arrivals_key(key: Any, app: str) -> str | None:
    """The endpoint of an arrivals key of `app`, else None."""
    if isinstance(key, tuple) and len(key) == 4 and key[0] == "arrivals" and key[1] == app:
        return key[2]
    return None


def scan_traffic(traffic: Store, app: str, endpoints: Sequence[str], now_s: float,
                 minutes: int = HISTORY_MINUTES) -> tuple[dict[str, History], list[Any]]:
    """One pass over the traffic Dict: each of `endpoints` -> its `History` of the last
    `minutes` minutes ending with the minute of `now_s` (every router's counts summed), and
    the keys of `app` whose newest minute is older than that (routers gone for a day)."""
    end = minute_of(now_s)
    start = end - minutes + 1
    counts = {name: np.zeros(minutes, dtype=np.int64) for name in endpoints}
    stale: list[Any] = []
    for key, value in traffic.items():
        ep = _arrivals_key(key, app)
        if ep is None:
            continue
        if not value or max(value) < start:
            stale.append(key)
        if ep in counts:
            for m, c in value.items():
                if start <= m <= end:
                    counts[ep][m - start] += c
    return {name: History(start, arr) for name, arr in counts.items()}, stale


# ---------------------------------------------------------------- applying

def autoscaler_settings(target: WarmTarget, ep: Endpoint) -> dict[str, int]:
    """``update_autoscaler`` keyword arguments for `target` (see the module doc for why the
    buffer is the config's): min_containers, buffer_containers, scaledown_window (s)."""
    floor = target.min_containers
    return {"min_containers": floor,
            "buffer_containers": max(0, min(ep.warm.buffer_containers,
                                            ep.warm.container_cap - floor)),
            "scaledown_window": round(target.scaledown_window_s)}


def _reason(target: WarmTarget, settings: dict[str, int]) -> str:
    """`target.reason` with its buffer part told as Modal applies it."""
    floor_part, _, rest = target.reason.partition("; buffer ")
    scaledown_part = rest.rpartition("; scaledown ")[2]
    return (f"{floor_part}; buffer {settings['buffer_containers']}: kept by Modal while "
            f"active; scaledown {scaledown_part}")


@dataclass(frozen=True)
class Applied:
    """What a warmer decided for one endpoint: the `settings` it wants, whether it `called`
    the autoscaler (False: unchanged since the last call, or failed), why, and any `error`."""

    endpoint: str
    settings: dict[str, int]
    called: bool
    reason: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def apply_target(ep: Endpoint, app: str, now_s: float, *, autoscale: Autoscale, stores: Stores,
                 history: History | None = None, force: bool = False) -> Applied:
    """Compute `ep`'s target at `now_s` and apply it if it changed (see the module doc).

    `history`: the endpoint's arrivals (None: read them when the endpoint is predictive, else
    none are needed). `force`: call the autoscaler even when unchanged (after a deploy).
    Raises what the stores or `autoscale` raise; the state and the last settings are stored
    only after a successful call.
    """
    measured = edge_measured(ep, measured_of(ep, stores.stats))
    if history is None:
        history = (scan_traffic(stores.traffic, app, [ep.name], now_s)[0][ep.name]
                   if ep.warm.predictive else History.empty(now_s))
    state_key, applied_key = ("state", app, ep.name), ("applied", app, ep.name)
    raw_state = stores.warm.get(state_key)
    state = PolicyState.from_dict(json.loads(raw_state) if raw_state else None)
    target, new_state = desired(now_s, history, ep.warm, measured, state, params=TICK_PARAMS)
    settings = autoscaler_settings(target, ep)
    reason = _reason(target, settings)
    last = stores.warm.get(applied_key) or {}
    fresh = now_s - float(last.get("at", -np.inf)) < REAPPLY_S
    called = force or last.get("settings") != settings or not fresh
    if called:
        autoscale(ep.name, dict(settings))
        stores.warm.put(applied_key, {"settings": settings, "at": now_s, "reason": reason})
    state_json = json.dumps(new_state.to_dict(), sort_keys=True)
    if state_json != raw_state:
        stores.warm.put(state_key, state_json)
    return Applied(ep.name, settings, called, reason)


def run_warmer(fw_app: App, endpoints: Sequence[str], *, autoscale: Autoscale, stores: Stores,
               now_s: float | None = None, force: bool = False,
               prune: bool = False) -> list[Applied]:
    """The body of every warmer: `apply_target` for each of `endpoints` (unknown names are
    skipped), reading the traffic Dict once for all predictive ones. One endpoint's failure is
    logged and reported in its `Applied.error`; the others still run. `prune`: also delete
    stale router keys (the tick does). `now_s`: unix seconds (default: the clock)."""
    now_s = time.time() if now_s is None else now_s
    eps = [fw_app.endpoints[n] for n in endpoints if n in fw_app.endpoints]
    predictive = [ep.name for ep in eps if ep.warm.predictive]
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
                                    history=histories.get(ep.name), force=force))
        except Exception as e:  # noqa: BLE001 - one endpoint must not stop the others
            log.warning("warmer: endpoint %s: %s: %s", ep.name, type(e).__name__, e)
            out.append(Applied(ep.name, {}, False, "", f"{type(e).__name__}: {e}"))
    return out


def warmer_function(fw_app: App, spec: WarmerSpec, classes: Mapping[str, Any],
                    ) -> Callable[[], list[dict]]:
    """The body of the Modal function for `spec`: `run_warmer` over `spec.endpoints` with the
    Modal Dicts (`modal_stores`) and the app's classes (`class_autoscale`), both looked up
    when it runs. Returns one `Applied.as_dict` per endpoint (shown in Modal's logs)."""
    prune = spec.name == TICK_NAME

    def warm() -> list[dict]:
        applied = run_warmer(fw_app, spec.endpoints, autoscale=class_autoscale(classes),
                             stores=modal_stores(), prune=prune)
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


# ---------------------------------------------------------------- the router's history

class ArrivalRecorder:
    """Per-minute user arrivals of one router container, written to the traffic Dict.

    `record(endpoint, now_s)` is the router's ``on_arrival`` hook: an in-memory add that, if no
    write is pending, schedules one `flush_s` later on the running event loop (none running:
    nothing is scheduled; call `flush`). `kv`: an async `KV` (``ModalDictKV(TRAFFIC_DICT)``
    on Modal, `MemoryKV` in tests). `router_id`: this container's key part (default: random).
    Never raises: a failed write is logged and retried with the next one.
    """

    def __init__(self, app_name: str, kv: Any, *, router_id: str | None = None,
                 flush_s: float = FLUSH_S, minutes: int = HISTORY_MINUTES):
        self.app_name, self.kv, self.flush_s, self.minutes = app_name, kv, flush_s, minutes
        self.router_id = router_id or uuid.uuid4().hex[:12]
        self._counts: dict[str, dict[int, int]] = {}
        self._dirty: set[str] = set()
        self._timer: asyncio.Task | None = None
        self.writes = 0

    def key(self, endpoint: str) -> tuple[str, str, str, str]:
        return ("arrivals", self.app_name, endpoint, self.router_id)

    def counts(self, endpoint: str) -> dict[int, int]:
        """This router's counts of `endpoint`: epoch minute -> arrivals (a copy)."""
        return dict(self._counts.get(endpoint, {}))

    def record(self, endpoint: str, now_s: float) -> None:
        counts = self._counts.setdefault(endpoint, {})
        m = minute_of(now_s)
        counts[m] = counts.get(m, 0) + 1
        self._dirty.add(endpoint)
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None and not self._timer.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        try:
            await asyncio.sleep(self.flush_s)
            await self.flush()
        finally:
            self._timer = None
            if self._dirty:             # arrivals during the write, or a failed write
                self._schedule()

    async def flush(self) -> int:
        """Write the counts of every endpoint with new arrivals (its minutes older than
        `minutes` before its newest are dropped first); returns the keys written."""
        dirty, self._dirty = self._dirty, set()
        written = 0
        for ep in sorted(dirty):
            counts = self._counts[ep]
            cut = max(counts) - self.minutes
            for m in [m for m in counts if m <= cut]:
                del counts[m]
            try:
                await self.kv.put(self.key(ep), dict(counts))
                written += 1
            except Exception as e:  # noqa: BLE001 - history is advisory; retry later
                self._dirty.add(ep)
                log.warning("could not write the arrivals of %s: %s: %s", ep,
                            type(e).__name__, e)
        self.writes += written
        return written


# ---------------------------------------------------------------- floodway deploy

def credentials_configured(get: Callable[[str], Any] | None = None) -> bool:
    """Whether Modal credentials are configured: a token id and secret, or an OAuth refresh
    token, client id and secret, from ``MODAL_*`` variables or the active ``~/.modal.toml``
    profile (modal.config's resolution). `get`: a config lookup (default Modal's)."""
    if get is None:
        import modal.config

        get = modal.config.config.get
    token = get("token_id") and get("token_secret")
    oauth = get("oauth_refresh_token") and get("oauth_client_id") and get("oauth_client_secret")
    return bool(token or oauth)


def modal_deploy(module_app: Any) -> None:
    """Deploy `module_app` as ``modal deploy`` does, with Modal's output shown
    (``App.deploy()``, https://modal.com/docs/reference/modal.App#deploy)."""
    import modal

    with modal.enable_output():
        module_app.deploy()


def deploy_and_apply(module_app: Any, fw_app: App, *, now_s: float | None = None
                     ) -> list[Applied]:
    """`floodway deploy`: deploy `module_app`, then apply every endpoint's current target
    (a deploy resets the autoscaler to the decorator's values). Raises FloodwayError before
    anything is sent when no Modal credentials are configured. The deploy, the autoscaler
    calls and the stores are this module's `modal_deploy`, `deployed_autoscale` and
    `modal_stores`, looked up when called."""
    if not credentials_configured():
        raise FloodwayError("no Modal credentials: run `modal token new`, or set "
                            "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET")
    modal_deploy(module_app)
    return run_warmer(fw_app, [ep.name for ep in fw_app],
                      autoscale=deployed_autoscale(module_app.name or fw_app.name),
                      stores=modal_stores(), now_s=now_s, force=True)


__all__ = [
    "Applied", "ArrivalRecorder", "MemoryStore", "Store", "Stores", "WarmerSpec",
    "apply_target", "autoscaler_settings", "class_autoscale", "credentials_configured",
    "deploy_and_apply", "deployed_autoscale", "edge_measured", "measured_of", "modal_deploy",
    "modal_stores", "run_warmer", "scan_traffic", "summary_line", "warmer_function",
    "warmer_plan",
]
