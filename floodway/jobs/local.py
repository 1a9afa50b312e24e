"""Async jobs of the local router: a durable SQLite `JobStore` and a `JobRunner` that runs
each job on the pool through the same decision as sync requests (`decide()`, or
`decide_stream()` for a streaming endpoint, whose job's result is the combined output).

Jobs fill idle capacity only (they have no waiting client): they enter the batcher at low
priority, behind every sync request, counted ahead of none of them by `decide()`, and a batch
of job rows only goes to a container with nothing in flight (`floodway.routers.batcher`; a
streaming endpoint's job sequences take free sequence slots, behind the waiting clients').
Many jobs run at once so that the batcher can pack their rows into full batches. When
`decide()` would not queue a job (queue full, shed), or asks for a cold container, it goes
back to the job queue with the estimated wait as its delay; capacity waits are not failed
attempts. Under a sustained overload jobs therefore wait for the burst to pass, which is what
spilling to async is for.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from floodway.errors import EndpointError, RequestError, Unavailable
from floodway.functions.app import App
from floodway.http.protocols import SYSTEM_CLOCK, Backend, Clock
from floodway.jobs.job import Job, JobState
from floodway.jobs.runner import JobRunner
from floodway.jobs.store import JobStore
from floodway.routers.admission import Priority
from floodway.routers.decide import Action, Decision, Request, decide
from floodway.routers.decide_stream import decide_stream
from floodway.routers.sequences import stream_request

JOBS_DB_ENV = "FLOODWAY_JOBS_DB"
# A job has no client waiting: it may wait long for capacity, but not forever per attempt.
JOB_TIMEOUT_S = 300.0
IDLE_RETRY_S = 0.5


def default_jobs_path(store_root: str | Path, app_name: str) -> Path:
    """FLOODWAY_JOBS_DB, else ``<store>/.jobs/<app>/jobs.sqlite3``: one queue per app, so
    that two apps served from one store never run each other's jobs (endpoint names may
    repeat across apps), while restarts and routers of the same app share it."""
    folder = re.sub(r"[^A-Za-z0-9._-]", "_", app_name) or "_"
    return Path(os.environ.get(JOBS_DB_ENV) or
                Path(store_root) / ".jobs" / folder / "jobs.sqlite3")


class LocalJobs:
    """The `floodway.http.protocols.Jobs` of the local runtime: jobs in the SQLite file at
    `path`, run on `backend`. `clock`: the store's times (`wall`) and the runner's waits."""

    def __init__(self, app: App, backend: Backend, path: str | Path, *,
                 ttl_s: float = 86400.0, concurrency: int = 32, lease_s: float = 10.0,
                 clock: Clock = SYSTEM_CLOCK):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.app, self.backend = app, backend
        self.store = JobStore(path, ttl_s=ttl_s, clock=clock.wall)
        self.runner = JobRunner(self.store, self._run, owner=f"router-{os.getpid()}-"
                                f"{uuid.uuid4().hex[:8]}", lease_s=lease_s,
                                concurrency=concurrency, clock=clock)

    async def submit(self, endpoint: str, inputs: list[Any], *, tenant: str,
                     priority: Priority, idempotency_key: str | None
                     ) -> tuple[dict[str, Any], bool]:
        """Store the job durably (before the caller answers 202) -> (wire form, created).
        Raises RequestError (409 reused Idempotency-Key, 400 malformed key).

        The commit waits for an fsync (milliseconds): it runs on a thread so that a burst
        spilled to async does not stall the event loop and every other request with it."""
        job, created = await asyncio.to_thread(
            self.store.submit, endpoint, inputs, tenant=tenant,
            priority=priority.name.lower(), idempotency_key=idempotency_key)
        if created:
            self.runner.wake()
        return job.to_wire(), created

    async def find(self, endpoint: str, inputs: list[Any], *, tenant: str,
                   idempotency_key: str) -> dict[str, Any] | None:
        """The wire form of the job stored under this tenant's `idempotency_key`, or None.
        Raises RequestError (409 other inputs, 400 malformed key)."""
        job = await asyncio.to_thread(self.store.find, endpoint, inputs, tenant=tenant,
                                      idempotency_key=idempotency_key)
        return None if job is None else job.to_wire()

    async def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form, or None when unknown or another tenant's. One indexed
        read: run inline, a thread hop would cost about as much."""
        job = self.store.get(job_id)
        if job is None or (job.state != JobState.EXPIRED and job.tenant != tenant):
            return None
        return job.to_wire()

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    async def start(self) -> None:
        self.runner.start()

    async def stop(self) -> None:
        await self.runner.stop(grace_s=5.0)
        self.store.close()

    async def _run(self, job: Job) -> list[Any]:
        d = self._decide(job)
        if d.action == Action.SPILL_COLD or d.start_cold:
            self.backend.start_cold(job.endpoint)   # e.g. scaled to zero: bring one up
        if d.status == 413:   # more than a container can ever hold: no wait helps
            raise RequestError(f"endpoint {job.endpoint!r}: {d.reason}", status=413)
        if d.action not in (Action.DISPATCH, Action.QUEUE):
            raise Unavailable(f"waiting for idle capacity ({d.action}: {d.reason})",
                              retry_after_s=max(IDLE_RETRY_S, d.est_wait_s, d.retry_after_s))
        return _outputs(await self.backend.enqueue(
            job.endpoint, job.inputs, timeout_s=JOB_TIMEOUT_S, priority=int(Priority.LOW),
            tenant=job.tenant or "anonymous"))

    def _decide(self, job: Job) -> Decision:
        """The decision for a job's attempt: as a low-priority request that may wait
        `JOB_TIMEOUT_S` and cannot spill to async; for a streaming endpoint through
        `decide_stream()` on its sequences (time to first token, slots, KV room)."""
        tenant = job.tenant or "anonymous"
        ep = self.app.endpoints.get(job.endpoint)
        gen = ep.generation if ep is not None else None
        if gen is not None:
            snap = self.backend.stream_snapshot(job.endpoint)
            return decide_stream(snap, stream_request(
                job.inputs, gen.max_new_tokens, deadline_s=snap.now_s + JOB_TIMEOUT_S,
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
        job, created = await asyncio.to_thread(
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
