"""The router's `Backend` on Modal: the same `decide()` as locally, fed by Modal's own counters.

    backend = ModalBackend(fw_app, classes)     # classes: unit key -> its modal.Cls
    make_asgi_app(fw_app, backend, jobs=ModalJobs(run_job), api_keys=router_api_keys())

Snapshot of one endpoint (`ModalBackend.snapshot`, synchronous and cheap), built like every
other runtime's with `floodway.core.snapshot.build_snapshot`:

- ``Function.get_current_stats()`` of the endpoint's class gives ``backlog`` (inputs waiting
  for a container) and ``num_total_runners`` (containers). A Cls has no public stats call;
  the method of an instance without parameters is bound to the class service function's id,
  so ``Cls().predict.get_current_stats.aio()`` is that function's stats (modal 1.6's
  ``Function.from_id`` documents that a Cls id supports ``get_current_stats``; fields as in
  https://modal.com/docs/sdk/js/latest/FunctionStats).
  It is a network call: its result is cached for `stats_ttl_s` and refreshed by a background
  task that `snapshot()` starts, so a request never waits on it. Before the first answer, the
  warm pool's ``min_containers`` stand in for the runners (Modal keeps those up).
- Each runner is a warm `ContainerLoad` with `container_slots` slots: exactly the batches
  Modal runs at once in one container, since `to_modal` declares that number as the class's
  input concurrency (``@modal.concurrent(max_inputs=container_slots(ep))``; with
  ``@modal.batched`` each input slot fetches one batch, modal 1.6's
  ``_ContainerIOManager._generate_inputs``). The router's own in-flight rows (sent, not yet
  answered) are spread evenly over the runners, each runner's share cut into batches of at
  most ``max_batch_rows`` rows (`runner_loads`). A start the router asked for (`start_cold`)
  is a "starting" container until the stats show it or its cold start has passed.
- Modal's backlog is its input queue, served in arrival order: `QueueLoad.fifo` of its
  rows (as requests: over the mean rows per recent request) and the router's in-flight
  requests per tenant. Our own queued rows count twice: conservative, never optimistic.
- Estimators (`floodway.core.estimators`, priors from `floodway.core.priors`): the service
  time is `ServiceEstimator`'s fit of the router's measured (rows, seconds) per request,
  round trip included (so it also covers Modal's queueing under load); the cold start is
  `floodway.deploy.modal_stats.cold_estimator` over the samples the GPU classes write
  (`record_cold_start`), re-read every `COLD_REFRESH_S`; the arrival rate is `ArrivalRate`
  over the rows `enqueue` admitted.

`start_cold` calls nothing: Modal's autoscaler starts containers by itself when inputs queue,
up to ``max_containers`` (https://modal.com/docs/guide/scale). The router only remembers the
start it asked for, so one burst does not count on the same new capacity many times.

Work: `enqueue` sends one ``predict.remote.aio(row)`` per row at once (``@modal.batched``
regroups them in the containers) and returns a `ModalPending`. Modal cannot hand work under
way to another caller, so a request handed off near its deadline is submitted again as a
job (`ModalPending.dispatched` is always False). Batches form inside the Modal containers,
out of the router's sight: `add_batch_listener` accepts a listener and never calls it.

Streaming endpoints (`floodway.deploy.modal_stream`): `enqueue` starts one
``stream.remote_gen.aio(item)`` per input and returns the same `StreamPending` as the local
pool; a stream closed early cancels its Modal calls. Each sequence counts as one in-flight
row, and the endpoint's `modal_book` keeps it (waiting in Modal's queue, then running, its
tokens counted) for `stream_snapshot` (`floodway.deploy.modal_sequences`).

Lanes (`Route.lanes`): each lane of an endpoint is a Modal class of its own (unit key
``embed:short``, class ``EmbedShort``) with its own input queue, containers and autoscaler
bounds, so a short request never waits in Modal's queue behind long ones. The router keeps
one `floodway.deploy.modal_units.UnitState` per class and snapshots a lane from its own
class's stats. The HTTP handlers name the unit; a caller naming the endpoint plainly (a
job, `run_job_rows`) is served by the lane its inputs take. The lanes share one set of
cold-start samples (``cold:<endpoint>``: they run the same build); each publishes its own
batch time (``service:<unit>``).

Known gaps: whether ``num_total_runners`` includes booting containers is not documented (all
count as warm). With ``min_containers=0`` and no runner, a sync request whose deadline is
shorter than the cold start becomes a job (which starts a container) or is shed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from floodway.core.backend import BatchListener
from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.core.snapshot import ContainerLoad, QueueLoad, build_snapshot
from floodway.deploy.modal_calls import (
    ITEM_ERROR,
    JOB_ROWS_TIMEOUT_S,
    JOB_TIMEOUT_S,
    ModalPending,
    run_job_rows,
)
from floodway.deploy.modal_jobs import ModalJobs
from floodway.deploy.modal_kv import KV, MemoryKV, ModalDictKV
from floodway.deploy.modal_stats import (
    BOOT_S,
    COLD_SAMPLES,
    STATS_DICT,
    cold_key,
    measured_record,
    record_cold_start,
)
from floodway.deploy.modal_stream import (
    is_streaming,
    max_stream_s,
    modal_book,
    modal_stream_snapshot,
    stream_pending,
)
from floodway.deploy.modal_units import (
    UnitState,
    container_slots,
    known_cold,
    modal_readiness,
    runner_loads,
)
from floodway.errors import FloodwayError, Unavailable
from floodway.functions.app import App
from floodway.functions.lanes import served_units
from floodway.routers.admission import API_KEYS_ENV, ApiKeys
from floodway.routers.decide import Snapshot
from floodway.routers.lanes import resolve_unit, split_unit

log = logging.getLogger(__name__)

PUBLIC_ROUTER_ENV = "FLOODWAY_PUBLIC_ROUTER"
COLD_REFRESH_S = 30.0         # how often the router re-reads the cold-start samples


def router_api_keys(environ: Mapping[str, str] | None = None) -> ApiKeys:
    """The router's API keys, from ``FLOODWAY_API_KEYS`` (comma-separated bearer tokens; on
    Modal: the named Secret ``floodway-router-keys`` that `to_modal` gives the router). A
    Modal web endpoint is reachable by anyone with its URL, so no keys is refused
    (FloodwayError) unless ``FLOODWAY_PUBLIC_ROUTER=1`` says the endpoint is meant to be
    public (``to_modal(..., public_router=True)`` sets it)."""
    env = os.environ if environ is None else environ
    keys = ApiKeys.from_env(environ=env)
    if not keys and env.get(PUBLIC_ROUTER_ENV) != "1":
        raise FloodwayError(f"the Modal router is a public web endpoint: set {API_KEYS_ENV} "
                            f"(e.g. `modal secret create floodway-router-keys "
                            f"{API_KEYS_ENV}=<key1>,<key2>`) or {PUBLIC_ROUTER_ENV}=1 "
                            f"(`to_modal(..., public_router=True)`) to serve without "
                            f"authentication")
    return keys


class ModalBackend:
    """The http `Backend` over Modal classes (see the module doc).

    `classes`: unit key -> its Modal class (``Cls().predict`` is the `@modal.batched`
    method taking one row per call; a streaming endpoint's class has the generator method
    ``stream`` instead): one per endpoint, or one per lane of an endpoint with
    `Route.lanes` (keys ``"embed:short"``, `floodway.functions.lanes.served_units`). Every
    method takes a unit key, or an endpoint's plain name, which for an endpoint with lanes
    means the lane its inputs take (`enqueue`, `run`) or its last lane (`_unit`).
    `clock`: its ``monotonic()`` times the stats, starts and round trips, and request
    timeouts are measured on it (`floodway.core.clock.within`). `stats_ttl_s`: how old the
    cached stats may get before a refresh starts. `stats`: where cold-start samples are
    read (default: the ``floodway-stats`` Modal Dict). `store`: the artifact store's root
    (the Volume's mount), where the builds' cold-start probes are read (None: the prior).
    """

    def __init__(self, app: App, classes: Mapping[str, Any], *,
                 clock: Clock = SYSTEM_CLOCK, stats_ttl_s: float = 1.0,
                 stats: KV | None = None, store: str | os.PathLike[str] | None = None):
        self.app, self.clock, self.stats_ttl_s = app, clock, stats_ttl_s
        self._classes = dict(classes)
        self._units = served_units(app)
        self._objs: dict[str, Any] = {}
        self._kv = stats if stats is not None else ModalDictKV(STATS_DICT)
        # Each unit's cold start starts from its build's probe (`known_cold`) where `store`,
        # the artifact Volume's root, has one.
        self._eps = {key: UnitState(cold=known_cold(split_unit(key)[0], store))
                     for key in self._classes}
        self._tasks: set[asyncio.Task] = set()

    def _unit(self, endpoint: str, inputs: list[Any] | None = None) -> str:
        """The unit key `endpoint` means among the classes (`floodway.routers.lanes.
        resolve_unit`: an endpoint with lanes named plainly, the lane `inputs` take, or
        its last lane); `endpoint` itself when it means none."""
        defined = self.app.endpoints.get(endpoint)
        key = resolve_unit(self._classes, endpoint, inputs, defined)
        return endpoint if key is None else key

    def _obj(self, unit: str) -> Any:
        if unit not in self._objs:
            self._objs[unit] = self._classes[unit]()
        return self._objs[unit]

    def _method(self, unit: str) -> Any:
        """The class's one method: ``stream`` for a streaming endpoint, else ``predict``."""
        obj = self._obj(unit)
        return obj.stream if is_streaming(self._units[unit]) else obj.predict

    # ------------------------------------------------------------ stats

    async def refresh(self, endpoint: str) -> None:
        """Fetch the unit's class stats now (and its cold-start samples when due). Failures
        are logged and kept in ``error``; the previous stats stay in use."""
        unit = self._unit(endpoint)
        st = self._eps[unit]
        st.refreshing, st.tried_at = True, self.clock.monotonic()
        try:
            stats = await self._method(unit).get_current_stats.aio()
            runners = int(stats.num_total_runners)
            if st.runners is not None and runners > st.runners:
                del st.cold_asked[:runners - st.runners]     # the starts we asked for arrived
            st.runners, st.backlog = runners, int(stats.backlog)
            st.stats_at, st.error = self.clock.monotonic(), None
            if self.clock.monotonic() - st.cold_read_at >= COLD_REFRESH_S:
                st.cold_read_at = self.clock.monotonic()
                # Every lane's class runs the endpoint's build: one set of start samples.
                samples = await self._kv.get(cold_key(self._units[unit].name)) or []
                st.cold.replace(float(s["init_s"]) for s in samples)
                await self._publish_service(unit)
        except Exception as e:  # noqa: BLE001 - stats are advisory; keep serving on old ones
            st.error = f"{type(e).__name__}: {e}"
            log.warning("stats of %s: %s", unit, st.error)
        finally:
            st.refreshing = False

    async def _publish_service(self, unit: str) -> None:
        """Write what this router measured of `unit` to the stats Dict for the warmers'
        sizing: a batch endpoint's (or lane's) batch time, a streaming one's generation
        fits (`modal_stats.measured_record`; any router's recent fit will do: last writer
        wins)."""
        ep = self._units[unit]
        key, record = measured_record(ep, self._eps[unit], is_streaming(ep))
        if record is not None:
            await self._kv.put(key, record)

    def _maybe_refresh(self, unit: str, now: float) -> None:
        st = self._eps[unit]
        if st.refreshing or now - st.tried_at < self.stats_ttl_s:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return      # called outside the event loop: no background work possible
        st.refreshing = True
        task = loop.create_task(self.refresh(unit))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cold_start_s(self, endpoint: str) -> float:
        """Predicted seconds until a new container serves: `BOOT_S` + the slowest recent
        measured start, or the prior without samples (`cold_estimator`)."""
        return self._eps[self._unit(endpoint)].cold.estimate_s()

    def snapshot(self, endpoint: str) -> Snapshot:
        """The unit's state for `decide()` from its class's cached stats and in-flight
        counts (see the module doc)."""
        unit = self._unit(endpoint)
        ep, st, now = self._units[unit], self._eps[unit], self.clock.monotonic()
        self._maybe_refresh(unit, now)
        cold = st.cold.estimate_s()
        slots = container_slots(ep)
        runners = st.runners if st.runners is not None else ep.warm.min_containers
        loads = runner_loads(runners, st.inflight_rows, ep.batching.max_batch_rows, slots)
        st.cold_asked = [t for t in st.cold_asked if now - t < cold]
        loads += [ContainerLoad(f"asked-{i}", "starting", slots=slots, starting_for_s=now - t)
                  for i, t in enumerate(st.cold_asked)]
        queue = QueueLoad.fifo(st.backlog, math.ceil(st.backlog / max(1.0, st.mean_rows())),
                               st.inflight)
        return build_snapshot(now, ep, loads, queue, service=st.service.fit,
                              cold_start_s=cold, arrival_rows_per_s=st.arrivals.rate(now))

    def stream_snapshot(self, endpoint: str) -> Any:
        """A streaming endpoint's state for `decide_stream()`: the same cached stats and
        in-flight counts, and its `modal_book` (`modal_sequences.modal_stream_snapshot`)."""
        unit = self._unit(endpoint)
        ep, st, now = self._units[unit], self._eps[unit], self.clock.monotonic()
        self._maybe_refresh(unit, now)
        cold = st.cold.estimate_s()
        st.cold_asked = [t for t in st.cold_asked if now - t < cold]
        runners = st.runners if st.runners is not None else ep.warm.min_containers
        return modal_stream_snapshot(
            now, ep, runners=runners, inflight=st.inflight_rows,
            asked_for_s=[now - t for t in st.cold_asked], backlog=st.backlog,
            tenants=st.inflight, model=st.generation.model, cold_start_s=cold,
            book=st.sequences)

    def start_cold(self, endpoint: str) -> bool:
        """Note one more container of the unit's class as starting; False at its
        ``max_containers``. Modal's autoscaler starts it when the rows queue (see the module
        doc): no call is made."""
        unit = self._unit(endpoint)
        ep, st = self._units[unit], self._eps[unit]
        runners = st.runners if st.runners is not None else ep.warm.min_containers
        if runners + len(st.cold_asked) >= ep.warm.container_cap:
            return False
        st.cold_asked.append(self.clock.monotonic())
        return True

    def add_batch_listener(self, listener: BatchListener) -> None:
        """Accepted and never called: on Modal, batches form inside the GPU containers
        (``@modal.batched``), which the router does not see."""

    # ------------------------------------------------------------ work

    def enqueue(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                priority: int = 1, tenant: str = "anonymous") -> Any:
        """Start one ``predict.remote.aio(row)`` per row now, on the unit's class (an
        endpoint with lanes named plainly: the lane `inputs` take), and count them in flight
        at once (synchronously, so a burst's next decision already sees them, and in the
        arrival rate); return the `ModalPending` of the results. For a streaming endpoint,
        one ``stream.remote_gen.aio(item)`` per input instead, returning its `StreamPending`
        (`modal_stream.stream_pending`). The counts drop when the last call ends, awaited or
        not. `priority` has no effect on Modal (one FIFO input queue per class). Raises
        Unavailable for an endpoint without a Modal class."""
        unit = self._unit(endpoint, inputs)
        if unit not in self._classes:
            raise Unavailable(f"no Modal class for endpoint {endpoint!r}")
        st, method, n = self._eps[unit], self._method(unit), len(inputs)
        now = self.clock.monotonic()
        st.arrivals.record(now, n)
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

        ep = self._units[unit]
        if is_streaming(ep):
            st.sequences = st.sequences or modal_book(ep, st)
            pending: Any = stream_pending(
                ep.name, method, inputs, clock=self.clock, timeout_s=timeout_s,
                max_stream_s=max_stream_s(ep), book=st.sequences, tenant=tenant)
            calls = list(pending.futures)
        else:
            calls = [asyncio.ensure_future(method.remote.aio(x)) for x in inputs]
            pending = ModalPending(ep.name, calls, timeout_s, now, self.clock,
                                   lambda rows, seconds: self._answered(unit, rows, seconds))
        for c in calls:
            c.add_done_callback(release)
        if not calls:
            release()
        return pending

    def _answered(self, unit: str, rows: int, seconds: float) -> None:
        """A request of `rows` rows answered in `seconds` (round trip): one service sample
        (as one batch of at most max_batch_rows) and its size for the mean rows."""
        st = self._eps[unit]
        st.service.record(min(rows, self._units[unit].batching.max_batch_rows), seconds)
        st.request_rows.append(rows)

    async def run(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                  priority: int = 1, tenant: str = "anonymous") -> list[Any]:
        """`enqueue`, awaited: one entry per input, in order (its output or its
        EndpointError / Unavailable). Raises TimeoutError after `timeout_s`, cancelling the
        calls still pending (also when the caller is cancelled)."""
        return await self.enqueue(endpoint, inputs, timeout_s=timeout_s, priority=priority,
                                  tenant=tenant)

    def readiness(self) -> dict[str, Any]:
        """Always ready: Modal starts containers on demand. The detail of every unit's class
        from the cached stats, and the ``lanes`` section (`modal_units.modal_readiness`)."""
        return modal_readiness(self._units, self._eps, self.app.endpoints,
                               self.clock.monotonic(), self.cold_start_s)


__all__ = ["BOOT_S", "COLD_SAMPLES", "ITEM_ERROR", "JOB_ROWS_TIMEOUT_S", "JOB_TIMEOUT_S", "KV",
           "STATS_DICT", "MemoryKV", "ModalBackend", "ModalDictKV", "ModalJobs", "ModalPending",
           "container_slots", "record_cold_start", "router_api_keys", "run_job_rows",
           "runner_loads"]
