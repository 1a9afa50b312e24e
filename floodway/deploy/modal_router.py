"""The router's `Backend` on Modal: the same `decide()` as locally, fed by Modal's own counters.

    backend = ModalBackend(fw_app, classes)     # classes: endpoint name -> its modal.Cls
    make_asgi_app(fw_app, backend, jobs=ModalJobs(run_job), api_keys=router_api_keys())

Snapshot of one endpoint (`ModalBackend.snapshot`, synchronous and cheap):

- ``Function.get_current_stats()`` of the endpoint's class gives ``backlog`` (inputs waiting
  for a container) and ``num_total_runners`` (containers). A Cls has no public stats call;
  the method of an instance without parameters is bound to the class service function's id,
  so ``Cls().predict.get_current_stats.aio()`` is that function's stats (modal 1.6's
  ``Function.from_id`` documents that a Cls id supports ``get_current_stats``; fields as in
  https://modal.com/docs/sdk/js/latest/FunctionStats).
  It is a network call: its result is cached for `stats_ttl_s` and refreshed by a background
  task that `snapshot()` starts, so a request never waits on it. Before the first answer, the
  warm pool's ``min_containers`` stand in for the runners (Modal keeps those up).
- Each runner becomes a warm `ContainerView` with ``route.max_inflight_per_container`` slots;
  the router's own in-flight rows (sent, not yet answered) are spread evenly over them as
  backlog seconds and busy slots (a slot holds one batch of up to ``max_batch_rows`` rows).
- Modal's backlog counts as queued rows; queued requests are those rows over the mean rows
  per recent request. Our own queued rows are in both counts: conservative, never optimistic.
- Service time: `ServiceTime.fit` over the router's measured (rows, seconds) per request,
  round trip included (so it also covers Modal's queueing under load).
- Cold start: the GPU class's ``@modal.enter(snap=False)`` records its in-container start
  work in the ``floodway-stats`` `modal.Dict` (`record_cold_start`); the estimate is
  `BOOT_S` (scheduling and snapshot restore, which the container cannot see) plus the slowest
  recent sample. Without samples: `COLD_START_PRIOR_S` = 30 s, between a memory-snapshot
  restore and a full GPU cold start: Modal reports snapshots start 3-10x faster
  (https://modal.com/docs/guide/memory-snapshots), and a GPU model server takes about a
  minute to download, load and initialize from scratch versus about 10 s restored (NVIDIA
  Dynamo's snapshot docs, https://docs.nvidia.com/dynamo/dev/kubernetes/operations/
  cold-start-optimizations/dynamo-snapshot). Too high a guess only delays a spill_cold that
  the autoscaler does anyway; too low would make requests wait past their deadlines.

`start_cold` calls nothing: Modal's autoscaler starts containers by itself when inputs queue,
up to ``max_containers`` (https://modal.com/docs/guide/scale). The router only remembers the
start it asked for as a "starting" container until the stats show it or its cold start has
passed, so that one burst does not count on the same new capacity many times.

Known gaps: whether ``num_total_runners`` includes containers still booting is not
documented; they are all counted as warm. With ``min_containers=0`` and no runner, a sync
request whose deadline is shorter than the cold start is spilled to a job (which starts a
container) or shed: sync traffic alone starts nothing then.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import modal

from floodway.deploy.modal_jobs import ModalJobs
from floodway.deploy.modal_kv import KV, MemoryKV, ModalDictKV
from floodway.errors import EndpointError, FloodwayError, Unavailable
from floodway.functions.app import App
from floodway.routers.admission import API_KEYS_ENV, ApiKeys
from floodway.routers.decide import ContainerView, ServiceTime, Snapshot, _batches_s

log = logging.getLogger(__name__)

STATS_DICT = "floodway-stats"
PUBLIC_ROUTER_ENV = "FLOODWAY_PUBLIC_ROUTER"
# A per-row output of the GPU class that stands for "this item raised" (a bad item fails
# alone; raising would fail every row of its Modal batch): {ITEM_ERROR: "Type: message"}.
ITEM_ERROR = "__floodway_item_error__"
# One .remote round trip costs tens of ms on top of the model; the fit replaces this prior.
SERVICE_PRIOR = ServiceTime(per_row_s=0.005, per_batch_s=0.05)
COLD_START_PRIOR_S = 30.0
BOOT_S = 5.0
COLD_SAMPLES = 20             # cold-start samples kept per endpoint
COLD_REFRESH_S = 30.0         # how often the router re-reads them
LATENCY_SAMPLES = 64          # (rows, seconds) per endpoint for the service-time fit
# A gap this long between the snap=True and snap=False hooks means a snapshot restore.
RESTORE_GAP_S = 2.0
# Errors of the Modal client itself (not of the endpoint): the row may succeed on a retry.
TRANSIENT = (modal.exception.ConnectionError, modal.exception.ServiceError,
             modal.exception.InternalError, modal.exception.ResourceExhaustedError)
# A job's rows wait in Modal's queue with no client waiting; Modal's function timeout is
# the hard stop (JOB_TIMEOUT_S, set in to_modal), this the router-side one just below it.
JOB_TIMEOUT_S = 3600
JOB_ROWS_TIMEOUT_S = JOB_TIMEOUT_S - 60


def record_cold_start(endpoint: str, load_started: float, load_ended: float,
                      gpu_started: float, gpu_ended: float, *, kv: Any = None) -> float:
    """In a GPU container, from ``@modal.enter(snap=False)``: append this start to the
    endpoint's samples in the ``floodway-stats`` Dict (key ``cold:<endpoint>``, the last
    `COLD_SAMPLES` of ``{"init_s", "at"}``). Arguments are ``time.time()`` stamps of both
    enter hooks. Returns the init seconds recorded.

    A start restored from a memory snapshot ran only the snap=False hook now (the snap=True
    one ran at deploy time: a long gap between them); otherwise both count. `kv`: a sync
    mapping-like with ``get``/``put`` (default: the Modal Dict). Never raises: the samples
    are advisory and must not fail a container start.
    """
    restored = gpu_started - load_ended > RESTORE_GAP_S
    init_s = (gpu_ended - gpu_started) if restored else (gpu_ended - load_started)
    try:
        d = kv if kv is not None else modal.Dict.from_name(STATS_DICT, create_if_missing=True)
        key = f"cold:{endpoint}"
        # Read-modify-write: two containers starting together may drop one sample; fine.
        samples = list(d.get(key) or [])[-(COLD_SAMPLES - 1):]
        d.put(key, [*samples, {"init_s": round(init_s, 3), "at": gpu_ended}])
    except Exception as e:  # noqa: BLE001 - see docstring
        log.warning("could not record the cold start of %s: %s: %s", endpoint,
                    type(e).__name__, e)
    return init_s


def router_api_keys(environ: Mapping[str, str] | None = None) -> ApiKeys:
    """The router's API keys, from ``FLOODWAY_API_KEYS`` (on Modal: a Secret given to
    `to_modal` as ``router_secrets``). A Modal web endpoint is reachable by anyone with its
    URL, so no keys is refused (FloodwayError) unless ``FLOODWAY_PUBLIC_ROUTER=1`` says the
    endpoint is meant to be public."""
    env = os.environ if environ is None else environ
    keys = ApiKeys.from_env(environ=env)
    if not keys and env.get(PUBLIC_ROUTER_ENV) != "1":
        raise FloodwayError(f"the Modal router is a public web endpoint: set {API_KEYS_ENV} "
                            f"(e.g. from a modal.Secret passed as router_secrets) or "
                            f"{PUBLIC_ROUTER_ENV}=1 to serve without authentication")
    return keys


@dataclass
class _Endpoint:
    """What the router knows about one endpoint (all times on the backend's clock)."""

    runners: int | None = None          # None: no stats yet
    backlog: int = 0
    stats_at: float | None = None
    tried_at: float = -math.inf
    refreshing: bool = False
    error: str | None = None
    cold_samples: list[float] = field(default_factory=list)
    cold_read_at: float = -math.inf
    cold_asked: list[float] = field(default_factory=list)
    inflight_rows: int = 0
    inflight: Counter = field(default_factory=Counter)     # tenant -> requests in flight
    samples: deque = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    request_rows: deque = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))


class ModalBackend:
    """The http `Backend` over Modal classes (see the module doc).

    `classes`: endpoint name -> its Modal class (``Cls().predict`` is the `@modal.batched`
    method taking one row per call). `clock`: monotonic seconds. `stats_ttl_s`: how old the
    cached stats may get before a refresh starts. `stats`: where cold-start samples are read
    (default: the ``floodway-stats`` Modal Dict).
    """

    def __init__(self, app: App, classes: Mapping[str, Any], *,
                 clock: Callable[[], float] = time.monotonic, stats_ttl_s: float = 1.0,
                 stats: KV | None = None):
        self.app, self.clock, self.stats_ttl_s = app, clock, stats_ttl_s
        self._classes = dict(classes)
        self._objs: dict[str, Any] = {}
        self._kv = stats if stats is not None else ModalDictKV(STATS_DICT)
        self._eps = {name: _Endpoint() for name in self._classes}
        self._tasks: set[asyncio.Task] = set()

    def _obj(self, endpoint: str) -> Any:
        if endpoint not in self._objs:
            self._objs[endpoint] = self._classes[endpoint]()
        return self._objs[endpoint]

    # ------------------------------------------------------------ stats

    async def refresh(self, endpoint: str) -> None:
        """Fetch the endpoint's stats now (and its cold-start samples when due). Failures
        are logged and kept in ``error``; the previous stats stay in use."""
        st = self._eps[endpoint]
        st.refreshing, st.tried_at = True, self.clock()
        try:
            stats = await self._obj(endpoint).predict.get_current_stats.aio()
            runners = int(stats.num_total_runners)
            if st.runners is not None and runners > st.runners:
                del st.cold_asked[:runners - st.runners]     # the starts we asked for arrived
            st.runners, st.backlog = runners, int(stats.backlog)
            st.stats_at, st.error = self.clock(), None
            if self.clock() - st.cold_read_at >= COLD_REFRESH_S:
                st.cold_read_at = self.clock()
                samples = await self._kv.get(f"cold:{endpoint}") or []
                st.cold_samples = [float(s["init_s"]) for s in samples][-COLD_SAMPLES:]
                await self._publish_service(endpoint)
        except Exception as e:  # noqa: BLE001 - stats are advisory; keep serving on old ones
            st.error = f"{type(e).__name__}: {e}"
            log.warning("stats of endpoint %s: %s", endpoint, st.error)
        finally:
            st.refreshing = False

    async def _publish_service(self, endpoint: str) -> None:
        """Write the measured batch time to ``service:<endpoint>`` in the stats Dict, for the
        warmers' Little's-law sizing (any router's recent fit will do: last writer wins)."""
        st = self._eps[endpoint]
        if not st.samples:
            return
        mbr = self.app[endpoint].batching.max_batch_rows
        svc = ServiceTime.fit(list(st.samples), SERVICE_PRIOR)
        rows = (sum(st.request_rows) / len(st.request_rows)) if st.request_rows else 1.0
        await self._kv.put(f"service:{endpoint}", {
            "batch_s": svc.seconds(mbr), "batch_rows": mbr, "rows_per_request": rows,
            "samples": len(st.samples)})

    def _maybe_refresh(self, endpoint: str, now: float) -> None:
        st = self._eps[endpoint]
        if st.refreshing or now - st.tried_at < self.stats_ttl_s:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return      # called outside the event loop: no background work possible
        st.refreshing = True
        task = loop.create_task(self.refresh(endpoint))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cold_start_s(self, endpoint: str) -> float:
        """Predicted seconds until a new container serves: `BOOT_S` + the slowest recent
        measured start, or `COLD_START_PRIOR_S` without samples."""
        samples = self._eps[endpoint].cold_samples
        return BOOT_S + max(samples) if samples else COLD_START_PRIOR_S

    def snapshot(self, endpoint: str) -> Snapshot:
        """The endpoint's state for `decide()` from the cached stats and in-flight counts."""
        ep, st, now = self.app[endpoint], self._eps[endpoint], self.clock()
        self._maybe_refresh(endpoint, now)
        svc = ServiceTime.fit(list(st.samples), SERVICE_PRIOR)
        cold = self.cold_start_s(endpoint)
        slots, mbr = ep.route.max_inflight_per_container, ep.batching.max_batch_rows
        runners = st.runners if st.runners is not None else ep.warm.min_containers
        views = []
        if runners:
            rows = math.ceil(st.inflight_rows / runners)
            free = max(0, slots - math.ceil(rows / mbr))
            backlog_s = _batches_s(svc, rows, mbr)
            views = [ContainerView(f"runner-{i}", "ready" if free else "busy", free, slots,
                                   backlog_s) for i in range(runners)]
        st.cold_asked = [t for t in st.cold_asked if now - t < cold]
        views += [ContainerView(f"asked-{i}", "starting", 0, slots, 0.0, cold - (now - t))
                  for i, t in enumerate(st.cold_asked)]
        mean_rows = (sum(st.request_rows) / len(st.request_rows)) if st.request_rows else 1.0
        return Snapshot(now_s=now, containers=tuple(views), service=svc, cold_start_s=cold,
                        max_batch_rows=mbr, max_queue=ep.route.max_queue,
                        max_containers=ep.warm.container_cap, spill=ep.route.spill,
                        queued=math.ceil(st.backlog / max(1.0, mean_rows)),
                        queued_rows=st.backlog, tenant_queued=dict(st.inflight))

    def start_cold(self, endpoint: str) -> bool:
        """Note one more container as starting; False at ``max_containers``. Modal's
        autoscaler starts it when the rows queue (see the module doc): no call is made."""
        ep, st = self.app[endpoint], self._eps[endpoint]
        runners = st.runners if st.runners is not None else ep.warm.min_containers
        if runners + len(st.cold_asked) >= ep.warm.container_cap:
            return False
        st.cold_asked.append(self.clock())
        return True

    # ------------------------------------------------------------ work

    def _entry(self, endpoint: str, call: asyncio.Future) -> Any:
        """One row's result: its output, or the exception that failed it alone."""
        exc = call.exception()
        if exc is None:
            out = call.result()
            if isinstance(out, dict) and set(out) == {ITEM_ERROR}:
                return EndpointError(f"endpoint {endpoint!r} raised {out[ITEM_ERROR]}")
            return out
        if isinstance(exc, (EndpointError, Unavailable)):
            return exc
        if isinstance(exc, TRANSIENT):
            return Unavailable(f"Modal did not take the input: {type(exc).__name__}: {exc}",
                               retry_after_s=1.0)
        return EndpointError(f"endpoint {endpoint!r} failed on Modal: "
                             f"{type(exc).__name__}: {exc}")

    def enqueue(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                priority: int = 1, tenant: str = "anonymous") -> Awaitable[list[Any]]:
        """Start one ``predict.remote.aio(row)`` per row now and count them in flight at once
        (synchronously, so a burst's next decision already sees them); return an awaitable
        of the results, as `run`. The counts drop when the last call ends, whether or not
        the awaitable is ever awaited."""
        if endpoint not in self._classes:
            raise Unavailable(f"no Modal class for endpoint {endpoint!r}")
        st, obj, n = self._eps[endpoint], self._obj(endpoint), len(inputs)
        st.inflight_rows += n
        st.inflight[tenant] += 1
        left = [max(n, 1)]

        def release(_call: object = None) -> None:
            left[0] -= 1
            if left[0] == 0:
                st.inflight_rows -= n
                st.inflight[tenant] -= 1
                if st.inflight[tenant] <= 0:
                    del st.inflight[tenant]

        calls = [asyncio.ensure_future(obj.predict.remote.aio(x)) for x in inputs]
        for c in calls:
            c.add_done_callback(release)
        if not calls:
            release()
        return self._results(endpoint, calls, timeout_s, self.clock())

    async def _results(self, endpoint: str, calls: list[asyncio.Future], timeout_s: float,
                       t0: float) -> list[Any]:
        st, n = self._eps[endpoint], len(calls)
        pending: set = set()
        try:
            if calls:
                _, pending = await asyncio.wait(calls, timeout=timeout_s)
        finally:
            for c in calls:
                c.cancel()              # no-op for the finished ones
        if pending:
            for c in calls:             # mark finished failures as seen (no asyncio warning)
                if c.done() and not c.cancelled():
                    c.exception()
            raise TimeoutError(f"endpoint {endpoint!r} did not answer within {timeout_s:g} s")
        st.samples.append((min(n, self.app[endpoint].batching.max_batch_rows),
                           self.clock() - t0))
        st.request_rows.append(n)
        return [self._entry(endpoint, c) for c in calls]

    async def run(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                  priority: int = 1, tenant: str = "anonymous") -> list[Any]:
        """One ``predict.remote.aio(row)`` per row, all at once (``@modal.batched``
        regroups them in the containers); one entry per input, in order: its output or its
        EndpointError / Unavailable. Raises TimeoutError after `timeout_s`, cancelling the
        calls still pending (also when the caller is cancelled). `priority` has no effect
        on Modal (one FIFO input queue per class)."""
        return await self.enqueue(endpoint, inputs, timeout_s=timeout_s, priority=priority,
                                  tenant=tenant)

    def readiness(self) -> dict[str, Any]:
        """Always ready: Modal starts containers on demand. Detail from the cached stats:
        ``endpoints`` (a "ready" entry per runner, as the metrics expect), ``queues`` and
        ``modal`` (runners, backlog, in-flight rows, stats age, cold start, last error)."""
        now = self.clock()
        out: dict[str, Any] = {"ready": True, "backend": "modal", "endpoints": {},
                               "queues": {}, "modal": {}}
        for name, st in self._eps.items():
            runners = st.runners or 0
            out["endpoints"][name] = [{"id": f"runner-{i}", "state": "ready"}
                                      for i in range(runners)]
            out["queues"][name] = {"queued": st.backlog, "queued_rows": st.backlog}
            out["modal"][name] = {
                "runners": st.runners, "backlog": st.backlog, "inflight_rows": st.inflight_rows,
                "stats_age_s": None if st.stats_at is None else round(now - st.stats_at, 3),
                "cold_start_s": self.cold_start_s(name), "error": st.error}
        return out


async def run_job_rows(backend: ModalBackend, endpoint: str, inputs: list[Any]) -> list[Any]:
    """The body of the ``run_job`` Modal function: every row through `backend` -> outputs.

    Raises EndpointError naming the first failed row when any failed (the job fails as a
    whole, as a local job does), TimeoutError past `JOB_ROWS_TIMEOUT_S`.
    """
    results = await backend.run(endpoint, inputs, timeout_s=JOB_ROWS_TIMEOUT_S, priority=0,
                                tenant="jobs")
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failed:
        i, err = failed[0]
        raise EndpointError(f"{len(failed)} of {len(results)} inputs failed; first: "
                            f"inputs[{i}]: {err}")
    return results


__all__ = ["ITEM_ERROR", "KV", "MemoryKV", "ModalBackend", "ModalDictKV", "ModalJobs",
           "record_cold_start", "router_api_keys", "run_job_rows"]
