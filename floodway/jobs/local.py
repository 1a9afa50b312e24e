"""Async jobs of the local router: a durable SQLite `JobStore` and a `JobRunner` that runs
each job on the pool through the same decision as sync requests (`decide()`, or
`decide_stream()` for a streaming endpoint, whose job's result is the combined output).

Jobs fill idle capacity (they have no waiting client): they enter the batcher at low
priority, behind every sync request, counted ahead of none of them by `decide()`, and a batch
of job rows only goes to a container with nothing in flight (`floodway.routers.batcher`; a
streaming endpoint's job sequences take free sequence slots, behind the waiting clients').

Given the pool's `capacity` (`floodway.jobs.feed.JobCapacity`; `floodway serve` passes its
Pool), the runner claims what the pool can take now (`job_room`: a full batch for every warm
container), the jobs claimed together are batched with each other as one request
(`floodway.jobs.feed.JobFeed`), a job without a slot waits in the router and is woken when a
slot frees, and the unfinished jobs' rows count as demand for the warm pool (`backlog`).
Without it, at most `concurrency` jobs run at once. Under a sustained overload jobs wait for
the burst to pass, which is what spilling to async is for; then they drain at the pool's
capacity.

A job's attempt is counted when its rows go to a container (the pool's send wake-up,
`JobFeed.check_started`), not when it is claimed: a router killed over and over leaves the
jobs it had only claimed uncharged. The store's bytes are bounded (`max_bytes`, per tenant
`max_tenant_bytes`; `floodway.jobs.quota`): a submit over a quota is a 503 with
Retry-After; `storage()` gives the bytes and the refusals to the metrics.

Every store call runs on the store's own thread (`floodway.jobs.store_thread`), never on the
event loop: the metrics' figures (`counts`, `storage`) and the pool's `backlog` are read
there and kept, `refresh` brings them up to date.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from floodway.core.backend import Backend
from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.errors import EndpointError, RequestError, StartFailing, Unavailable
from floodway.functions.app import App
from floodway.jobs.feed import JobCapacity, JobFeed
from floodway.jobs.job import Job
from floodway.jobs.quota import MAX_BYTES, MAX_TENANT_BYTES, REASONS
from floodway.jobs.runner import JobRunner
from floodway.jobs.store import JobStore
from floodway.jobs.store_thread import StoreThread
from floodway.routers.admission import Priority
from floodway.routers.decide import Decision, Request, decide
from floodway.routers.decide_stream import decide_stream, never_admitted
from floodway.routers.sequences import stream_request

log = logging.getLogger("floodway.jobs")

JOBS_DB_ENV = "FLOODWAY_JOBS_DB"
# A job has no client waiting: it may wait long for capacity, but not forever per attempt.
JOB_TIMEOUT_S = 300.0
# Jobs in flight at most (claimed, queued or running): the pool's room bounds them first.
MAX_INFLIGHT_JOBS = 4096
# Seconds between two reads of the store's backlog (rows of unfinished jobs per endpoint).
BACKLOG_REFRESH_S = 2.0
# While an endpoint is failing, its queued jobs are failed at most this often (clock s).
FAIL_QUEUED_EVERY_S = 1.0


def default_jobs_path(store_root: str | Path, app_name: str) -> Path:
    """FLOODWAY_JOBS_DB, else ``<store>/.jobs/<app>/jobs.sqlite3``: one queue per app, so
    that two apps served from one store never run each other's jobs (endpoint names may
    repeat across apps), while restarts and routers of the same app share it."""
    folder = re.sub(r"[^A-Za-z0-9._-]", "_", app_name) or "_"
    return Path(os.environ.get(JOBS_DB_ENV) or
                Path(store_root) / ".jobs" / folder / "jobs.sqlite3")


class LocalJobs:
    """The `floodway.core.job_queue.Jobs` of the local runtime: jobs in the SQLite file at
    `path`, run on `backend`. `capacity`: the pool's job capacity (see the module; None:
    at most `concurrency` jobs at once, whatever the pool can take). `max_bytes`,
    `max_tenant_bytes`: the store's quotas on stored bytes. `clock`: the store's times
    (`wall`) and the runner's waits. `io`: runs the store's calls (default: a
    `StoreThread` of its own; `floodway.jobs.store_thread.inline` for a test that steps a
    manual clock)."""

    def __init__(self, app: App, backend: Backend, path: str | Path, *,
                 ttl_s: float = 86400.0, concurrency: int | None = None,
                 lease_s: float = 10.0, clock: Clock = SYSTEM_CLOCK,
                 capacity: JobCapacity | None = None, max_bytes: int = MAX_BYTES,
                 max_tenant_bytes: int = MAX_TENANT_BYTES,
                 io: Callable[..., asyncio.Future[Any]] | None = None):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.app, self.backend, self.capacity, self.clock = app, backend, capacity, clock
        self.store = JobStore(path, ttl_s=ttl_s, clock=clock.wall, max_bytes=max_bytes,
                              max_tenant_bytes=max_tenant_bytes)
        self._thread: StoreThread | None = None
        if io is None:
            io = self._thread = StoreThread()
        self.io = io
        self.feed = JobFeed(decide=self._decide_group, enqueue=self._enqueue,
                            start_cold=lambda ep: self.backend.start_cold(ep),
                            grouped=self._grouped, clock=clock,
                            on_start=lambda ids: self.runner.started(ids),
                            on_room=lambda: self.runner.wake())
        self.runner = JobRunner(self.store, self._run, owner=f"router-{os.getpid()}-"
                                f"{uuid.uuid4().hex[:8]}", lease_s=lease_s,
                                concurrency=concurrency or (MAX_INFLIGHT_JOBS if capacity
                                                            else 32),
                                clock=clock, room=self.room if capacity else None,
                                io=self.io)
        self._backlog: tuple[float, dict[str, int]] = (-math.inf, {})
        self._backlog_reading: asyncio.Future | None = None
        self._counts: dict[str, int] = {}
        self._stored: tuple[int, dict[str, int]] = (0, {})
        self._failed_queued: dict[str, float] = {}   # endpoint -> when its jobs were failed
        if capacity is not None:
            capacity.watch_jobs(self.backlog, self._capacity_changed)

    async def submit(self, endpoint: str, inputs: list[Any], *, tenant: str,
                     priority: Priority, idempotency_key: str | None
                     ) -> tuple[dict[str, Any], bool]:
        """Store the job durably (before the caller answers 202) -> (wire form, created).
        Raises RequestError (409 reused Idempotency-Key, 400 malformed key, 413 larger
        than a quota or, for a streaming endpoint, than a job can ever run with),
        Unavailable (503: the store is over a quota or its disk is full; StartFailing: the
        endpoint's containers keep failing to start).

        The commit can wait for the store's lock or a WAL checkpoint: it runs on the
        store's thread so that a burst spilled to async does not stall the event loop and
        every other request with it."""
        if self.capacity is not None and (
                failing := self.capacity.failing(endpoint)) is not None:
            raise failing
        self._check_stream_job(endpoint, inputs)
        job, created = await self.io(
            self.store.submit, endpoint, inputs, tenant=tenant,
            priority=priority.name.lower(), idempotency_key=idempotency_key)
        if created:
            self.runner.wake()
        return job.to_wire(), created

    async def find(self, endpoint: str, inputs: list[Any], *, tenant: str,
                   idempotency_key: str) -> dict[str, Any] | None:
        """The wire form of the job stored under this tenant's `idempotency_key`, or None.
        Raises RequestError (409 other inputs, 400 malformed key)."""
        job = await self.io(self.store.find, endpoint, inputs, tenant=tenant,
                                      idempotency_key=idempotency_key)
        return None if job is None else job.to_wire()

    async def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form, or None when unknown or another tenant's, expired or not
        (one indexed read, on the store's thread: it may wait for the lock behind a
        commit)."""
        job = await self.io(self.store.get, job_id)
        if job is None or job.tenant != tenant:
            return None
        return job.to_wire()

    def counts(self) -> dict[str, int]:
        """Jobs by state, as of the last `refresh`."""
        return dict(self._counts)

    async def refresh(self) -> None:
        """Read the jobs by state and the stored bytes (`counts`, `storage`) anew."""
        self._counts, self._stored = await self.io(
            lambda: (self.store.counts(), self.store.stored_bytes()))

    def storage(self) -> dict[str, Any]:
        """For the metrics: ``{"bytes": all jobs' stored bytes, "tenants": {tenant:
        bytes}, "quota_bytes": {"total", "tenant"}, "rejections": {reason: submits
        refused, and results not stored}}`` (reasons: total, tenant, disk_full, result);
        the bytes as of the last `refresh`."""
        total, tenants = self._stored[0], dict(self._stored[1])
        quota = self.store.quota
        return {"bytes": total, "tenants": tenants,
                "quota_bytes": {"total": quota.max_bytes, "tenant": quota.max_tenant_bytes},
                "rejections": {r: quota.rejections[r] for r in REASONS}}

    def room(self) -> dict[str, int]:
        """Jobs the runner may claim now per endpoint: the pool's `job_room` less the rows
        of jobs claimed and not yet in its queue (each job has at least one row)."""
        assert self.capacity is not None
        return {ep: self.capacity.job_room(ep) - self.feed.claimed_rows[ep]
                for ep in self.app.endpoints}

    def backlog(self) -> dict[str, int]:
        """Rows of unfinished jobs (queued or running) per endpoint (the warm pool's demand:
        `Pool.tick` reads it): the last reading, read again on the store's thread once it is
        `BACKLOG_REFRESH_S` old (the new one serves the next call)."""
        at, rows = self._backlog
        now = self.clock.monotonic()
        if now - at >= BACKLOG_REFRESH_S and self._backlog_reading is None:
            self._backlog_reading = self.io(self.store.backlog_rows)
            self._backlog_reading.add_done_callback(lambda f: self._backlog_read(f, now))
        return rows

    def _backlog_read(self, reading: asyncio.Future, at: float) -> None:
        self._backlog_reading = None
        if reading.cancelled():
            return
        if (e := reading.exception()) is not None:
            log.warning("reading the job backlog failed: %s", e)
            self._backlog = (at, self._backlog[1])   # try again a refresh later
            return
        self._backlog = (at, reading.result())

    def _capacity_changed(self) -> None:
        self.feed.capacity_changed()
        self.runner.wake(resume=True)
        self._fail_failing()

    def _fail_failing(self) -> None:
        """Fail the queued jobs of every endpoint that is failing (`JobCapacity.failing`:
        its containers keep failing to start) with its error, at most every
        `FAIL_QUEUED_EVERY_S`: they would wait for a container that does not come. Its
        claimed jobs fail as they are decided (`_run`); new ones are refused (503)."""
        assert self.capacity is not None
        now = self.clock.monotonic()
        for ep in self.app.endpoints:
            if now - self._failed_queued.get(ep, -math.inf) < FAIL_QUEUED_EVERY_S or (
                    err := self.capacity.failing(ep)) is None:
                continue
            self._failed_queued[ep] = now
            self.io(self.store.fail_queued, ep, str(err)).add_done_callback(
                functools.partial(_failed_out, endpoint=ep))

    async def start(self) -> None:
        # Jobs of endpoints this router does not serve wait for a router that does (one
        # serving that endpoint, `app::endpoint`, or the app that defines it); say so.
        rows = await self.io(self.store.backlog_rows)
        self._backlog = (self.clock.monotonic(), rows)
        await self.refresh()
        unserved = {ep: n for ep, n in rows.items() if ep not in self.app.endpoints}
        for ep, rows in sorted(unserved.items()):
            log.warning("the job store holds unfinished jobs (%d rows) of endpoint %r, which "
                        "this router does not serve: they wait for a router that does", rows,
                        ep)
        self.runner.start()

    async def stop(self) -> None:
        await self.runner.stop(grace_s=5.0)
        if self._thread is not None:   # the calls made so far, then the thread
            await asyncio.to_thread(self._thread.close)
        self.store.close()

    async def _run(self, job: Job) -> list[Any]:
        try:
            return _outputs(await self.feed.run(job))
        except StartFailing as e:   # no retry helps while its starts fail: the job fails
            raise EndpointError(str(e)) from None

    def _check_stream_job(self, endpoint: str, inputs: list[Any]) -> None:
        """Refuse before storing it a streaming endpoint's job that could never start:
        RequestError 413 when `decide_stream.never_admitted` says so of it at low priority
        (how jobs run), on the backend's own snapshot (its real container cap)."""
        ep = self.app.endpoints.get(endpoint)
        gen = ep.generation if ep is not None else None
        if gen is None or not inputs:
            return
        snap = self.backend.stream_snapshot(endpoint)
        d = never_admitted(snap, stream_request(
            inputs, gen.max_new_tokens, deadline_s=math.inf, priority=int(Priority.LOW),
            tenant="", allow_async=False))
        if d is not None:
            raise RequestError(f"endpoint {endpoint!r} cannot run this request as a job "
                               f"(jobs run at low priority): {d.reason}", status=413,
                               field="inputs")

    def _grouped(self, endpoint: str) -> bool:
        """Jobs of `endpoint` may share a request: not a streaming endpoint's (`JobFeed`)."""
        ep = self.app.endpoints.get(endpoint)
        return ep is None or ep.generation is None

    def _enqueue(self, endpoint: str, inputs: list[Any], tenant: str) -> Any:
        return self.backend.enqueue(endpoint, inputs, timeout_s=JOB_TIMEOUT_S,
                                    priority=int(Priority.LOW), tenant=tenant)

    def _decide_group(self, endpoint: str, inputs: list[Any], tenant: str,
                      job: Job) -> Decision:
        """`_decide` for the inputs of a group of jobs (`JobFeed`); raises RequestError
        (413) when they are more than a container can ever hold."""
        d = self._decide(job if len(inputs) == len(job.inputs) else replace(job, inputs=inputs,
                                                                             tenant=tenant))
        if d.status == 413:   # more than a container can ever hold: no wait helps
            raise RequestError(f"endpoint {endpoint!r}: {d.reason}", status=413)
        return d

    def _decide(self, job: Job) -> Decision:
        """The decision for a job's attempt: as a low-priority request that may wait
        `JOB_TIMEOUT_S` and cannot spill to async; for a streaming endpoint through
        `decide_stream()` on its sequences (time to first token, slots, KV room)."""
        tenant = job.tenant or "anonymous"
        ep = self.app.endpoints.get(job.endpoint)
        gen = ep.generation if ep is not None else None
        if gen is not None:
            streams = self.backend.stream_snapshot(job.endpoint)
            return decide_stream(streams, stream_request(
                job.inputs, gen.max_new_tokens, deadline_s=streams.now_s + JOB_TIMEOUT_S,
                priority=int(Priority.LOW), tenant=tenant, allow_async=False))
        snap = self.backend.snapshot(job.endpoint)
        return decide(snap, Request(rows=len(job.inputs), deadline_s=snap.now_s + JOB_TIMEOUT_S,
                                    priority=int(Priority.LOW), tenant=tenant,
                                    allow_async=False))

    async def adopt(self, endpoint: str, inputs: list[Any], work: Awaitable[list[Any]], *,
                    tenant: str, priority: Priority, idempotency_key: str | None
                    ) -> tuple[dict[str, Any], bool]:
        """Store a job for a sync request whose work is already on a container and let
        `work` (its per-input results) finish it: a client past its deadline gets a job
        without the work running twice. (wire form, created); an existing job for the
        `idempotency_key` is returned as `submit` does, and `work` is then left alone.
        Raises RequestError as `submit`."""
        job, created = await self.io(
            self.store.submit, endpoint, inputs, tenant=tenant,
            priority=priority.name.lower(), idempotency_key=idempotency_key,
            owner=self.runner.owner, lease_s=self.runner.lease_s)
        if created:
            self.runner.adopt(job, self._finish(work))
        return job.to_wire(), created

    @staticmethod
    async def _finish(work: Awaitable[list[Any]]) -> list[Any]:
        results = await work
        return _outputs([Unavailable(f"{r}; the job runs again") if isinstance(r, TimeoutError)
                         else r for r in results])


def _failed_out(done: asyncio.Future, endpoint: str) -> None:
    if done.cancelled():
        return
    if (e := done.exception()) is not None:
        log.warning("failing the queued jobs of endpoint %r failed: %s", endpoint, e)
    elif n := done.result():
        log.warning("endpoint %r cannot start: %d queued jobs failed", endpoint, n)


def _outputs(results: list[Any]) -> list[Any]:
    """A job's outputs from per-input results; raises the first failure (Unavailable: the
    job goes back to the queue; EndpointError: it fails)."""
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failed:
        i, err = failed[0]
        if isinstance(err, Unavailable):
            raise err
        raise EndpointError(
            f"{len(failed)} of {len(results)} inputs failed; first: inputs[{i}]: {err}",
            outputs=[None if isinstance(r, BaseException) else r for r in results],
            item_errors=[{"index": j, "message": str(r)} for j, r in failed])
    return results
