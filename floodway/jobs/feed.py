"""Feeding claimed jobs to the local pool: jobs batched with each other, waiting in the
router (not in the store) for a free slot, woken the moment one frees.

    feed = JobFeed(decide=..., enqueue=..., start_cold=..., clock=clock)
    outputs = await feed.run(job)          # from `LocalJobs._run`, per claimed job
    feed.capacity_changed()                # the pool: a slot freed, a batch left the queue

Grouping: the jobs claimed together for one endpoint and tenant (the runner claims them in one
turn of the event loop) become ONE request to `decide()` and the batcher: their rows are
batched with each other by construction, and `decide()`'s queue room and tenant share, which
count requests, see one job request where a burst of one-row jobs would otherwise fill the
low-priority share of the queue at once. Each job still gets its own inputs' results: one
failed input fails its own job, never the group. A streaming endpoint's job is its own group
(a group of sequences could be larger than any container holds: 413 for every job in it).

Waiting for capacity: when `decide()` neither dispatches nor queues a group, it waits in the
router, its jobs still claimed (their leases renewed by the runner), for `capacity_changed()`
(the pool calls it when a slot frees, a batch leaves the queue or a container becomes ready)
or `RECHECK_S` at the latest, then is decided again; a cold start is asked for when
`decide()` says so. Only a group that found no capacity for `CAPACITY_WAIT_S` raises
Unavailable (the runner's bounded backoff, the jobs back in the store): before, every job
without a slot went back to the store for the whole Retry-After (up to 30 s) and the runner
paused, so a backlog drained in steps of a Retry-After while containers sat idle.

A waiting group never holds up the jobs behind it: while it waits, each of its jobs counts
one row of the endpoint's claimed rows (`claimed_rows`, which the runner's claims subtract
from the pool's room), not all its rows, so the next jobs are claimed and decided too (a
smaller job, or another tenant's, may fit where it does not), and the waiting jobs are
bounded by the pool's room. A job that can never fit is refused by `decide()` (413) and
fails at once.

When work starts: a claimed job costs no attempt until its rows go to a container. The pool
wakes the job queue as each batch is handed to a container (the batcher's send callback,
`floodway.runtime.pool.JobLink.wake`), and `capacity_changed()` then looks at each
group in the batcher: one whose Pending says `dispatched()` (some of its rows left the
router's queue for a container, in that same turn of the event loop) has started, and
`on_start` hears its jobs (`JobRunner.started`: one attempt each). A group is one request to
the batcher, which tells rows sent from rows queued but not which rows: its jobs all start
with its first batch (a group is at most the pool's job room: about a batch per idle
container, sent together).

What goes where: jobs run at low priority, behind every sync request, and a batch of job rows
goes only to a container with nothing in flight (`floodway.routers.batcher`): a sync request
waits for at most the job batch already running on a container, never for job rows queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from floodway.core.backend import Pending
from floodway.core.clock import SYSTEM_CLOCK, Clock, within
from floodway.errors import Unavailable
from floodway.jobs.job import Job
from floodway.routers.decide import Action, Decision

log = logging.getLogger("floodway.jobs")

# A group with no capacity is decided again at least this often (clock seconds) even
# without a wake-up: capacity may come from what sends none (another process's jobs end).
RECHECK_S = 0.5
# How long a group waits in the router for capacity before its jobs go back to the store.
CAPACITY_WAIT_S = 60.0


class JobCapacity(Protocol):
    """What the local pool tells the job queue (`floodway.runtime.pool.Pool`)."""

    def job_room(self, endpoint: str) -> int:
        """Rows of job work `endpoint` can take now (0 and up)."""
        ...

    def watch_jobs(self, backlog: Callable[[], dict[str, int]],
                   wake: Callable[[], None]) -> None:
        """Call `wake()` whenever job room may have grown or an endpoint's failing state
        changed; read `backlog()` (rows of jobs not finished, per endpoint) as demand for
        the warm pool."""
        ...

    def failing(self, endpoint: str) -> Unavailable | None:
        """The error of an endpoint that cannot serve because its containers keep failing
        to start (`floodway.errors.StartFailing`), else None."""
        ...


# (endpoint, rows, tenant, job) -> the decision for a group's attempt.
Decide = Callable[[str, list[Any], str, Job], Decision]
# (endpoint, inputs, tenant) -> its Pending (one result per input).
Enqueue = Callable[[str, list[Any], str], Pending]


class JobFeed:
    """Groups claimed jobs per endpoint and tenant into one request (see the module).

    `decide(endpoint, inputs, tenant, first_job)`: the decision for a group;
    `enqueue(endpoint, inputs, tenant)`: its Pending; `start_cold(endpoint)`: ask for a
    container; `grouped(endpoint)`: whether that endpoint's jobs may share a request
    (False for a streaming endpoint); `on_start(job_ids)`: these jobs' work reached a
    container (see the module); `on_room()`: a waiting group gave back claimed rows (the
    runner may claim the jobs behind it). `clock`: the capacity waits."""

    def __init__(self, *, decide: Decide, enqueue: Enqueue,
                 start_cold: Callable[[str], Any], grouped: Callable[[str], bool],
                 clock: Clock = SYSTEM_CLOCK,
                 on_start: Callable[[list[str]], None] | None = None,
                 on_room: Callable[[], None] | None = None):
        self.decide, self.enqueue, self.start_cold = decide, enqueue, start_cold
        self.grouped, self.clock, self.on_start = grouped, clock, on_start
        self.on_room = on_room
        self.claimed_rows: Counter[str] = Counter()   # claimed, not yet in the batcher
        self._groups: dict[tuple[str, str], list[tuple[Job, asyncio.Future]]] = {}
        # Groups in the batcher whose work has not reached a container yet.
        self._queued: dict[int, tuple[Pending, list[tuple[Job, asyncio.Future]]]] = {}
        self._flush_due = False
        self._capacity: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()

    def capacity_changed(self) -> None:
        """A batch went to a container, or a slot may have freed: groups in the batcher
        whose rows reached a container have started (`on_start`); groups waiting for
        capacity are decided again now."""
        self.check_started()
        if self._capacity is not None:
            self._capacity.set()

    def check_started(self) -> list[str]:
        """Tell `on_start` the jobs of each group whose rows left the router's queue for a
        container (`Pending.dispatched()`) since the last look; their ids."""
        started: list[str] = []
        for key, (pending, members) in list(self._queued.items()):
            if pending.dispatched():
                del self._queued[key]
                started += [job.id for job, fut in members if not fut.done()]
        if started and self.on_start is not None:
            self.on_start(started)
        return started

    async def run(self, job: Job) -> list[Any]:
        """`job`'s results, one per input (its output or the exception that failed it);
        raises Unavailable when no capacity came for `CAPACITY_WAIT_S`, RequestError for a
        job no container can ever hold, TimeoutError past the batcher's deadline."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        tenant = job.tenant or "anonymous"
        key = (job.endpoint, f"tenant:{tenant}" if self.grouped(job.endpoint) else job.id)
        self._groups.setdefault(key, []).append((job, fut))
        self.claimed_rows[job.endpoint] += len(job.inputs)
        if not self._flush_due:
            # After the jobs claimed in this turn of the loop have joined their groups.
            self._flush_due = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._flush_due = False
        groups, self._groups = self._groups, {}
        for (endpoint, _), members in groups.items():
            tenant = members[0][0].tenant or "anonymous"
            task = asyncio.get_running_loop().create_task(self._feed(endpoint, tenant, members))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _feed(self, endpoint: str, tenant: str,
                    members: list[tuple[Job, asyncio.Future]]) -> None:
        held = [sum(len(job.inputs) for job, _ in members)]   # its rows in claimed_rows
        try:
            pending = await self._admitted(endpoint, tenant, members, held)
        except BaseException as e:
            self.claimed_rows[endpoint] -= held[0]
            for _, fut in members:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else Unavailable(
                        f"endpoint {endpoint!r}: the job feed stopped"))
            if not isinstance(e, Exception):
                raise
            return
        self.claimed_rows[endpoint] -= held[0]
        self._queued[id(pending)] = (pending, members)
        try:
            results = await pending
        except Exception as e:  # noqa: BLE001 - every job of the group hears it
            for _, fut in members:
                if not fut.done():
                    fut.set_exception(e)
            return
        finally:
            self._queued.pop(id(pending), None)
        at = 0
        for job, fut in members:
            n = len(job.inputs)
            if not fut.done():
                fut.set_result(list(results[at:at + n]))
            at += n

    async def _admitted(self, endpoint: str, tenant: str,
                        members: list[tuple[Job, asyncio.Future]], held: list[int]
                        ) -> Pending:
        """The group's Pending once `decide()` dispatches or queues it, waiting for
        capacity between decisions (see the module; while it waits, `held[0]`, its rows
        counted in `claimed_rows`, is one per job). Raises what `decide` raises (a job
        too large for any container), Unavailable after `CAPACITY_WAIT_S`."""
        inputs = [x for job, _ in members for x in job.inputs]
        waited_s = 0.0
        while True:
            if all(fut.done() for _, fut in members):
                raise asyncio.CancelledError   # every job of it was abandoned (a stop)
            d = self.decide(endpoint, inputs, tenant, members[0][0])
            if d.action == Action.SPILL_COLD or d.start_cold:
                self.start_cold(endpoint)
            if d.action in (Action.DISPATCH, Action.QUEUE):
                return self.enqueue(endpoint, inputs, tenant)
            if waited_s >= CAPACITY_WAIT_S:
                raise Unavailable(f"waiting for idle capacity ({d.action}: {d.reason})",
                                  retry_after_s=max(RECHECK_S, d.retry_after_s))
            if held[0] > len(members):   # waiting: room for the jobs behind it
                self.claimed_rows[endpoint] -= held[0] - len(members)
                held[0] = len(members)
                if self.on_room is not None:
                    self.on_room()
            waited_s += await self._wait_for_capacity()

    async def _wait_for_capacity(self) -> float:
        """Wait for `capacity_changed()` or `RECHECK_S`; the clock seconds waited."""
        if self._capacity is None:
            self._capacity = asyncio.Event()
        self._capacity.clear()
        t0 = self.clock.monotonic()
        try:
            await within(self.clock, self._capacity.wait(), RECHECK_S)
        except TimeoutError:
            pass
        return max(self.clock.monotonic() - t0, 1e-3)


__all__ = ["CAPACITY_WAIT_S", "RECHECK_S", "JobCapacity", "JobFeed"]
