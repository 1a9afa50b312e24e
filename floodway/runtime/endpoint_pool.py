"""One endpoint's state in the local pool: its containers, queue, estimators, traffic record,
warm target, and failure counters, in one object; and the views of it that the pure
functions read (`Box` for reconcile, `Liveness` for health, `Running` for rollout,
`ContainerLoad`/`QueueLoad` for the snapshot; `SequenceLoad`/`SequenceQueue` for a
streaming endpoint's `decide_stream()` snapshot).

A streaming endpoint measures its sequences, not batches: its batcher's `SequenceBook`
(`floodway.routers.sequences`) feeds a `GenerationEstimator` (prefill, decode steps, tokens
per request), which sizes its warm pool (`measured_generation`) and is the model of its
stream snapshot; a whole stream's duration says nothing of a container's speed, so none
goes into the batch `ServiceEstimator`. An endpoint taking text costs in tokens
(`floodway.routers.tokens.TokenCost`): batches cut by tokens too, its fit on padded tokens
and rows, tokens queued and in flight in its snapshot.

It decides nothing and starts nothing: `floodway.runtime.pool.Pool` asks it for a plan and
carries the plan out.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from floodway.build.starts import known_starts, remember_start
from floodway.build.store import ArtifactStore
from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.core.estimators import ColdStartEstimator, ServiceEstimator, measured
from floodway.core.generation import GenerationEstimator, measured_generation
from floodway.core.priors import ROW_TOKENS_PRIOR, TEXT_SERVICE_PRIOR
from floodway.core.reconcile import LIVE, Box, Plan, reconcile
from floodway.core.snapshot import (
    EMPTY_QUEUE,
    STARTING,
    ContainerLoad,
    build_snapshot,
    pipeline_slots,
)
from floodway.core.stream_snapshot import (
    EMPTY_SEQUENCE_QUEUE,
    SequenceLoad,
    build_stream_snapshot,
)
from floodway.errors import FloodwayError
from floodway.routers.batch_item import JOB_BATCH_SHARE
from floodway.routers.batcher import Batcher
from floodway.routers.decide import WARM, Snapshot
from floodway.routers.decide_stream import StreamSnapshot
from floodway.routers.sequences import SequenceBook
from floodway.routers.tokens import TokenCost
from floodway.runtime import health, recycle, rollout
from floodway.runtime.pending import Pending, StreamPending, wait_results
from floodway.runtime.traffic import Traffic
from floodway.warmers.history import TrafficHistory
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.target import Measured, PolicyState, WarmTarget, desired

log = logging.getLogger("floodway.pool")

if TYPE_CHECKING:
    from floodway.functions.endpoint import Endpoint
    from floodway.runtime.container import Container


class EndpointPool:
    """The local state of `endpoint` (times: `clock.monotonic()` seconds, except the
    traffic record and the warm target, which are on `clock.wall()`).

    `containers`: every container not yet exited (any state). `batcher`: its queue, set
    when the pool starts. `service`, `cold`: the estimators that feed `decide()` and the
    warm-pool policy; `generation`: a streaming endpoint's (None for others).
    `target`/`policy`: the latest warm target and the policy's memory; `floor`: how many
    live containers the pool keeps now (`WarmTarget.keep`). `failures`: failed starts in a
    row; `replacing`: replacements waiting out their backoff. `latest`: the newest
    published build's key (None: unknown). `events`: totals since start (start, failed,
    stuck, scale_down, rolled, recycled). `recycling`: the recycle in progress
    (`floodway.runtime.recycle`; None: none).
    """

    def __init__(self, endpoint: Endpoint, *, clock: Clock = SYSTEM_CLOCK,
                 history: TrafficHistory | None = None, store: ArtifactStore | None = None):
        self.endpoint, self.name, self.clock = endpoint, endpoint.unit, clock
        self.store = store      # where its starts are known and kept (`floodway.build.starts`)
        self.containers: list[Container] = []
        self.batcher: Batcher | None = None
        self.tokens = None if endpoint.streaming else TokenCost.of(endpoint)
        self.service = ServiceEstimator() if self.tokens is None else ServiceEstimator(
            TEXT_SERVICE_PRIOR, row_tokens_prior=ROW_TOKENS_PRIOR)
        self.cold = self._cold_estimator()
        self.traffic = Traffic(endpoint.unit, history)
        self.target = WarmTarget(0, 0, endpoint.warm.scaledown_window_s, "not computed yet")
        self.policy: PolicyState | None = None
        self.floor = 0
        self.failures = 0
        self.last_error: str | None = None     # why the last container that failed did
        self.failed_s = -math.inf              # when the last start failed (monotonic)
        self.replacing = 0
        self.latest: str | None = None
        self.recycling: recycle.Retiring | None = None
        self.events: Counter[str] = Counter()
        # A streaming endpoint's container runs its sequences at once: one slot each.
        gen = endpoint.generation
        self.slots = gen.max_sequences if endpoint.streaming and gen is not None \
            else pipeline_slots(endpoint.route.max_inflight_per_container)
        self.generation = GenerationEstimator() if gen is not None else None

    def new_batcher(self, *, on_batch: Any, on_send: Any, on_free: Any = None) -> Batcher:
        """The endpoint's batcher (set as `batcher`): batches cut by `Batching`, or, for a
        streaming endpoint, each sequence sent on its own at once."""
        cfg, streams, gen = self.endpoint.batching, self.endpoint.streaming, \
            self.endpoint.generation
        book = None if gen is None else SequenceBook(gen.max_new_tokens,
                                                     estimator=self.generation)
        budget = self.tokens.max_batch_tokens if self.tokens is not None else None
        self.batcher = Batcher(self.name, max_batch_rows=1 if streams else cfg.max_batch_rows,
                               wait_ms=0 if streams else cfg.wait_ms, pick=self.pick,
                               on_batch=on_batch, on_send=on_send,
                               clock=self.clock.monotonic, streaming=streams, sequences=book,
                               on_free=on_free, cost=self.tokens, max_batch_tokens=budget,
                               batch_s=lambda r, t: self.service.fit.seconds(r, t),
                               max_low_batch_s=JOB_BATCH_SHARE * self.endpoint.route.timeout_s)
        return self.batcher

    # ------------------------------------------------------------------ containers
    def live(self) -> list[Container]:
        """Containers that are or will be serving: starting, warming, ready, busy."""
        return [c for c in self.containers if c.state in LIVE]

    def busy(self) -> int:
        """Live containers with work in flight."""
        return sum(1 for c in self.live() if c.inflight)

    def free(self, c: Container) -> int:
        """Batches the router may send to `c` now: a worker runs one batch at a time, so
        beyond its pipeline slots (`pipeline_slots`) more would only queue inside it."""
        if c.state not in WARM:
            return 0
        return max(0, self.slots - len(c.inflight))

    def pick(self, idle_only: bool = False, kv_need: int = 0) -> Container | None:
        """The container with a free slot and the least in flight (with nothing in flight
        when `idle_only`), or None: the batcher's `pick`. A streaming endpoint's sequence
        that reserves `kv_need` KV-cache tokens goes only where that fits (`kv_room`), or
        to a container with nothing in flight (its engine then decides)."""
        free = [c for c in self.containers
                if self.free(c) > 0 and not (idle_only and c.inflight)
                and (kv_need <= 0 or not c.inflight or self.kv_room(c) >= kv_need)]
        return min(free, key=lambda c: len(c.inflight)) if free else None

    def _running(self, c: Container) -> list[Any]:
        """The sequences in flight on `c` (the batcher's items), for a streaming endpoint."""
        book = self.batcher.sequences if self.batcher is not None else None
        return book.running_on(c) if book is not None else []

    def kv_used(self, c: Container) -> int:
        """KV-cache tokens reserved on `c`: what its worker last reported (`Load`), or the
        reservations of the sequences sent to it (prompt + max_new_tokens each), whichever
        is more: a report lags the sequences just sent, an estimate the engine's count."""
        return max(c.kv_cache_tokens, sum(it.cost.kv_need for it in self._running(c)))

    def kv_room(self, c: Container) -> float:
        """KV-cache tokens still free on `c` (inf when it reports no budget)."""
        if c.kv_cache_capacity <= 0:
            return math.inf
        return c.kv_cache_capacity - self.kv_used(c)

    def enqueue(self, request_id: str, inputs: list[Any], *, timeout_s: float, priority: int,
                tenant: str, keep_s: float) -> Pending | StreamPending:
        """`Pool.enqueue` on this endpoint's batcher (started): the request's Pending, a
        StreamPending for a streaming endpoint; adopted work is kept `keep_s` more."""
        batcher, gen = self.batcher, self.endpoint.generation
        assert batcher is not None
        stream = None if gen is None else StreamPending(
            self.name, len(inputs), clock=self.clock, timeout_s=timeout_s,
            max_stream_s=gen.max_stream_s)
        futures = batcher.submit(request_id, inputs,
                                 deadline_s=self.clock.monotonic() + timeout_s,
                                 priority=priority, tenant=tenant,
                                 on_chunk=stream.on_chunk if stream else None)

        def dispatched() -> bool:
            return batcher.waiting(request_id) < len(inputs)

        def keep() -> int:
            return batcher.extend(request_id, self.clock.monotonic() + keep_s)
        if stream is not None:
            stream.attach(futures, dispatched, keep)
            return stream
        return Pending(futures, dispatched,
                       lambda p: wait_results(self.name, futures, timeout_s, p), keep=keep)

    def by_id(self, cid: str) -> Container | None:
        return next((c for c in self.containers if str(c.id) == cid), None)

    @property
    def may_start(self) -> bool:
        """False while starts are failing, a replacement waits out its backoff, or a
        container's start failed and its exit is not handled yet (`Pool._run` decides its
        replacement and backoff: a start now would skip the backoff)."""
        return not self.failures and not self.replacing and not any(
            c.state == "failed" and not any(s in WARM for _, s in c.history)
            for c in self.containers)

    def _cold_estimator(self) -> ColdStartEstimator:
        """The cold-start estimate before a container of this run started: the starts that
        earlier runs timed of the latest build in `store`, else its build's probe, else the
        prior (`ColdStartEstimator.known`)."""
        if self.store is None:
            return ColdStartEstimator()
        known = known_starts(self.store, self.endpoint.name)
        cold = ColdStartEstimator.known(probe_s=known.probe_s, samples=known.samples)
        log.info("cold-start estimate of %s: %.2fs (%s)", self.name, cold.estimate_s(),
                 cold.seeded_from)
        return cold

    def started(self, cold_start_s: float, build: str | None = None) -> None:
        """A container of `build` became ready after `cold_start_s` seconds: starts work
        again; the start is kept in the store for later runs (`remember_start`)."""
        self.failures = 0
        self.cold.record(cold_start_s)
        if self.store is not None and build is not None:
            remember_start(self.store, self.endpoint.name, build, cold_start_s)

    def record_batch(self, rows: int, service_s: float, padded_tokens: int = 0) -> None:
        """A completed batch's service time and padded tokens (0: not known; not a
        streaming endpoint's batch: see the module)."""
        if self.generation is None:
            self.service.record(rows, service_s, padded_tokens if self.tokens else 0)

    # ------------------------------------------------------------------ warm target
    def measured(self) -> Measured:
        """What the warm-pool policy reads: batches' service time, or for a streaming
        endpoint its containers' tokens/s (`measured_generation`)."""
        gen = self.endpoint.generation
        if self.generation is not None and gen is not None:
            return measured_generation(self.cold, self.generation, gen.max_sequences)
        return measured(self.cold, self.service, self.endpoint.batching.max_batch_rows)

    def job_room(self) -> int:
        """Rows of job work to take into the queue now: a full batch for each warm
        container (a streaming endpoint: a sequence per slot) less the low-priority rows
        queued already. So a job batch is ready the moment a container is idle, and the
        rest of a backlog stays in the store (its order kept, claimable by other routers)."""
        if self.batcher is None:
            return 0
        warm = sum(1 for c in self.containers if c.state in WARM)
        per = self.slots if self.endpoint.streaming else self.endpoint.batching.max_batch_rows
        return max(0, warm * per - self.batcher.rows_by_priority[0])

    def retarget(self, wall_s: float, cap: int, *, pinned: int | None = None,
                 params: PredictiveParams | None = None, backlog_rows: int = 0
                 ) -> WarmTarget:
        """Recompute the warm target at unix time `wall_s` (`desired()` over the traffic
        record, with `backlog_rows` rows of unfinished jobs as demand; `pinned`: that many
        containers instead) and the floor it keeps now."""
        warm = self.endpoint.warm
        if pinned is not None:
            n = min(pinned, warm.container_cap)
            self.target = WarmTarget(n, 0, warm.scaledown_window_s,
                                     f"pinned to {n} (--containers)")
        else:
            self.target, self.policy = desired(wall_s, self.traffic.history(wall_s), warm,
                                               self.measured(), self.policy, params=params,
                                               backlog=backlog_rows)
        self.floor = self.keep(cap)
        return self.target

    def keep(self, cap: int) -> int:
        """Live containers the target keeps with the current busy ones, at most `cap`."""
        return self.target.keep(self.busy(), cap)

    # ------------------------------------------------------------------ pure views
    def boxes(self) -> tuple[Box, ...]:
        """The containers as reconcile sees them, less one being recycled (it is leaving)."""
        gone = self.recycling.id if self.recycling is not None else None
        return tuple(Box(str(c.id), str(c.state), bool(c.inflight), c.idle_since_s)
                     for c in self.containers if str(c.id) != gone)

    def reconcile(self, now_s: float, keep: int | None = None) -> Plan:
        """What moves the containers towards `keep` live ones (default the floor, and the
        replacement a recycle in progress needs: `recycle.Retiring.keep`)."""
        n = self.floor if keep is None else keep
        n = max(n, self.recycling.keep) if self.recycling is not None else n
        return reconcile(n, self.boxes(), now_s, self.target.scaledown_window_s,
                         may_start=self.may_start)

    def health_checks(self, now_s: float) -> tuple[health.Check, ...]:
        facts = (health.Liveness(str(c.id), str(c.state), len(c.inflight),
                                 c.last_progress_s, c.ping_sent_s, c.last_pong_s,
                                 now_s - c.history[0][0] if c.state in STARTING else 0.0,
                                 streaming=self.endpoint.streaming)
                 for c in self.containers)
        route = self.endpoint.route
        return health.checks(facts, now_s, route.stuck_after_s, route.start_timeout_s)

    def check_health(self, now_s: float) -> None:
        """Ping the containers that are due a ping; kill the stuck and silent ones (their
        replacement follows from the floor)."""
        for check in self.health_checks(now_s):
            c = self.by_id(check.container)
            if c is None:
                continue
            if check.verdict == health.Verdict.PING:
                c.ping()
            else:
                log.warning("container %s of %s %s; replacing it", c.id, self.name,
                            check.reason)
                self.events["stuck"] += 1
                c.kill(check.reason)

    def rolling(self) -> bool:
        """A new build is being rolled out (the rollout sets the container count)."""
        return rollout.rolling(self.latest, (c.build for c in self.live()))

    def rollout_plan(self) -> rollout.Rollout | None:
        running = (rollout.Running(str(c.id), c.build, str(c.state)) for c in self.live())
        return rollout.plan_rollout(self.latest, running, may_start=not self.failures)

    def loads(self, now_s: float) -> tuple[ContainerLoad, ...]:
        b = self.batcher
        return tuple(ContainerLoad(
            str(c.id), str(c.state), batch_rows=tuple(c.inflight_rows.values()), slots=self.slots,
            starting_for_s=now_s - c.history[0][0] if c.state in STARTING else 0.0,
            batch_tokens=b.inflight_tokens(c.id) if b is not None else ())
            for c in self.containers)

    def snapshot(self, now_s: float, cap: int) -> Snapshot:
        """`decide()`'s view at `now_s` with at most `cap` live containers; while starts
        are failing, no more than are live now (spilling to cold would only add failures)."""
        loads = self.loads(now_s)
        if self.failures:
            cap = min(cap, sum(1 for c in loads if c.state in LIVE))
        b = self.batcher
        return build_snapshot(now_s, self.endpoint, loads, b.load() if b else EMPTY_QUEUE,
                              service=self.service.fit, cold_start_s=self.cold.estimate_s(),
                              arrival_rows_per_s=b.arrival_rows_per_s(now_s) if b else 0.0,
                              max_containers=cap, row_tokens=self.service.row_tokens(),
                              max_batch_tokens=self.tokens.max_batch_tokens if self.tokens
                              else 0)

    def sequence_loads(self, now_s: float) -> tuple[SequenceLoad, ...]:
        """A streaming endpoint's containers as `build_stream_snapshot` reads them: the
        sequences in flight (the router's count), each one's remaining tokens (its
        max_new_tokens less the tokens it streamed), the KV cache (`kv_used`; 0 / 0 for a
        container that reports no budget), the prompts sent with no first chunk yet."""
        out = []
        for c in self.containers:
            running = self._running(c)
            cap = max(0, c.kv_cache_capacity)
            out.append(SequenceLoad(
                str(c.id), str(c.state), active=len(c.inflight), max_sequences=self.slots,
                remaining_tokens=tuple(max(1, it.cost.max_new_tokens - it.tokens)
                                       for it in running),
                generated_tokens=tuple(it.tokens for it in running),
                kv_tokens=self.kv_used(c) if cap else 0, kv_capacity=cap,
                pending_prompt_tokens=sum(it.cost.prompt_tokens for it in running
                                          if not it.chunks),
                starting_for_s=now_s - c.history[0][0] if c.state in STARTING else 0.0))
        return tuple(out)

    def stream_snapshot(self, now_s: float, cap: int) -> StreamSnapshot:
        """`decide_stream()`'s view at `now_s` with at most `cap` live containers (fewer
        while starts are failing, as `snapshot`). The KV budget of a container: the
        configured `Generation.kv_cache_tokens`, else the largest a container reported
        (none yet: unknown). Raises FloodwayError for an endpoint that does not stream."""
        gen, est = self.endpoint.generation, self.generation
        if gen is None or est is None:
            raise FloodwayError(f"endpoint {self.name!r} does not stream")
        loads = self.sequence_loads(now_s)
        full = cap   # what the endpoint may ever run: what a request can never exceed
        if self.failures:
            cap = min(cap, sum(1 for c in loads if c.state in LIVE))
        book = self.batcher.sequences if self.batcher is not None else None
        reported = max((c.kv_capacity for c in loads), default=0)
        return replace(build_stream_snapshot(
            now_s, self.endpoint, loads, book.queue() if book else EMPTY_SEQUENCE_QUEUE,
            model=est.model, cold_start_s=self.cold.estimate_s(),
            max_sequences=gen.max_sequences,
            kv_cache_tokens=gen.kv_cache_tokens or reported or None,
            max_new_tokens=gen.max_new_tokens, max_containers=cap), container_cap=full)

    # ------------------------------------------------------------------ readiness
    def ready(self) -> bool:
        """A warm container, or none asked for (scaled to zero: requests start one) and
        not failing."""
        return any(c.state in WARM for c in self.containers) or (
            self.floor == 0 and self.failing() is None)

    def failing(self) -> str | None:
        """Why the endpoint cannot serve while its starts keep failing
        (`health.failing`), naming the last start's error; None when it is not failing."""
        warm = sum(1 for c in self.containers if c.state in WARM)
        # Any container still listed is starting, or has exited and its replacement is
        # not decided yet (`Pool._run`).
        if not health.failing(self.failures, warm, bool(self.replacing or self.containers)):
            return None
        return (f"endpoint {self.endpoint.name!r} cannot start: its last {self.failures} "
                f"container start(s) in a row failed; the last: {self.last_error}")

    def sequences(self) -> dict[str, int]:
        """A streaming endpoint's sequences, summed over its live containers (their Load):
        ``{"active", "kv_cache_tokens", "kv_cache_capacity"}``."""
        live = [c for c in self.live() if c.state in WARM]
        return {"active": sum(c.active_sequences for c in live),
                "kv_cache_tokens": sum(c.kv_cache_tokens for c in live),
                "kv_cache_capacity": sum(c.kv_cache_capacity for c in live)}

    def describe(self) -> dict[str, Any]:
        """Readiness detail: containers, queue, warm target, container events (and a
        streaming endpoint's `sequences`)."""
        b = self.batcher
        t = self.target
        return {
            **({"sequences": self.sequences()} if self.endpoint.streaming else {}),
            "containers": [c.describe() for c in self.containers],
            "queue": {"queued": b.queued if b else 0, "queued_rows": b.queued_rows if b else 0,
                      "dropped": dict(b.dropped) if b else {}},
            "target": {"min_containers": t.min_containers,
                       "buffer_containers": t.buffer_containers,
                       "scaledown_window_s": t.scaledown_window_s, "reason": t.reason},
            "events": dict(self.events),
            "failures": {"failed_starts_in_a_row": self.failures,
                         "last_error": self.last_error, "failing": self.failing()},
        }


__all__ = ["EndpointPool"]
