"""The router's `Backend` on Modal: the same `decide()` as locally, fed by Modal's own counters.

    backend = ModalBackend(fw_app, classes)     # classes: unit key -> its modal.Cls
    make_asgi_app(fw_app, backend, jobs=ModalJobs(run_job), api_keys=router_api_keys())

How the snapshot is built, why the runners are modelled as they are, and the known gaps:
docs/design/modal-router.md. Sources: the stats of a class are its service function's
(``Cls().predict.get_current_stats``; modal 1.6's ``Function.from_id``,
https://modal.com/docs/sdk/js/latest/FunctionStats); each ``@modal.concurrent`` input slot of
a ``@modal.batched`` method fetches one batch (modal 1.6's
``_ContainerIOManager._generate_inputs``); Modal's autoscaler starts containers by itself as
inputs queue (https://modal.com/docs/guide/scale), so `start_cold` calls nothing.
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
from floodway.errors import FloodwayError, Unavailable
from floodway.functions.app import App
from floodway.functions.lanes import served_units
from floodway.modal.contract import container_slots, is_streaming
from floodway.modal.kv import KV, ModalDictKV
from floodway.modal.router.calls import ModalPending
from floodway.modal.router.sequences import modal_book, modal_stream_snapshot
from floodway.modal.router.streams import max_stream_s, stream_pending
from floodway.modal.router.units import UnitState, known_cold, modal_readiness, runner_loads
from floodway.modal.stats import STATS_DICT, cold_key, measured_record
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
    """The http `Backend` over Modal classes (docs/design/modal-router.md).

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
        fits (`floodway.modal.stats.measured_record`; any router's recent fit will do: last writer
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
        counts (docs/design/modal-router.md)."""
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
        in-flight counts, and its `modal_book` (`sequences.modal_stream_snapshot`)."""
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
        (`streams.stream_pending`). The counts drop when the last call ends, awaited or
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
        from the cached stats, and the ``lanes`` section (`units.modal_readiness`)."""
        return modal_readiness(self._units, self._eps, self.app.endpoints,
                               self.clock.monotonic(), self.cold_start_s)


__all__ = ["COLD_REFRESH_S", "PUBLIC_ROUTER_ENV", "ModalBackend", "router_api_keys"]
