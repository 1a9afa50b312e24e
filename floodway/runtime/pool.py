"""The local pool: containers per endpoint, scaled, replaced and stopped; the local Backend.

Per endpoint the pool keeps the floor that the warm-pool policy asks for
(`floodway.warmers.desired`: `min_containers` from the config, scheduled windows and the
predictive policy; `buffer_containers` while the endpoint is active), recomputed every tick
from the measured cold start and service time and the endpoint's traffic history. As on
Modal, the buffer is idle containers on top of those serving inputs: the floor is
max(min_containers, busy + buffer_containers) (`WarmTarget.keep`, as in the simulator),
checked as each batch goes to a container and at every tick. `--containers N` pins the
floor instead. It starts more on `spill_cold` up to `max_containers`, and scales idle ones
down after the target's `scaledown_window_s`: it picks the longest-idle container above the
floor, stops routing to it (draining) and lets in-flight work finish. Only user batches
reset a container's idle timer (warm-up runs before it is ready; probes never reach it).
A container that dies is replaced while the pool is under its floor, with exponential
backoff so a broken build cannot crash-loop the machine. A container with work in flight and
no completion for `Route.stuck_after_s` is declared stuck, drained, killed and replaced;
its batches are retried once elsewhere (see `floodway.routers.batcher`). An idle container
answers a liveness ping every `PING_EVERY_S`; one that stays silent (a hung or stopped
process) is replaced the same way, before a request finds it.

`snapshot()` describes an endpoint for `floodway.routers.decide.decide`: containers with
their free slots and backlog, queue length, the service time fitted from measured batches,
and the measured cold start.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from floodway.build.prefetch import THREADS_ENV
from floodway.build.store import ArtifactStore
from floodway.config import VALIDATED_ENV
from floodway.deploy import NO_MODAL_ENV
from floodway.errors import FloodwayError, Unavailable
from floodway.functions.app import App
from floodway.routers.batcher import Batcher
from floodway.routers.decide import LIVE, ContainerView, ServiceTime, Snapshot
from floodway.runtime.container import BatchResult, Container, State
from floodway.warmers.history import TrafficHistory
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.target import (
    History,
    Measured,
    PolicyState,
    WarmTarget,
    desired,
    minute_of,
)

log = logging.getLogger("floodway.pool")
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
TICK_S = 0.5
# Idle containers answer a liveness ping every PING_EVERY_S; an idle worker's reply needs no
# model work, so one that is silent for PING_TIMEOUT_S (or stuck_after_s, if shorter) is hung.
PING_EVERY_S = 2.0
PING_TIMEOUT_S = 10.0
# The policy runs every TICK_S: a pre-warm due before the next run is asked for now.
POLICY_PARAMS = PredictiveParams(tick_s=TICK_S)
# Until batches are measured: a conservative CPU-class guess, replaced by the fit.
SERVICE_PRIOR = ServiceTime(per_row_s=0.005, per_batch_s=0.02)
COLD_START_PRIOR_S = 10.0
SAMPLES = 64
# Batches in a container's pipe: one running and the next ready, so the worker never waits
# on the router between batches; more would only queue inside the container.
PIPELINE_DEPTH = 2
BUILD_CHECK_S = 2.0   # how often a newly published build is looked for
HISTORY_MIN = 240   # the hybrid histogram's range (Shahrad et al. 2020, section 4.2)


def start_remaining_s(measured_s: float, elapsed_s: float) -> float:
    """Seconds until a container that has been starting for `elapsed_s` is ready, when cold
    starts measured `measured_s`. A start that has overrun the measurement (a loaded machine
    starts slower) is not about to finish: it is assumed to need as long again as it has
    taken, never zero, so that work is not queued for capacity that is not there."""
    return measured_s - elapsed_s if elapsed_s < measured_s else elapsed_s


class Pending:
    """What `Pool.enqueue` returns: await it for the results (at most its timeout: then its
    inputs are withdrawn). `dispatched()` is True once any input has left the router's queue
    for a container. `adopt()` keeps the inputs past that timeout: a task with one result
    (output or exception) per input, for a job that takes the request over."""

    def __init__(self, futures: list[asyncio.Future], dispatched: Callable[[], bool],
                 wait: Callable[[Pending], Awaitable[list[Any]]]):
        self.futures, self.dispatched, self.adopted = futures, dispatched, False
        self._wait = wait(self)

    def __await__(self):
        return self._wait.__await__()

    def adopt(self) -> asyncio.Task:
        self.adopted = True

        async def results() -> list[Any]:
            await asyncio.wait(self.futures)
            return [f.exception() or f.result() for f in self.futures]
        return asyncio.ensure_future(results())


class Pool:
    """Local containers for every endpoint of `app`; implements the http `Backend` protocol.

    `containers`: pin the floor per endpoint (None: follow the warm-pool policy), capped at
    `WarmPool.max_containers`. `history`: where user arrivals are recorded per minute
    (None: in memory only).
    """

    def __init__(self, app: App, app_spec: str, store_root: str, *,
                 containers: int | None = None, history: TrafficHistory | None = None):
        self.app, self.app_spec, self.store_root = app, app_spec, store_root
        self.pinned = containers
        self.history = history
        self.targets: dict[str, WarmTarget] = {}
        self._policy: dict[str, PolicyState] = {}
        self._counts: dict[str, dict[int, int]] = {ep.name: {} for ep in app}
        self._last_arrival_s: dict[str, float] = {}
        self.floor: dict[str, int] = {}
        total = sum(containers if containers is not None else
                    max(1, ep.warm.min_containers + ep.warm.buffer_containers) for ep in app)
        # Share the cores: each container's ONNX Runtime gets cpu_count / containers threads
        # (containers of the configured warm pool: min + buffer), unless the router's own
        # environment sets FLOODWAY_ORT_THREADS.
        cores = os.cpu_count() or 1
        self.threads = int(os.environ.get(THREADS_ENV) or 0) or max(1, cores // max(1, total))
        # Locally a container is a process that needs its cores: more containers than the
        # machine has cores for add no capacity, they slow the warm ones (measured with
        # benchmarks/burst.py on 2 cores). On Modal each container has its own GPU.
        self.machine_cap = max(1, cores // self.threads)
        self.containers: dict[str, list[Container]] = {ep.name: [] for ep in app}
        self.batchers: dict[str, Batcher] = {}
        self.samples: dict[str, deque[tuple[int, float]]] = {
            ep.name: deque(maxlen=SAMPLES) for ep in app}
        self.cold_starts: dict[str, deque[float]] = {ep.name: deque(maxlen=8) for ep in app}
        self.service: dict[str, ServiceTime] = {ep.name: SERVICE_PRIOR for ep in app}
        self._failures: dict[str, int] = {ep.name: 0 for ep in app}
        self._replacing: dict[str, int] = {ep.name: 0 for ep in app}
        self.store = ArtifactStore(store_root)
        self._builds_checked_s = 0.0
        self._latest: dict[str, str | None] = {}
        self._closing = False
        self._tasks: set[asyncio.Task] = set()
        self._request_ids = itertools.count(1)
        # Totals since start: container start, failed, stuck, scale_down (for /metrics).
        self.event_counts: dict[str, Counter[str]] = {ep.name: Counter() for ep in app}
        self._ticker: asyncio.Task | None = None
        # Called with (endpoint, rows, compute_s) for every completed batch (metrics).
        self.on_batch_metrics: Callable[[str, int, float], None] | None = None
        for ep in app:
            self._retarget(ep.name, time.time())

    # ------------------------------------------------------------------ lifecycle
    def _live(self, endpoint: str) -> list[Container]:
        return [c for c in self.containers[endpoint]
                if c.state not in (State.STOPPED, State.FAILED, State.DRAINING)]

    def worker_env(self) -> dict[str, str]:
        """What a container process's environment adds to the router's: this pool's share of
        the cores as ONNX Runtime threads, no Modal objects, and the definition marked as
        already validated (by this process)."""
        return {THREADS_ENV: str(self.threads), NO_MODAL_ENV: "1", VALIDATED_ENV: "1"}

    def _build_of(self, endpoint: str) -> str | None:
        """The key of the endpoint's latest published build (None if unreadable now)."""
        try:
            return self.store.latest(endpoint).name
        except FloodwayError:
            return None

    def _new(self, endpoint: str) -> Container:
        ep = self.app[endpoint]
        c = Container(self.app_spec, endpoint, self.store_root,
                      slots=ep.route.max_inflight_per_container, env=self.worker_env())
        # The worker resolves LATEST itself a moment later; a publish in between only makes
        # this label stale, and the next rollout check corrects it.
        c.build = self._build_of(endpoint)
        c.on_change = self.batchers[endpoint].notify if endpoint in self.batchers else None
        self.containers[endpoint].append(c)
        return c

    def _event(self, endpoint: str, what: str, cid: int) -> None:
        self.event_counts[endpoint][what] += 1

    async def _run(self, c: Container) -> None:
        """Start a container; when it fails, replace it (with backoff) if under the floor."""
        await c.start()
        await c.wait_ready()
        started = c.state in (State.READY, State.BUSY)
        if started:
            self._failures[c.endpoint] = 0
            self.cold_starts[c.endpoint].append(c.timings_s.get("total", 0.0))
            log.info("container %s of %s ready in %.2fs %s", c.id, c.endpoint,
                     c.timings_s.get("total", 0), c.timings_s)
        await c.wait_exit()
        self.containers[c.endpoint].remove(c)
        if self._closing or c.state == State.STOPPED:
            return
        # Only a failed *start* counts towards the backoff (and stops new starts): one that
        # served and then died (killed, crashed) says nothing about the next start.
        n = 0 if started else self._failures[c.endpoint]
        if not started:
            self._failures[c.endpoint] = n + 1
        self._event(c.endpoint, "failed", c.id)
        if len(self._live(c.endpoint)) >= self.floor[c.endpoint]:
            log.warning("container %s of %s failed (%s); above the floor, not replaced",
                        c.id, c.endpoint, c.error)
            return
        delay = BACKOFF_S[min(n, len(BACKOFF_S) - 1)]
        log.warning("container %s of %s failed (%s); replacing in %.1fs", c.id, c.endpoint,
                    c.error, delay)
        self._replacing[c.endpoint] += 1
        try:
            await asyncio.sleep(delay)
        finally:
            self._replacing[c.endpoint] -= 1
        if not self._closing and len(self._live(c.endpoint)) < self.floor[c.endpoint]:
            self._spawn(self._new(c.endpoint))

    def _fill(self, endpoint: str, live: list[Container]) -> bool:
        """Start containers up to the floor (a window opens, traffic grew, a buffer is
        due: warm up ahead of demand), unless starts are failing; True if any started."""
        short = self.floor[endpoint] - len(live)
        if short <= 0 or self._failures[endpoint] or self._replacing[endpoint]:
            return False
        for _ in range(short):
            self._spawn(self._new(endpoint))
        return True

    def _buffer(self, endpoint: str) -> None:
        """A batch went to a container: with a buffer due (the endpoint is active), keep
        `buffer_containers` idle ones on top of the busy ones now, not at the next tick
        (Modal's buffer, and the simulator's `Pool.assign`)."""
        t = self.targets.get(endpoint)
        if t is None or not t.buffer_containers or self.pinned is not None:
            return
        live = self._live(endpoint)
        keep = t.keep(sum(1 for c in live if c.inflight), self.cap(endpoint))
        if keep <= self.floor[endpoint]:
            return                      # the common case on a hot path: nothing to do
        latest = self._latest.get(endpoint)
        if latest is not None and any(c.build != latest for c in live):
            return                      # a rollout is replacing them: it sets the count
        self.floor[endpoint] = keep
        self._fill(endpoint, live)

    def _spawn(self, c: Container) -> None:
        self._event(c.endpoint, "start", c.id)
        task = asyncio.create_task(self._run(c))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        for ep in self.app:
            b = Batcher(ep.name, max_batch_rows=ep.batching.max_batch_rows,
                        wait_ms=ep.batching.wait_ms,
                        pick=lambda idle, name=ep.name: self._pick(name, idle),
                        on_batch=self._on_batch,
                        on_send=lambda c, name=ep.name: self._buffer(name))
            self.batchers[ep.name] = b
            b.start()
            for _ in range(self.floor[ep.name]):
                self._spawn(self._new(ep.name))
        self._ticker = asyncio.create_task(self._tick_forever())

    async def wait_ready(self, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            if self.readiness()["ready"]:
                return True
            await asyncio.sleep(0.05)
        return False

    async def stop(self) -> None:
        self._closing = True
        if self._ticker:
            self._ticker.cancel()
        await asyncio.gather(*(b.stop() for b in self.batchers.values()),
                             return_exceptions=True)
        await asyncio.gather(*(c.stop() for cs in self.containers.values() for c in cs),
                             return_exceptions=True)
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------------ warm-pool policy
    def record_arrival(self, endpoint: str, now_s: float | None = None) -> None:
        """Count one user request (never warm-ups or probes) in the traffic history."""
        now_s = time.time() if now_s is None else now_s
        self._last_arrival_s[endpoint] = now_s
        if self.history is not None:
            self.history.record(endpoint, now_s)
        else:
            minute = minute_of(now_s)
            counts = self._counts[endpoint]
            counts[minute] = counts.get(minute, 0) + 1
            for old in [m for m in counts if m < minute - HISTORY_MIN]:
                del counts[old]

    def _history(self, endpoint: str, now_s: float) -> History:
        exact = self._last_arrival_s.get(endpoint)
        if self.history is not None:
            h = self.history.history(endpoint, now_s, HISTORY_MIN)
            return History(h.start_minute, h.counts, exact)
        counts = self._counts[endpoint]
        end = minute_of(now_s)
        start = end - HISTORY_MIN + 1
        return History(start, np.asarray([counts.get(m, 0) for m in range(start, end + 1)]),
                       exact)

    def measured(self, endpoint: str) -> Measured:
        mbr = self.app[endpoint].batching.max_batch_rows
        return Measured.from_batches(self.cold_start_s(endpoint),
                                     self.service[endpoint].seconds(mbr), mbr)

    def cap(self, endpoint: str) -> int:
        """Most live containers for `endpoint`: `max_containers`, and no more than this
        machine has cores for (unless `--containers` pins more)."""
        cap = self.app[endpoint].warm.container_cap
        return cap if self.pinned is not None else min(cap, self.machine_cap)

    def _retarget(self, endpoint: str, now_s: float) -> None:
        ep = self.app[endpoint]
        if self.pinned is not None:
            n = min(self.pinned, ep.warm.container_cap)
            self.targets[endpoint] = WarmTarget(n, 0, ep.warm.scaledown_window_s,
                                                f"pinned to {n} (--containers)")
        else:
            target, self._policy[endpoint] = desired(
                now_s, self._history(endpoint, now_s), ep.warm, self.measured(endpoint),
                self._policy.get(endpoint), params=POLICY_PARAMS)
            self.targets[endpoint] = target
        t = self.targets[endpoint]
        busy = sum(1 for c in self._live(endpoint) if c.inflight)
        self.floor[endpoint] = t.keep(busy, self.cap(endpoint))

    # ------------------------------------------------------------------ scaling and health
    def start_cold(self, endpoint: str) -> bool:
        """Start one more container (spill_cold) unless at `max_containers` or while
        containers of this endpoint are failing to start (the replacement backoff rules)."""
        if self._failures[endpoint] or \
                len(self._live(endpoint)) >= self.cap(endpoint):
            return False
        self._spawn(self._new(endpoint))
        return True

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.tick(time.monotonic())

    def _roll(self, endpoint: str) -> bool:
        """A new build was published: warm as many new containers as there are old ones,
        and drain the old ones once that many new ones are ready, so the warm count never
        dips. True while a rollout is in progress (no other scaling then)."""
        latest = self._latest.get(endpoint)
        live = self._live(endpoint)
        old = [c for c in live if c.build != latest]
        if latest is None or not old:
            return False
        new = [c for c in live if c.build == latest]
        if len(new) < len(old) and not self._failures[endpoint]:
            log.info("build %s of %s published: warming %d new containers", latest[:12],
                     endpoint, len(old) - len(new))
            for _ in range(len(old) - len(new)):
                self._spawn(self._new(endpoint))
        if sum(c.state in (State.READY, State.BUSY) for c in new) >= len(old):
            for victim in old:   # stop routing to them; in-flight work finishes
                self._event(endpoint, "rolled", victim.id)
                task = asyncio.create_task(victim.stop())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return True

    def tick(self, now: float) -> None:
        """Follow the warm target: start containers up to the floor, scale idle ones down
        past it after the scale-down window; roll onto a newly published build; drain and
        kill stuck ones."""
        wall = time.time()
        if now - self._builds_checked_s >= BUILD_CHECK_S:
            self._builds_checked_s = now
            self._latest = {ep.name: self._build_of(ep.name) for ep in self.app}
        for ep in self.app:
            self._retarget(ep.name, wall)
            if self._roll(ep.name):
                continue
            for c in list(self.containers[ep.name]):
                if c.inflight and c.state in (State.READY, State.BUSY) \
                        and now - c.last_progress_s > ep.route.stuck_after_s:
                    why = (f"stuck: {len(c.inflight)} batches in flight and no completion "
                           f"for {now - c.last_progress_s:.1f}s (stuck_after_s="
                           f"{ep.route.stuck_after_s:g})")
                    log.warning("container %s of %s %s; replacing it", c.id, ep.name, why)
                    self._event(ep.name, "stuck", c.id)
                    c.kill(why)
                elif not c.inflight and c.state == State.READY:
                    self._check_alive(ep, c, now)
            live = self._live(ep.name)
            if self._fill(ep.name, live):
                continue
            window_s = self.targets[ep.name].scaledown_window_s
            idle = [c for c in live if c.state == State.READY and not c.inflight
                    and now - c.idle_since_s >= window_s]
            if idle and len(live) > self.floor[ep.name]:
                victim = min(idle, key=lambda c: c.idle_since_s)
                log.info("container %s of %s idle for %.0fs: scaling down", victim.id,
                         ep.name, now - victim.idle_since_s)
                self._event(ep.name, "scale_down", victim.id)
                task = asyncio.create_task(victim.stop())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ Backend protocol
    @staticmethod
    def _free(c: Container) -> int:
        """Slots the router may fill now: a worker runs one batch at a time, so beyond
        `PIPELINE_DEPTH` batches in its pipe more slots add no throughput, only work that
        can no longer be batched fuller, moved to a new container or dropped at its deadline."""
        return min(c.free_slots, max(0, PIPELINE_DEPTH - len(c.inflight)))

    def _pick(self, endpoint: str, idle_only: bool = False) -> Container | None:
        free = [c for c in self.containers[endpoint]
                if self._free(c) > 0 and not (idle_only and c.inflight)]
        return min(free, key=lambda c: len(c.inflight)) if free else None

    def _on_batch(self, result: BatchResult, c: Any) -> None:
        # The router-side service time (compute plus encoding and the pipe): the decision
        # promises answers, so it must count all that a batch costs, not only the model.
        self.samples[c.endpoint].append((result.rows, result.service_s or result.compute_s))
        self.service[c.endpoint] = ServiceTime.fit(list(self.samples[c.endpoint]),
                                                   SERVICE_PRIOR)
        if self.on_batch_metrics:
            self.on_batch_metrics(c.endpoint, result.rows, result.compute_s)

    def cold_start_s(self, endpoint: str) -> float:
        seen = self.cold_starts[endpoint]
        return max(seen) if seen else COLD_START_PRIOR_S

    def snapshot(self, endpoint: str) -> Snapshot:
        ep, b = self.app[endpoint], self.batchers[endpoint]
        svc, cold = self.service[endpoint], self.cold_start_s(endpoint)
        now = time.monotonic()
        starting = [now - c.history[0][0] for c in self.containers[endpoint]
                    if c.state in (State.STARTING, State.WARMING)]
        views = []
        for c in self.containers[endpoint]:
            backlog = sum(svc.seconds(r) for r in c.inflight_rows.values())
            ready_in = start_remaining_s(cold, now - c.history[0][0]) \
                if c.state in (State.STARTING, State.WARMING) else 0.0
            views.append(ContainerView(str(c.id), str(c.state), self._free(c),
                                       min(c.slots, PIPELINE_DEPTH),
                                       backlog, ready_in))
        cap = self.cap(endpoint)
        if self._failures[endpoint]:
            # Containers are failing to start: spilling to cold would only add failures.
            cap = min(cap, sum(1 for v in views if v.state in LIVE))
        # A start still running has taken at least this long: a cold start is no shorter.
        cold = max([cold, *starting])
        return Snapshot(now_s=now, containers=tuple(views), service=svc, cold_start_s=cold,
                        max_batch_rows=ep.batching.max_batch_rows,
                        max_queue=ep.route.max_queue, max_containers=cap,
                        spill=ep.route.spill, queued=b.queued, queued_rows=b.queued_rows,
                        tenant_queued=b.tenant_queued(),
                        queued_rows_by_priority=tuple(b.rows_by_priority),
                        queued_by_priority=tuple(b.requests_by_priority),
                        arrival_rows_per_s=b.arrival_rows_per_s(now),
                        batch_wait_s=ep.batching.wait_ms / 1000.0)

    def enqueue(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                priority: int = 1, tenant: str = "anonymous") -> Pending:
        """Queue `inputs` now (synchronously, so the next decision already sees them) and
        return an awaitable of their results, as `run`, that also tells whether any of them
        has left the queue for a container (`Pending.dispatched()`)."""
        if endpoint not in self.batchers:
            raise Unavailable(f"endpoint {endpoint!r} is not started", retry_after_s=1.0)
        loop = asyncio.get_running_loop()
        batcher, request_id = self.batchers[endpoint], f"r{next(self._request_ids)}"
        futures = batcher.submit(request_id, inputs, deadline_s=loop.time() + timeout_s,
                                 priority=priority, tenant=tenant)
        return Pending(futures, lambda: batcher.waiting(request_id) < len(inputs),
                       lambda p: self._results(endpoint, futures, timeout_s, p))

    async def run(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                  priority: int = 1, tenant: str = "anonymous") -> list[Any]:
        """Queue `inputs` for the endpoint's batcher and wait at most `timeout_s`.

        Returns one entry per input: its output, or the exception that failed it alone
        (EndpointError, Unavailable). Raises TimeoutError when the deadline passes first;
        its queued items are then withdrawn before they reach a model.
        """
        return await self.enqueue(endpoint, inputs, timeout_s=timeout_s, priority=priority,
                                  tenant=tenant)

    @staticmethod
    async def _results(endpoint: str, futures: list[asyncio.Future], timeout_s: float,
                       owner: Pending | None = None) -> list[Any]:
        try:
            done, pending = await asyncio.wait(futures, timeout=timeout_s)
        finally:
            if owner is None or not owner.adopted:
                for f in futures:
                    f.cancel()   # no-op for finished ones; withdraws queued ones
        if pending or any(isinstance(f.exception(), TimeoutError) for f in futures):
            raise TimeoutError(f"endpoint {endpoint!r} missed the deadline of {timeout_s:g}s")
        return [f.exception() or f.result() for f in futures]

    def _check_alive(self, ep: Any, c: Container, now: float) -> None:
        """Ping an idle container every PING_EVERY_S; one that has not answered within
        ``min(stuck_after_s, PING_TIMEOUT_S)`` (a hung or stopped process) is replaced
        before a request finds it."""
        if c.ping_sent_s is None:
            if now - c.last_pong_s >= PING_EVERY_S:
                c.ping()
            return
        waited = now - c.ping_sent_s
        if waited > min(ep.route.stuck_after_s, PING_TIMEOUT_S):
            why = f"unresponsive: no answer to a liveness ping for {waited:.1f}s while idle"
            log.warning("container %s of %s %s; replacing it", c.id, ep.name, why)
            self._event(ep.name, "stuck", c.id)
            c.kill(why)

    def readiness(self) -> dict[str, Any]:
        eps = {name: [c.describe() for c in cs] for name, cs in self.containers.items()}
        # An endpoint scaled to zero by its policy is ready: requests start a container.
        ready = all(any(c["state"] in ("ready", "busy") for c in cs) or self.floor[name] == 0
                    for name, cs in eps.items())
        queues = {name: {"queued": b.queued, "queued_rows": b.queued_rows,
                         "dropped": dict(b.dropped)} for name, b in self.batchers.items()}
        targets = {name: {"min_containers": t.min_containers,
                          "buffer_containers": t.buffer_containers,
                          "scaledown_window_s": t.scaledown_window_s, "reason": t.reason}
                   for name, t in self.targets.items()}
        events = {name: dict(c) for name, c in self.event_counts.items()}
        return {"ready": ready, "endpoints": eps, "queues": queues, "warm_targets": targets,
                "container_events": events}
