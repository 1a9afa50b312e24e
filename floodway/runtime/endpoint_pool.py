"""One endpoint's state in the local pool: its containers, queue, estimators, traffic record,
warm target, and failure counters, in one object; and the views of it that the pure
functions read (`Box` for reconcile, `Liveness` for health, `Running` for rollout,
`ContainerLoad`/`QueueLoad` for the snapshot).

It decides nothing and starts nothing: `floodway.runtime.pool.Pool` asks it for a plan and
carries the plan out.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from floodway.core.estimators import ColdStartEstimator, ServiceEstimator, measured
from floodway.core.reconcile import LIVE, Box, Plan, reconcile
from floodway.core.snapshot import (
    EMPTY_QUEUE,
    STARTING,
    ContainerLoad,
    build_snapshot,
    pipeline_slots,
)
from floodway.http.protocols import SYSTEM_CLOCK, Clock
from floodway.routers.batcher import Batcher
from floodway.routers.decide import WARM, Snapshot
from floodway.runtime import health, rollout
from floodway.runtime.traffic import Traffic
from floodway.warmers.history import TrafficHistory
from floodway.warmers.predictive import PredictiveParams
from floodway.warmers.target import Measured, PolicyState, WarmTarget, desired

if TYPE_CHECKING:
    from floodway.functions.endpoint import Endpoint
    from floodway.runtime.container import Container


class EndpointPool:
    """The local state of `endpoint` (times: `clock.monotonic()` seconds, except the
    traffic record and the warm target, which are on `clock.wall()`).

    `containers`: every container not yet exited (any state). `batcher`: its queue, set
    when the pool starts. `service`, `cold`: the estimators that feed `decide()` and the
    warm-pool policy. `target`/`policy`: the latest warm target and the policy's memory;
    `floor`: how many live containers the pool keeps now (`WarmTarget.keep`). `failures`:
    failed starts in a row; `replacing`: replacements waiting out their backoff. `latest`:
    the newest published build's key (None: unknown). `events`: totals since start
    (start, failed, stuck, scale_down, rolled).
    """

    def __init__(self, endpoint: Endpoint, *, clock: Clock = SYSTEM_CLOCK,
                 history: TrafficHistory | None = None):
        self.endpoint, self.name, self.clock = endpoint, endpoint.name, clock
        self.containers: list[Container] = []
        self.batcher: Batcher | None = None
        self.service = ServiceEstimator()
        self.cold = ColdStartEstimator()
        self.traffic = Traffic(endpoint.name, history)
        self.target = WarmTarget(0, 0, endpoint.warm.scaledown_window_s, "not computed yet")
        self.policy: PolicyState | None = None
        self.floor = 0
        self.failures = 0
        self.last_error: str | None = None     # why the last container that failed did
        self.replacing = 0
        self.latest: str | None = None
        self.events: Counter[str] = Counter()
        self.slots = pipeline_slots(endpoint.route.max_inflight_per_container)

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

    def pick(self, idle_only: bool = False) -> Container | None:
        """The container with a free slot and the least in flight (with nothing in flight
        when `idle_only`), or None: the batcher's `pick`."""
        free = [c for c in self.containers
                if self.free(c) > 0 and not (idle_only and c.inflight)]
        return min(free, key=lambda c: len(c.inflight)) if free else None

    def by_id(self, cid: str) -> Container | None:
        return next((c for c in self.containers if str(c.id) == cid), None)

    @property
    def may_start(self) -> bool:
        """False while starts are failing or a replacement waits out its backoff."""
        return not self.failures and not self.replacing

    def started(self, cold_start_s: float) -> None:
        """A container became ready after `cold_start_s` seconds: starts work again."""
        self.failures = 0
        self.cold.record(cold_start_s)

    def record_batch(self, rows: int, service_s: float) -> None:
        self.service.record(rows, service_s)

    # ------------------------------------------------------------------ warm target
    def measured(self) -> Measured:
        return measured(self.cold, self.service, self.endpoint.batching.max_batch_rows)

    def retarget(self, wall_s: float, cap: int, *, pinned: int | None = None,
                 params: PredictiveParams | None = None) -> WarmTarget:
        """Recompute the warm target at unix time `wall_s` (`desired()` over the traffic
        record; `pinned`: that many containers instead) and the floor it keeps now."""
        warm = self.endpoint.warm
        if pinned is not None:
            n = min(pinned, warm.container_cap)
            self.target = WarmTarget(n, 0, warm.scaledown_window_s,
                                     f"pinned to {n} (--containers)")
        else:
            self.target, self.policy = desired(wall_s, self.traffic.history(wall_s), warm,
                                               self.measured(), self.policy, params=params)
        self.floor = self.keep(cap)
        return self.target

    def keep(self, cap: int) -> int:
        """Live containers the target keeps with the current busy ones, at most `cap`."""
        return self.target.keep(self.busy(), cap)

    # ------------------------------------------------------------------ pure views
    def boxes(self) -> tuple[Box, ...]:
        return tuple(Box(str(c.id), str(c.state), bool(c.inflight), c.idle_since_s)
                     for c in self.containers)

    def reconcile(self, now_s: float, keep: int | None = None) -> Plan:
        """What moves the containers towards `keep` live ones (default the floor)."""
        return reconcile(self.floor if keep is None else keep, self.boxes(), now_s,
                         self.target.scaledown_window_s, may_start=self.may_start)

    def health_checks(self, now_s: float) -> tuple[health.Check, ...]:
        facts = (health.Liveness(str(c.id), str(c.state), len(c.inflight),
                                 c.last_progress_s, c.ping_sent_s, c.last_pong_s,
                                 now_s - c.history[0][0] if c.state in STARTING else 0.0)
                 for c in self.containers)
        route = self.endpoint.route
        return health.checks(facts, now_s, route.stuck_after_s, route.start_timeout_s)

    def rolling(self) -> bool:
        """A new build is being rolled out (the rollout sets the container count)."""
        return rollout.rolling(self.latest, (c.build for c in self.live()))

    def rollout_plan(self) -> rollout.Rollout | None:
        running = (rollout.Running(str(c.id), c.build, str(c.state)) for c in self.live())
        return rollout.plan_rollout(self.latest, running, may_start=not self.failures)

    def loads(self, now_s: float) -> tuple[ContainerLoad, ...]:
        return tuple(ContainerLoad(
            str(c.id), str(c.state), batch_rows=tuple(c.inflight_rows.values()),
            slots=self.slots,
            starting_for_s=now_s - c.history[0][0] if c.state in STARTING else 0.0)
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
                              max_containers=cap)

    # ------------------------------------------------------------------ readiness
    def ready(self) -> bool:
        """A warm container, or none asked for (scaled to zero: requests start one)."""
        return any(c.state in WARM for c in self.containers) or self.floor == 0

    def describe(self) -> dict[str, Any]:
        """Readiness detail: containers, queue, warm target, container events."""
        b = self.batcher
        t = self.target
        return {
            "containers": [c.describe() for c in self.containers],
            "queue": {"queued": b.queued if b else 0, "queued_rows": b.queued_rows if b else 0,
                      "dropped": dict(b.dropped) if b else {}},
            "target": {"min_containers": t.min_containers,
                       "buffer_containers": t.buffer_containers,
                       "scaledown_window_s": t.scaledown_window_s, "reason": t.reason},
            "events": dict(self.events),
            "failures": {"failed_starts_in_a_row": self.failures,
                         "last_error": self.last_error},
        }


__all__ = ["EndpointPool"]
