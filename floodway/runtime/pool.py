"""The local pool: containers per endpoint, scaled, replaced and stopped; the local Backend.

Each endpoint's state is one `EndpointPool` (containers, queue, estimators, traffic record,
warm target, failure counters); the pool only carries out what the pure functions decide:

- the warm target (`floodway.warmers.desired`: `min_containers`, scheduled windows, the
  predictive policy; `buffer_containers` while the endpoint is active), recomputed every
  `TICK_S` from the measured cold start and service time and the traffic record. As on
  Modal, the buffer is idle containers on top of those serving inputs: the floor is
  `WarmTarget.keep(busy, cap)`, checked at every tick and as each batch goes to a container
  (the batcher's `on_send`), so a buffer container starts at once. `--containers N` pins it.
- `floodway.core.reconcile.reconcile`: start containers up to the floor, drain idle ones
  past the target's `scaledown_window_s`; no starts while starts are failing or a
  replacement waits out its backoff. `start_cold` starts one more for `spill_cold`, up to
  `max_containers`.
- `floodway.runtime.health`: stuck (work in flight, no completion for
  `Route.stuck_after_s`) and silent (an idle container not answering pings) containers are
  killed; a dead one is replaced while the pool is under its floor, with backoff. Batches
  lost with a container are retried once elsewhere (`floodway.routers.batcher`). An
  endpoint whose starts keep failing (`health.failing`) answers StartFailing (503 naming
  the load error) from `snapshot`/`stream_snapshot` and `failing()`, so its requests are
  refused and its jobs fail (`floodway.jobs.local`); a scaled-to-zero one retries a start
  when a request comes once the backoff has passed.
- `floodway.runtime.rollout`: a newly published build gets new containers first; the old
  ones drain once as many new ones are ready.
- `floodway.runtime.recycle`: a container past its `fw.Recycle` limits (its worker's resident
  memory, its calls) is drained, after its replacement is ready if the floor needs it
  (`floodway.runtime.recycle.Recycler` measures and drains).

Only user batches reset a container's idle timer. `snapshot()` describes an endpoint for
`decide()` (`floodway.core.snapshot.build_snapshot`), `stream_snapshot()` a streaming one
for `decide_stream()`. Times: `clock.monotonic()` seconds, and `clock.wall()` for the
traffic record and the warm-pool policy.

Units: the pool keeps one `EndpointPool` per unit (`floodway.functions.lanes.served_units`):
an endpoint without lanes, or one lane of one (key ``"embed:short"``). Callers that know only
the endpoint (the job queue) name it plainly; `resolve` then picks the lane from the inputs
(`floodway.routers.lanes.lane_of`), or the last lane (which takes every request) when there
are none to judge by.

The job queue (`floodway.jobs.feed.JobCapacity`, through `JobLink`): the pool wakes it
whenever a batch is sent or ends and whenever a container changes state (ready, gone), so it
claims jobs for the room freed and decides its waiting jobs again at once, not after a poll
or a Retry-After. The call as a batch is handed to a container (the batcher's `on_send`) is
also when a job's attempt counts: its rows have reached a container
(`floodway.jobs.feed.JobFeed.check_started`). Each tick reads the job backlog (rows of
unfinished jobs per endpoint), which the warm-pool policy counts as demand (`job_backlog`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from floodway.build.store import ArtifactStore
from floodway.config import VALIDATED_ENV
from floodway.core.backend import BatchListener
from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.core.reconcile import Do, Plan
from floodway.errors import FloodwayError, StartFailing, Unavailable
from floodway.functions.app import App
from floodway.functions.lanes import lanes_section, served_units
from floodway.jobs.local import JOB_TIMEOUT_S
from floodway.modal.extra import NO_MODAL_ENV
from floodway.routers.decide import Snapshot
from floodway.routers.decide_stream import StreamSnapshot
from floodway.routers.lanes import lane_keys, resolve_unit, split_unit
from floodway.runtime import health
from floodway.runtime.container import BatchResult, Container, State, cold_start_text
from floodway.runtime.endpoint_pool import EndpointPool
from floodway.runtime.pending import Pending, StreamPending
from floodway.runtime.recycle import Recycler
from floodway.runtime.share import Share
from floodway.warmers.history import TrafficHistory
from floodway.warmers.predictive import PredictiveParams

if TYPE_CHECKING:
    from floodway.functions.endpoint import Endpoint

log = logging.getLogger("floodway.pool")
TICK_S = 0.5
# The policy runs every TICK_S: a pre-warm due before the next run is asked for now.
POLICY_PARAMS = PredictiveParams(tick_s=TICK_S)
BUILD_CHECK_S = 2.0   # how often a newly published build is looked for


# ---------------------------------------------------------------------- units (lanes)
def lanes_of(endpoints: dict[str, EndpointPool], name: str) -> list[EndpointPool]:
    """The units serving endpoint `name`'s lanes, in lane order (none without lanes)."""
    return [endpoints[key] for key in lane_keys(endpoints, name)]


def resolve(endpoints: dict[str, EndpointPool], name: str,
            inputs: Sequence[Any] | None = None, *,
            defined: Endpoint | None = None) -> EndpointPool | None:
    """The unit `name` means: itself when it is a unit's key; for an endpoint with lanes,
    the lane `inputs` take, judged by `defined` (the endpoint as the app defines it, with
    its `Route.lanes`: a lane's own endpoint has none), else the last lane; None if unknown
    (`floodway.routers.lanes.resolve_unit`)."""
    key = resolve_unit(endpoints, name, inputs, defined)
    return None if key is None else endpoints[key]


def job_backlog(endpoints: dict[str, EndpointPool], ep: EndpointPool,
                rows: dict[str, int]) -> int:
    """The job backlog rows (`rows`: per endpoint, from the job store) that count as
    demand on `ep`'s warm pool: its endpoint's, for a plain endpoint; for a lane, the job
    rows queued in its own batcher, and the store's backlog only for the last lane (which
    queued job takes which lane is known only from its inputs, read when it is claimed;
    the last lane takes every request, and claims follow the lanes' room)."""
    name, lane = split_unit(ep.name)
    if lane is None:
        return rows.get(name, 0)
    own = ep.batcher.rows_by_priority[0] if ep.batcher is not None else 0
    last = lanes_of(endpoints, name)[-1] is ep
    return own + (rows.get(name, 0) if last else 0)


def readiness(endpoints: dict[str, EndpointPool],
              defined: dict[str, Endpoint]) -> dict[str, Any]:
    """The pool's readiness (`defined`: the app's endpoints, by name): ``{"ready",
    "endpoints", "queues", "warm_targets", "container_events", "failures", "sequences",
    "lanes"}``, keyed by unit; ready once every unit has a warm container (or is scaled to
    zero by its policy); `failures`: failed starts in a row and the last container error
    (why nothing becomes ready); `sequences`: each streaming unit's running sequences and KV
    cache (`EndpointPool.sequences`); `lanes`: per endpoint with lanes, per lane, its unit
    key, bounds, containers and queue: ``{"embed": {"short": {"unit": "embed:short",
    "max_tokens": 64, "max_rows": None, "min_containers": 0, "max_containers": 1,
    "max_queue": 32, "live_containers": 1, "queued": 0}}}``
    (`floodway.functions.lanes.lanes_section`, the same on Modal)."""
    detail = {name: ep.describe() for name, ep in endpoints.items()}

    def load(key: str) -> dict[str, int]:
        ep = endpoints[key]
        return {"live_containers": len(ep.live()),
                "queued": ep.batcher.queued if ep.batcher is not None else 0}

    return {"ready": all(ep.ready() for ep in endpoints.values()),
            "endpoints": {name: d["containers"] for name, d in detail.items()},
            "queues": {name: d["queue"] for name, d in detail.items()
                       if endpoints[name].batcher is not None},
            "warm_targets": {name: d["target"] for name, d in detail.items()},
            "container_events": {name: d["events"] for name, d in detail.items()},
            "failures": {name: d["failures"] for name, d in detail.items()},
            "sequences": {name: d["sequences"] for name, d in detail.items()
                          if "sequences" in d},
            "lanes": lanes_section({key: ep.endpoint for key, ep in endpoints.items()},
                                   defined, load)}


# ---------------------------------------------------------------------- the job queue
class JobLink:
    """What the pool knows of its job queue (nothing until `watch` is called): whom to wake
    when job room may have grown, and the latest backlog."""

    def __init__(self) -> None:
        self._backlog: Callable[[], dict[str, int]] | None = None
        self._wake: Callable[[], None] | None = None
        self.rows: dict[str, int] = {}   # the latest backlog: rows per endpoint

    def watch(self, backlog: Callable[[], dict[str, int]], wake: Callable[[], None]) -> None:
        self._backlog, self._wake = backlog, wake

    def wake(self) -> None:
        if self._wake is not None:
            self._wake()

    def refresh(self) -> None:
        """Read the backlog now (a locked store must not stop scaling: logged; a failed
        read keeps the last one)."""
        if self._backlog is None:
            return
        try:
            self.rows = dict(self._backlog())
        except Exception:  # noqa: BLE001
            log.exception("reading the job backlog failed; keeping the last one")


# ---------------------------------------------------------------------- the pool


class Pool:
    """Local containers for every endpoint of `app`; implements the http `Backend` protocol.

    `containers`: pin the floor per endpoint (None: follow the warm-pool policy), capped at
    `WarmPool.max_containers`. `history`: where user arrivals are recorded per minute
    (None: in memory only). `clock`: monotonic and wall seconds, and the sleeps of the
    tick and the replacement backoff (`SYSTEM_CLOCK`).
    `make_container(endpoint)`: a new, not yet started container (default: a worker
    process). `tick_s`: seconds between ticks once started (None: the caller calls `tick`).
    """

    def __init__(self, app: App, app_spec: str, store_root: str, *,
                 containers: int | None = None, history: TrafficHistory | None = None,
                 clock: Clock = SYSTEM_CLOCK,
                 make_container: Callable[[str], Container] | None = None,
                 tick_s: float | None = TICK_S):
        self.app, self.app_spec, self.store_root = app, app_spec, store_root
        self.pinned, self.clock, self.tick_s = containers, clock, tick_s
        # One EndpointPool per unit: an endpoint, or a lane of one ("embed:short").
        self.endpoints = {key: EndpointPool(ep, clock=clock, history=history,
                                            store=ArtifactStore(store_root))
                          for key, ep in served_units(app).items()}
        total = sum(containers if containers is not None else
                    max(1, ep.warm.min_containers + ep.warm.buffer_containers)
                    for ep in (u.endpoint for u in self.endpoints.values()))
        # The machine's cores shared (`floodway.runtime.share`): threads per container,
        # the most containers the cores run at once, the containers' lower priority.
        self.share = Share.of(total)
        self.threads, self.machine_cap = self.share.threads, self.share.machine_cap
        self.store = ArtifactStore(store_root)
        self._make = make_container or self._container
        self._builds_checked_s = -math.inf
        self._closing = False
        self._tasks: set[asyncio.Task] = set()
        self._request_ids = itertools.count(1)
        self._ticker: asyncio.Task | None = None
        self._listeners: list[BatchListener] = []
        self.jobs = JobLink()
        self.recycler = Recycler(self._drain, clock=clock.monotonic)   # rss_of: a worker's RSS
        for ep in self.endpoints.values():
            self._retarget(ep, clock.wall())

    @property
    def containers(self) -> dict[str, list[Container]]:
        """Each endpoint's containers not yet exited (any state)."""
        return {name: ep.containers for name, ep in self.endpoints.items()}

    @property
    def event_counts(self) -> dict[str, Counter[str]]:
        """Container events per endpoint since start: start, failed, stuck, scale_down,
        rolled, recycled."""
        return {name: ep.events for name, ep in self.endpoints.items()}

    # ------------------------------------------------------------------ containers
    def worker_env(self) -> dict[str, str]:
        """What a container process's environment adds to the router's: this pool's share of
        the machine (`Share.worker_env`: threads, priority), no Modal objects, and the
        definition marked as already validated (by this process)."""
        return {**self.share.worker_env(), NO_MODAL_ENV: "1", VALIDATED_ENV: "1"}

    def _build_of(self, endpoint: str) -> str | None:
        """The key of the endpoint's latest published build (None if unreadable now); every
        lane of an endpoint runs its builds."""
        try:
            return self.store.latest(split_unit(endpoint)[0]).name
        except FloodwayError:
            return None

    def _container(self, endpoint: str) -> Container:
        ep = self.endpoints[endpoint].endpoint
        slots = self.endpoints[endpoint].slots if ep.streaming \
            else ep.route.max_inflight_per_container
        return Container(self.app_spec, ep.name, self.store_root, slots=slots,
                         env=self.worker_env(), clock=self.clock.monotonic,
                         streaming=ep.streaming)

    def _new(self, endpoint: str) -> Container:
        """A new container of `endpoint`, listed in its pool, not started."""
        ep, c = self.endpoints[endpoint], self._make(endpoint)
        # The worker resolves LATEST itself a moment later; a publish in between only makes
        # this label stale, and the next rollout check corrects it.
        c.build = self._build_of(endpoint)
        c.unit = endpoint   # the worker runs the endpoint; the unit routes its results
        c.on_change = functools.partial(self._changed, ep)
        ep.containers.append(c)
        return c

    def _changed(self, ep: EndpointPool) -> None:
        """A container of `ep` changed state: its batcher looks again, and so do jobs; a
        container being recycled drains once its replacement is ready."""
        if ep.batcher is not None:
            ep.batcher.notify()
        if ep.recycling is not None and not self._closing:
            self.recycler.tick(ep, measure=False)
        self.jobs.wake()

    def _task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, ep: EndpointPool) -> None:
        ep.events["start"] += 1
        self._task(self._run(ep, self._new(ep.name)))

    def _drain(self, ep: EndpointPool, c: Container, event: str) -> None:
        """Stop routing to `c` and stop it once its in-flight work finished."""
        ep.events[event] += 1
        self._task(c.stop())

    async def _run(self, ep: EndpointPool, c: Container) -> None:
        """Start a container; when it fails, replace it (with backoff) if under the floor."""
        await c.start()
        await c.wait_ready()
        started = c.state in (State.READY, State.BUSY)
        if started:
            ep.started(c.timings_s.get("total", 0.0), c.build)
            log.info("container %s of %s ready: %s", c.id, ep.name,
                     cold_start_text(c.timings_s))
        await c.wait_exit()
        ep.containers.remove(c)
        if self._closing or c.state == State.STOPPED:
            return
        ep.events["failed"] += 1
        ep.last_error = c.error
        out = health.after_exit(started, ep.failures, len(ep.live()), ep.floor)
        ep.failures = out.failures
        if not started:
            ep.failed_s = self.clock.monotonic()
        if out.replace_in_s is None:
            log.warning("container %s of %s failed (%s); above the floor, not replaced",
                        c.id, ep.name, c.error)
            self.jobs.wake()   # failing now? its jobs hear it (`failing`)
            return
        log.warning("container %s of %s failed (%s); replacing in %.1fs", c.id, ep.name,
                    c.error, out.replace_in_s)
        ep.replacing += 1
        self.jobs.wake()
        try:
            await self.clock.sleep(out.replace_in_s)
        finally:
            ep.replacing -= 1
        if not self._closing and len(ep.live()) < ep.floor:
            self._spawn(ep)

    def _roll(self, ep: EndpointPool) -> bool:
        """Carry out `ep`'s rollout step (`floodway.runtime.rollout.plan_rollout`): new
        containers on the latest build, the old ones drained once as many new ones are
        ready; True while a rollout is in progress (no other scaling then)."""
        plan = ep.rollout_plan()
        if plan is None:
            return False
        if plan.starts:
            log.info("build %s of %s published: warming %d new containers",
                     plan.latest[:12], ep.name, plan.starts)
        for _ in range(plan.starts):
            self._spawn(ep)
        for cid in plan.drain:   # stop routing to them; in-flight work finishes
            if (victim := ep.by_id(cid)) is not None:
                self._drain(ep, victim, "rolled")
        return True

    def _carry_out(self, ep: EndpointPool, plan: Plan) -> None:
        for action in plan.actions:
            if action.do == Do.START:
                self._spawn(ep)
            elif (victim := ep.by_id(action.container or "")) is not None:
                log.info("container %s of %s: scaling down (%s)", victim.id, ep.name,
                         action.reason)
                self._drain(ep, victim, "scale_down")

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        for ep in self.endpoints.values():
            ep.new_batcher(on_batch=self._on_batch, on_send=lambda _c, ep=ep: self._sent(ep),
                           on_free=self.jobs.wake).start()
            self._carry_out(ep, ep.reconcile(self.clock.monotonic()))
        if self.tick_s is not None:
            self._ticker = asyncio.create_task(self._tick_forever(self.tick_s))

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once `readiness()` says ready, False after `timeout_s` clock seconds."""
        end = self.clock.monotonic() + timeout_s
        while self.clock.monotonic() < end:
            if self.readiness()["ready"]:
                return True
            await self.clock.sleep(0.05)
        return False

    async def stop(self) -> None:
        self._closing = True
        if self._ticker:
            self._ticker.cancel()
        await asyncio.gather(*(ep.batcher.stop() for ep in self.endpoints.values()
                               if ep.batcher), return_exceptions=True)
        await asyncio.gather(*(c.stop() for ep in self.endpoints.values()
                               for c in ep.containers), return_exceptions=True)
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------------ warm-pool policy
    def record_arrival(self, endpoint: str, now_s: float | None = None) -> None:
        """Count one user request (never warm-ups or probes) in the traffic record, at unix
        time `now_s` (default the clock's wall time); `endpoint` may be a lane's unit key."""
        if (ep := resolve(self.endpoints, endpoint)) is not None:
            ep.traffic.record(self.clock.wall() if now_s is None else now_s)

    def cap(self, endpoint: str) -> int:
        """Most live containers for `endpoint`: `max_containers`, and no more than this
        machine has cores for, or than `--containers` pins if that is more (spills to cold
        containers never add containers the cores cannot run)."""
        cap = self.endpoints[endpoint].endpoint.warm.container_cap
        return min(cap, max(self.machine_cap, self.pinned or 0))

    def _retarget(self, ep: EndpointPool, wall_s: float) -> None:
        ep.retarget(wall_s, self.cap(ep.name), pinned=self.pinned, params=POLICY_PARAMS,
                    backlog_rows=job_backlog(self.endpoints, ep, self.jobs.rows))

    def _sent(self, ep: EndpointPool) -> None:
        """A batch went to a container: the buffer, and room for jobs in the queue."""
        self._buffer(ep)
        self.jobs.wake()

    def _buffer(self, ep: EndpointPool) -> None:
        """A batch went to a container: with a buffer due (the endpoint is active), keep
        `buffer_containers` idle ones on top of the busy ones now, not at the next tick
        (Modal's buffer, and the simulator's). Only starts: scaling down waits for a tick."""
        if not ep.target.buffer_containers or self.pinned is not None:
            return
        keep = ep.keep(self.cap(ep.name))
        if keep <= ep.floor or ep.rolling():
            return          # the common case on a hot path; or a rollout sets the count
        ep.floor = keep
        plan = ep.reconcile(self.clock.monotonic())
        self._carry_out(ep, Plan(tuple(a for a in plan.actions if a.do == Do.START)))

    # ------------------------------------------------------------------ scaling and health
    def start_cold(self, endpoint: str) -> bool:
        """Start one more container (spill_cold) unless at `max_containers` or while
        containers of this endpoint are failing to start (the replacement backoff rules)."""
        ep = resolve(self.endpoints, endpoint)
        if ep is None or ep.failures or len(ep.live()) >= self.cap(ep.name):
            return False
        self._spawn(ep)
        return True

    async def _tick_forever(self, every_s: float) -> None:
        while True:
            await self.clock.sleep(every_s)
            self.tick(self.clock.monotonic())

    def tick(self, now: float) -> None:
        """Follow the warm target at monotonic time `now`: roll onto a newly published
        build; else kill stuck and silent containers, recycle one past its limits, then
        start containers up to the floor or drain idle ones past it (`reconcile`)."""
        wall = self.clock.wall()
        if now - self._builds_checked_s >= BUILD_CHECK_S:
            self._builds_checked_s = now
            for ep in self.endpoints.values():
                ep.latest = self._build_of(ep.name)
        self.jobs.refresh()
        for ep in self.endpoints.values():
            self._retarget(ep, wall)
            if self._roll(ep):
                continue
            ep.check_health(now)
            self.recycler.tick(ep)
            self._carry_out(ep, ep.reconcile(now))

    # ------------------------------------------------------------------ Backend protocol
    def add_batch_listener(self, listener: BatchListener) -> None:
        """Call `listener(endpoint, rows, compute_s, padded_tokens, service_s)` for every
        completed batch."""
        self._listeners.append(listener)

    def _on_batch(self, result: BatchResult, c: Any) -> None:
        # The router-side service time (compute plus encoding and the pipe): the decision
        # promises answers, so it must count all that a batch costs, not only the model.
        self.endpoints[getattr(c, "unit", c.endpoint)].record_batch(result.rows,
                                                result.service_s or result.compute_s,
                                                getattr(result, "padded_tokens", 0))
        for listener in self._listeners:
            listener(c.endpoint, result.rows, result.compute_s,
                     getattr(result, "padded_tokens", 0), result.service_s or result.compute_s)

    def snapshot(self, endpoint: str) -> Snapshot:
        """`endpoint`'s (or a lane's, by unit key) state for `decide()`; an endpoint with lanes
        named plainly: its last lane's (`resolve`)."""
        ep = resolve(self.endpoints, endpoint)
        if ep is None:
            raise KeyError(endpoint)
        self._refuse_failing(ep)
        return ep.snapshot(self.clock.monotonic(), self.cap(ep.name))

    def stream_snapshot(self, endpoint: str) -> StreamSnapshot:
        """A streaming endpoint's state for `decide_stream()`; raises FloodwayError for an
        endpoint that does not stream, StartFailing as `snapshot`."""
        self._refuse_failing(self.endpoints[endpoint])
        return self.endpoints[endpoint].stream_snapshot(self.clock.monotonic(),
                                                        self.cap(endpoint))

    def failing(self, endpoint: str) -> StartFailing | None:
        """Why `endpoint` (every lane of one with lanes) cannot serve now, its starts
        failing (`EndpointPool.failing`), as the error its requests get; None if it can."""
        units = [self.endpoints[endpoint]] if endpoint in self.endpoints else \
            lanes_of(self.endpoints, endpoint)
        why = [ep.failing() for ep in units]
        if not units or None in why:
            return None
        ep = units[0]
        wait_s = ep.failed_s + health.backoff_s(ep.failures - 1) - self.clock.monotonic()
        return StartFailing(str(why[0]), retry_after_s=max(1.0, wait_s))

    def _refuse_failing(self, ep: EndpointPool) -> None:
        """Raise StartFailing (503) for an endpoint whose starts keep failing; first, for a
        scaled-to-zero one (no replacement comes by itself) whose backoff has passed,
        start one container again: a request asks for a start, as it does from zero."""
        if ep.failing() is None:
            return
        now = self.clock.monotonic()
        if not ep.floor and not ep.live() and not ep.replacing and not self._closing and \
                now - ep.failed_s >= health.backoff_s(ep.failures - 1):
            self._spawn(ep)
            if ep.failing() is None:
                return
        err = self.failing(ep.name)
        if err is not None:
            raise err

    def enqueue(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                priority: int = 1, tenant: str = "anonymous") -> Pending | StreamPending:
        """Queue `inputs` now (synchronously: the next decision sees them); returns the
        awaitable of one result per input (an output, or the exception that failed it
        alone; TimeoutError past `timeout_s`, the queued items withdrawn) that tells whether
        any left the queue for a container (`Pending.dispatched()`), a `StreamPending` for a
        streaming endpoint. Raises Unavailable when the endpoint is not started. An
        endpoint with lanes named plainly: the lane its inputs take."""
        ep = resolve(self.endpoints, endpoint, inputs, defined=self.app.endpoints.get(endpoint))
        if ep is None or ep.batcher is None:
            raise Unavailable(f"endpoint {endpoint!r} is not started", retry_after_s=1.0)
        return ep.enqueue(f"r{next(self._request_ids)}", inputs, timeout_s=timeout_s,
                          priority=priority, tenant=tenant, keep_s=JOB_TIMEOUT_S)

    def readiness(self) -> dict[str, Any]:
        """``{"ready", "endpoints", "queues", "warm_targets", "container_events",
        "failures", "sequences", "lanes"}`` (`readiness`)."""
        return readiness(self.endpoints, self.app.endpoints)

    # ------------------------------------------------------------------ the job queue
    def watch_jobs(self, backlog: Callable[[], dict[str, int]],
                   wake: Callable[[], None]) -> None:
        """`floodway.jobs.feed.JobCapacity` (`JobLink`)."""
        self.jobs.watch(backlog, wake)

    def job_room(self, endpoint: str) -> int:
        """Rows of job work `endpoint` takes now (`EndpointPool.job_room`; summed over the
        lanes of an endpoint with lanes)."""
        if endpoint in self.endpoints:
            return self.endpoints[endpoint].job_room()
        return sum(ep.job_room() for ep in lanes_of(self.endpoints, endpoint))


__all__ = ["BUILD_CHECK_S", "POLICY_PARAMS", "TICK_S", "JobLink", "Pending", "Pool",
           "job_backlog", "lanes_of", "readiness", "resolve"]
