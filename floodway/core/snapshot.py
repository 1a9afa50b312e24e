"""The one snapshot builder: an endpoint's state, as each runtime sees it, -> `decide()`'s
`Snapshot`.

    build_snapshot(now_s, endpoint, containers, queue, service=, cold_start_s=,
                   arrival_rows_per_s=, max_containers=, row_tokens=, max_batch_tokens=)
        -> Snapshot

The local pool, the Modal router and the simulator each describe their containers as
`ContainerLoad` (batches in flight, how long a start has run) and their queue as `QueueLoad`,
and take the service fit, cold-start estimate and arrival rate from the same estimators
(`floodway.core.estimators`); everything else (backlog seconds, free slots, remaining start
time, the route's limits) is computed here, once. A runtime that knows the tokens of its
batches (the local pool: its batcher estimates each input's tokens at admission) gives
them too (`ContainerLoad.batch_tokens`, `QueueLoad.tokens_by_priority`, `row_tokens`,
`max_batch_tokens`); one that does not (Modal, the simulator) costs by rows alone. So the
same state gives the same snapshot, and the same `decide()` answer, wherever it runs.

Slots: a container runs one batch at a time, so the router keeps at most `PIPELINE_DEPTH`
batches in its pipe (one running, the next ready) whatever `Route.max_inflight_per_container`
allows: more would only queue inside the container, where work can no longer be batched
fuller, moved to a new container or dropped at its deadline (`pipeline_slots`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from floodway.config import Batching, Route, WarmPool
from floodway.core.estimators import start_remaining_s
from floodway.routers.decide import WARM, ContainerView, ServiceTime, Snapshot, by_priority


class EndpointConfig(Protocol):
    """What the builder reads of an endpoint: an `Endpoint`, or the simulator's config."""

    @property
    def route(self) -> Route: ...

    @property
    def batching(self) -> Batching: ...

    @property
    def warm(self) -> WarmPool: ...


# Batches in a container's pipe: one running and the next ready, so the worker never waits
# on the router between batches (measured with benchmarks/burst.py: deeper pipes only moved
# the queue into the containers).
PIPELINE_DEPTH = 2
STARTING = frozenset({"starting", "warming"})


def pipeline_slots(max_inflight_per_container: int) -> int:
    """Batches the router keeps in one container's pipe (see the module docstring)."""
    return max(1, min(int(max_inflight_per_container), PIPELINE_DEPTH))


@dataclass(frozen=True)
class ContainerLoad:
    """One container as a runtime knows it.

    `state`: starting | warming | ready | busy | draining | stopped | failed.
    `batch_rows`: rows of each batch in flight on it (sent, not answered), oldest first.
    `slots`: batches it may hold (`pipeline_slots`). `starting_for_s`: seconds since its
    start was asked for (starting and warming containers). `batch_tokens`: the padded
    tokens of its batches in flight (their sum counts; empty: unknown, each row at the
    snapshot's `row_tokens`).
    """

    id: str
    state: str
    batch_rows: tuple[int, ...] = ()
    slots: int = 1
    starting_for_s: float = 0.0
    batch_tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class QueueLoad:
    """The router's queue for one endpoint, by priority (index 0 low, 1 normal, 2 high).

    A queue that serves in arrival order whatever the priority (Modal's input queue) puts
    all of its work under high: every new request then counts all of it as ahead.
    `tenant_requests`: requests waiting per tenant. `tokens_by_priority`: the estimated
    tokens of the queued inputs (None: unknown, each row at the snapshot's `row_tokens`).
    """

    rows_by_priority: tuple[int, int, int] = (0, 0, 0)
    requests_by_priority: tuple[int, int, int] = (0, 0, 0)
    tenant_requests: Mapping[str, int] = field(default_factory=dict)
    tokens_by_priority: tuple[int, int, int] | None = None

    @classmethod
    def fifo(cls, rows: int, requests: int, tenant_requests: Mapping[str, int] | None = None
             ) -> QueueLoad:
        """A queue served in arrival order (see the class docstring)."""
        return cls((0, 0, rows), (0, 0, requests), dict(tenant_requests or {}))


EMPTY_QUEUE = QueueLoad()


def container_view(c: ContainerLoad, service: ServiceTime, cold_start_s: float,
                   row_tokens: float = 0.0) -> ContainerView:
    """`c` as `decide()` sees it: free slots and backlog seconds of a warm container (ready
    while it has a free slot, else busy), the remaining start of a starting one. Its
    batches' tokens are `c.batch_tokens`, else `row_tokens` per row."""
    tokens = sum(c.batch_tokens) if c.batch_tokens else row_tokens * sum(c.batch_rows)
    backlog = sum(service.seconds(r) for r in c.batch_rows) + service.per_token_s * tokens
    free = max(0, c.slots - len(c.batch_rows)) if c.state in WARM else 0
    ready_in = start_remaining_s(cold_start_s, c.starting_for_s) if c.state in STARTING \
        else 0.0
    # Ready or busy by the router's pipe, not by the runtime's own count of slots (a worker
    # process, a Modal runner, a simulated container each count differently).
    state = ("ready" if free else "busy") if c.state in WARM else c.state
    return ContainerView(c.id, state, free, c.slots, backlog, ready_in)


def build_snapshot(now_s: float, endpoint: EndpointConfig, containers: Iterable[ContainerLoad],
                   queue: QueueLoad = EMPTY_QUEUE, *, service: ServiceTime,
                   cold_start_s: float, arrival_rows_per_s: float = 0.0,
                   max_containers: int | None = None, async_accepting: bool = True,
                   row_tokens: float = 0.0, max_batch_tokens: int = 0) -> Snapshot:
    """`decide()`'s view of `endpoint` at `now_s` (seconds on the runtime's clock).

    `service`, `cold_start_s`, `arrival_rows_per_s` and `row_tokens` (the mean padded
    tokens per row of measured batches: the length of a row not otherwise known) come
    from the estimators; `max_batch_tokens`: the batcher's token budget (0: it cuts by
    rows only, as for items that are not text);
    `max_containers` is how many containers may be live (default the warm pool's cap; a
    runtime lowers it, e.g. to the live count while starts are failing). A start still
    running has taken at least as long as it has run: the cold-start estimate is never
    shorter than the longest running start.
    """
    loads = tuple(containers)
    cold = max([cold_start_s, *(c.starting_for_s for c in loads if c.state in STARTING)])
    views = tuple(container_view(c, service, cold, row_tokens) for c in loads)
    rows, reqs = queue.rows_by_priority, queue.requests_by_priority
    return Snapshot(
        now_s=now_s, containers=views, service=service, cold_start_s=cold,
        max_batch_rows=endpoint.batching.max_batch_rows, max_queue=endpoint.route.max_queue,
        max_containers=endpoint.warm.container_cap if max_containers is None
        else max_containers,
        spill=endpoint.route.spill, queued=sum(reqs), queued_rows=sum(rows),
        tenant_queued=dict(queue.tenant_requests), async_accepting=async_accepting,
        queued_rows_by_priority=by_priority(rows), queued_by_priority=by_priority(reqs),
        arrival_rows_per_s=arrival_rows_per_s,
        batch_wait_s=endpoint.batching.wait_ms / 1000.0,
        queued_tokens_by_priority=None if queue.tokens_by_priority is None
        else by_priority(queue.tokens_by_priority),
        row_tokens=row_tokens, max_batch_tokens=max_batch_tokens)


__all__ = ["EMPTY_QUEUE", "PIPELINE_DEPTH", "ContainerLoad", "EndpointConfig", "QueueLoad",
           "build_snapshot", "container_view", "pipeline_slots"]
