"""The dispatch decision: a pure function of a pool snapshot and one request.

    decide(snapshot, request) -> Decision(action, reason, est_wait_s, retry_after_s, status)

Dispatch, queue, spill (the targets of `Route.spill`, tried in order from `SPILLS`) or shed,
all times in seconds on the snapshot's clock. The local runtime, the Modal router and the
simulator all call it, each on a snapshot from `floodway.core.snapshot.build_snapshot`. The
algorithm, step by step (the steps the code's comments name): docs/design/decision.md.
A new spill target is one more `SpillTarget` in `SPILLS` (and an `Action` for it); the
config accepts exactly the table's names (`floodway.config.SPILL_TARGETS`).

The water-filling wait is the M/D/c-style deterministic estimate used by Clipper
(Crankshaw et al., NSDI 2017) and Ray Serve's queue-length based routing.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar, NamedTuple, Protocol, TypeVar

from floodway.routers.service import ServiceTime

LIVE = frozenset({"starting", "warming", "ready", "busy"})
WARM = frozenset({"ready", "busy"})
# Share of max_queue each priority may fill (index = priority): low sheds and spills first.
QUEUE_SHARE = (0.5, 0.9, 1.0)
TENANT_SHARE = 0.5
RETRY_AFTER_S = (1.0, 60.0)
HEADROOM = 0.85   # share of the deadline budget a plan may use (the rest absorbs noise)
# The router's loop lag counts twice against a request's time left: once before the router
# read it, once on its answer's way out (step 2 of the module docstring).
LAG_FACTOR = 2.0


def by_priority(counts: Sequence[int]) -> tuple[int, int, int]:
    """`counts`, one per priority (low, normal, high), as the triple a snapshot holds.
    Raises ValueError unless there are three."""
    low, normal, high = counts
    return low, normal, high


class Action(enum.StrEnum):
    DISPATCH = "dispatch"
    QUEUE = "queue"
    SPILL_COLD = "spill_cold"
    SPILL_ASYNC = "spill_async"
    SHED = "shed"


@dataclass(frozen=True)
class ContainerView:
    """One container as the decision sees it.

    `state`: starting | warming | ready | busy | draining | stopped | failed.
    `backlog_s`: estimated seconds of work already sent to it (warm containers).
    `ready_in_s`: estimated seconds until it is warm (starting/warming containers).
    """

    id: str
    state: str
    free_slots: int = 0
    slots: int = 1
    backlog_s: float = 0.0
    ready_in_s: float = 0.0

    @property
    def available_in_s(self) -> float:
        return self.backlog_s if self.state in WARM else self.ready_in_s + self.backlog_s


@dataclass(frozen=True)
class Snapshot:
    """The state of one endpoint at `now_s`. `queued` requests hold `queued_rows` rows."""

    now_s: float
    containers: tuple[ContainerView, ...]
    service: ServiceTime
    cold_start_s: float
    max_batch_rows: int
    max_queue: int
    max_containers: int
    spill: tuple[str, ...] = ("cold", "async")
    queued: int = 0
    queued_rows: int = 0
    tenant_queued: Mapping[str, int] = field(default_factory=dict)
    async_accepting: bool = True
    # (low, normal, high) queued rows; None: all of `queued_rows` counts as ahead.
    queued_rows_by_priority: tuple[int, int, int] | None = None
    queued_by_priority: tuple[int, int, int] | None = None   # requests, as above
    arrival_rows_per_s: float = 0.0   # recent arrival rate, rows per second
    loop_lag_s: float = 0.0           # the router's recent event-loop lag (step 2)
    batch_wait_s: float = 0.0         # the batcher's wait for more rows (Batching.wait_ms)
    # (low, normal, high) queued tokens, each item at its estimated tokens (the batcher
    # groups similar lengths, so they are about the padded tokens); None: unknown, each
    # queued row at `row_tokens`.
    queued_tokens_by_priority: tuple[int, int, int] | None = None
    row_tokens: float = 0.0      # tokens of a row whose length is not known (measured mean)
    max_batch_tokens: int = 0    # the batcher's padded-token budget per batch (0: none)


@dataclass(frozen=True)
class Request:
    """One request: `rows` inputs, an absolute `deadline_s` (snapshot clock), a priority
    (0 low, 1 normal, 2 high), its tenant, and whether it may become an async job.
    `row_tokens`: the estimated tokens of its longest input, the row length its batch is
    padded to (`floodway.routers.tokens.row_tokens`); 0: unknown (the snapshot's
    `row_tokens`)."""

    rows: int
    deadline_s: float
    priority: int = 1
    tenant: str = "anonymous"
    allow_async: bool = True
    row_tokens: int = 0


@dataclass(frozen=True)
class Decision:
    """What to do with a request. `status` is the HTTP status of a shed (503), else 0.
    `start_cold`: also start a container although this request will not wait for it (no
    container is live: scale from zero for the requests that follow)."""

    action: Action
    reason: str
    est_wait_s: float = 0.0
    retry_after_s: float = 0.0
    status: int = 0
    start_cold: bool = False


def water_fill(available_in_s: Sequence[float], work_s: float) -> float:
    """Earliest time at which `work_s` seconds of work ahead is done when servers become
    free at the given times and then work in parallel. inf with no server."""
    times = sorted(available_in_s)
    if not times:
        return math.inf
    done, level = 0.0, times[0]
    for i, t in enumerate(times):
        # Between `level` and `t`, i servers are working.
        if i and done + i * (t - level) >= work_s:
            return level + (work_s - done) / i
        done += i * (t - level)
        level = t
    return level + (work_s - done) / len(times)


def _batches_s(snap: Snapshot, rows: int, tokens: float) -> float:
    """Seconds of work for `rows` rows of `tokens` padded tokens cut into full batches (the
    batcher fills batches up to max_batch_rows rows and max_batch_tokens tokens)."""
    if rows <= 0:
        return 0.0
    n = math.ceil(rows / snap.max_batch_rows)
    if snap.max_batch_tokens > 0 and tokens > 0:
        n = max(n, math.ceil(tokens / snap.max_batch_tokens))
    s = snap.service
    return s.per_token_s * tokens + s.per_row_s * rows + s.per_batch_s * n


def _row_tokens(snap: Snapshot, req: Request) -> float:
    """The row length `req`'s batch is padded to: its longest input, else the typical."""
    return req.row_tokens if req.row_tokens > 0 else snap.row_tokens


def _row_cap(snap: Snapshot, row_tokens: float) -> int:
    """Rows of one batch of rows of `row_tokens` tokens: max_batch_rows, or fewer when the
    token budget is reached first (at least 1: an input longer than the budget goes alone)."""
    if snap.max_batch_tokens <= 0 or row_tokens <= 0:
        return snap.max_batch_rows
    return max(1, min(snap.max_batch_rows, int(snap.max_batch_tokens // row_tokens)))


def _batch_s(snap: Snapshot, rows: int, row_tokens: float) -> float:
    """Seconds of one batch of `rows` rows padded to `row_tokens` tokens each."""
    return snap.service.seconds(rows, rows * row_tokens)


def time_left_s(deadline_s: float, now_s: float, loop_lag_s: float) -> float:
    """Seconds a plan has until `deadline_s`: what is left less LAG_FACTOR x the router's
    event-loop lag (step 2 of the module docstring)."""
    return deadline_s - now_s - LAG_FACTOR * max(0.0, loop_lag_s)


def late_shed(left_s: float, loop_lag_s: float) -> Decision:
    """The shed of a request with no time left (`time_left_s` <= 0): its deadline passed
    (`left_s` seconds to it <= 0), or the router's lag took what was left."""
    why = "deadline already passed" if left_s <= 0 else \
        f"no time left once the router's event-loop lag ({loop_lag_s * 1000:.0f} ms) is counted"
    return Decision(Action.SHED, why, retry_after_s=RETRY_AFTER_S[0], status=503)


def retry_after(wait_s: float) -> float:
    """Seconds a shed client should wait: `wait_s` within RETRY_AFTER_S (1 s if unknown)."""
    lo, hi = RETRY_AFTER_S
    return lo if not math.isfinite(wait_s) else min(hi, max(lo, wait_s))


def _batch_rows(snap: Snapshot, req: Request, ahead_rows: int, wait_s: float) -> int:
    """Rows of the batch this request will ride in: the part-filled batch ahead of it, its own
    rows, and what arrives while it waits (at the measured arrival rate), at most a batch
    (`_row_cap` at its row length). A request finishes with its whole batch, not with its
    own rows."""
    arriving = snap.arrival_rows_per_s * (wait_s + snap.batch_wait_s)
    return min(_row_cap(snap, _row_tokens(snap, req)),
               ahead_rows % snap.max_batch_rows + req.rows + math.ceil(arriving))


def _ride_s(snap: Snapshot, req: Request, ahead_rows: int, wait_s: float) -> float:
    """Seconds of the batch this request will ride in (`_batch_rows`, at its row length)."""
    return _batch_s(snap, _batch_rows(snap, req, ahead_rows, wait_s), _row_tokens(snap, req))


# ---------------------------------------------------------------- spill targets

class SpillContext(NamedTuple):
    """What `decide()` worked out before trying the spill targets (seconds).

    `budget_s`: the planning budget (time to the deadline x HEADROOM); `reason`: why the
    request is neither dispatched nor queued; `wait_s`: its estimated wait for a warm slot
    (the cold start when no container is live); `live`: live containers; `ahead_rows`: rows
    queued ahead of it."""

    budget_s: float
    reason: str
    wait_s: float
    live: int
    ahead_rows: int


class SpillSnapshot(Protocol):
    """What the spill targets shared by batches and streams read of a snapshot (`Snapshot`,
    `floodway.routers.decide_stream.StreamSnapshot`)."""

    @property
    def spill(self) -> tuple[str, ...]: ...

    @property
    def async_accepting(self) -> bool: ...


class SpillRequest(Protocol):
    """What they read of a request (`Request`, `floodway.routers.decide_stream.StreamRequest`)."""

    @property
    def allow_async(self) -> bool: ...


SnapT = TypeVar("SnapT", bound=SpillSnapshot)
ReqT = TypeVar("ReqT", bound=SpillRequest)
SnapT_contra = TypeVar("SnapT_contra", bound=SpillSnapshot, contravariant=True)
ReqT_contra = TypeVar("ReqT_contra", bound=SpillRequest, contravariant=True)


class SpillTarget(Protocol[SnapT_contra, ReqT_contra]):
    """One entry of `Route.spill`, for snapshots and requests of one kind (batches: `Snapshot`
    and `Request`; streams: theirs): `offer` answers with a Decision of `action` when the
    target takes the request, else None (the next target is tried). `waits`: the caller
    still waits for the answer (pointless when even the request alone misses the budget).
    Pure, like `decide()`."""

    @property
    def action(self) -> Action: ...

    @property
    def waits(self) -> bool: ...

    def offer(self, snap: SnapT_contra, req: ReqT_contra, ctx: SpillContext
              ) -> Decision | None: ...


class ColdSpill:
    """Start another container when one is allowed and its measured cold start plus the
    request's batch fits the budget (step 6 of the module docstring)."""

    action: ClassVar[Action] = Action.SPILL_COLD
    waits: ClassVar[bool] = True

    def offer(self, snap: Snapshot, req: Request, ctx: SpillContext) -> Decision | None:
        if ctx.live >= snap.max_containers:
            return None
        cold = snap.cold_start_s
        service = _ride_s(snap, req, ctx.ahead_rows, cold)
        if cold + service > ctx.budget_s:
            return None
        return Decision(Action.SPILL_COLD, f"{ctx.reason}; a cold start ({cold:.2f}s "
                        f"measured) meets the deadline", est_wait_s=cold)


class AsyncSpill:
    """Make the request a durable job when it allows one and the job store is accepting."""

    action: ClassVar[Action] = Action.SPILL_ASYNC
    waits: ClassVar[bool] = False

    def offer(self, snap: SpillSnapshot, req: SpillRequest, ctx: SpillContext
              ) -> Decision | None:
        if not (req.allow_async and snap.async_accepting):
            return None
        return Decision(Action.SPILL_ASYNC, ctx.reason, est_wait_s=ctx.wait_s)


# `Route.spill` names -> their strategy; `decide()` tries them in the route's order.
_SPILLS: dict[str, SpillTarget[Snapshot, Request]] = {"cold": ColdSpill(), "async": AsyncSpill()}
SPILLS: Mapping[str, SpillTarget[Snapshot, Request]] = MappingProxyType(_SPILLS)


def spill_or_shed(snap: SnapT, req: ReqT, ctx: SpillContext, *, waiting_ok: bool,
                  from_zero: bool, spills: Mapping[str, SpillTarget[SnapT, ReqT]]) -> Decision:
    """The first spill target of `snap.spill` that takes `req`, else a shed (steps 6-8).
    `waiting_ok`: targets that keep the caller waiting may be tried; `from_zero`: no live
    container and cold starts allowed, so a job or a shed also starts one. `spills`: the
    strategy table: `SPILLS` (streams have their own, `floodway.routers.decide_stream`)."""
    for name in snap.spill:
        target = spills.get(name)
        if target is None or (target.waits and not waiting_ok):
            continue
        d = target.offer(snap, req, ctx)
        if d is not None:
            break
    else:
        d = Decision(Action.SHED, ctx.reason, est_wait_s=ctx.wait_s,
                     retry_after_s=retry_after(ctx.wait_s), status=503)
    if from_zero and d.action is not Action.SPILL_COLD:
        d = replace(d, start_cold=True)
    return d


# ---------------------------------------------------------------- the decision

def decide(snap: Snapshot, req: Request) -> Decision:
    """Dispatch, queue, spill or shed `req` (see the module docstring for the algorithm)."""
    length = _row_tokens(snap, req)
    alone = _batch_s(snap, min(req.rows, _row_cap(snap, length)), length)
    budget = time_left_s(req.deadline_s, snap.now_s, snap.loop_lag_s)
    if budget <= 0:
        return late_shed(req.deadline_s - snap.now_s, snap.loop_lag_s)
    # Plan to finish with headroom: the estimates are means, and a miss costs a 504 where an
    # early spill only costs a 202.
    budget *= HEADROOM
    live = [c for c in snap.containers if c.state in LIVE]
    warm = [c for c in live if c.state in WARM]
    idle = [c for c in warm if c.free_slots > 0 and c.backlog_s == 0]
    # Requests queued at this priority or above: the batcher serves this one before the
    # others (queued async jobs, low priority, never keep a sync request from a free slot).
    by_req = snap.queued_by_priority
    queued = sum(by_req[max(0, min(2, req.priority)):]) if by_req else snap.queued
    if queued == 0 and idle:
        # An idle container takes it whatever the estimate says: no other path is faster,
        # and the estimate (a mean over measured batches) can be pessimistic.
        return Decision(Action.DISPATCH, "an idle warm container")
    if alone > budget:
        ctx = SpillContext(budget, f"service time {alone:.3f}s exceeds the deadline budget "
                           f"{budget:.3f}s", alone, len(live), 0)
        return spill_or_shed(snap, req, ctx, waiting_ok=False, from_zero=False, spills=SPILLS)

    if queued == 0:
        free = [c for c in warm if c.free_slots > 0]
        if free:
            best = min(free, key=lambda c: c.backlog_s)
            service = _ride_s(snap, req, 0, best.backlog_s)
            if best.backlog_s + service <= budget:
                return Decision(Action.DISPATCH, "warm container has a free slot",
                                est_wait_s=best.backlog_s)

    by_prio = snap.queued_rows_by_priority
    ahead_rows = sum(by_prio[max(0, min(2, req.priority)):]) if by_prio else snap.queued_rows
    by_tok = snap.queued_tokens_by_priority
    ahead_tokens = sum(by_tok[max(0, min(2, req.priority)):]) if by_tok is not None \
        else ahead_rows * snap.row_tokens
    ahead_s = _batches_s(snap, ahead_rows, ahead_tokens)
    wait = water_fill([c.available_in_s for c in live], ahead_s)
    service = _ride_s(snap, req, ahead_rows, wait) if math.isfinite(wait) else alone
    starting_room = sum(c.slots for c in live if c.state not in WARM)
    room = math.floor(snap.max_queue * QUEUE_SHARE[max(0, min(2, req.priority))]) \
        + starting_room
    tenant_cap = max(1, math.ceil((snap.max_queue + starting_room) * TENANT_SHARE))
    fits = wait + service <= budget
    # Lower-priority requests queued take no room from this one: it goes ahead of them.
    # The tenant share matters only when others wait too: alone, a tenant starves no one.
    others = any(t != req.tenant and n for t, n in snap.tenant_queued.items())
    tenant_ok = not others or snap.tenant_queued.get(req.tenant, 0) < tenant_cap
    if fits and queued < room and tenant_ok:
        return Decision(Action.QUEUE, f"estimated wait {wait:.3f}s + service {service:.3f}s "
                        f"fits the budget {budget:.3f}s", est_wait_s=wait)

    why = (f"estimated wait {wait:.3f}s + service {service:.3f}s exceeds the budget "
           f"{budget:.3f}s" if not fits else f"queue full for this priority or tenant "
           f"({queued} queued at this priority or above)")
    ctx = SpillContext(budget, why, snap.cold_start_s if not live else wait, len(live),
                       ahead_rows)
    from_zero = not live and "cold" in snap.spill and snap.max_containers > 0
    return spill_or_shed(snap, req, ctx, waiting_ok=True, from_zero=from_zero, spills=SPILLS)
