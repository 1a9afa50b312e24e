"""Runs queued jobs: claims them from a JobStore and awaits an async `run(job)` for each.

Outcomes map onto the store as:
- `run` returns a list          -> complete (the first completion wins, see JobStore);
- Unavailable                   -> release (an attempt only if its work had started: a
                                   job whose containers die under it uses its attempts up)
                                   and back off: that job and this
                                   runner's claims wait `retry_after_s`, at most a backoff
                                   that doubles from `MIN_BACKOFF_S` per Unavailable in a row
                                   up to `MAX_BACKOFF_S` (a container died twice, or no
                                   capacity came for a long while: real failures; a job that
                                   only waits for a free slot waits in `run`, see
                                   `floodway.jobs.feed`); `wake(resume=True)` (capacity
                                   freed) ends the runner's pause at once;
- RequestError / EndpointError  -> fail(retry=False) with the message (a re-run cannot help);
- any other exception           -> fail(retry=True) (may be transient);
- the runner dies or is killed  -> nothing: the lease expires and the job goes back to the
                                   queue, uncharged unless its work had started.

Attempts: `run` (the job feed) calls `started(jobs)` when the jobs' work reaches a model;
that is what counts an attempt (`floodway.jobs.leases`), not the claim.

While `run` is in flight the lease is renewed every `lease_s / 3` seconds, so only a dead
runner (or a stalled event loop) lets it expire.

How much it claims: at most `concurrency` jobs in flight, and, given `room` (the local pool's
job capacity, `floodway.jobs.feed`), per endpoint whole jobs while fewer rows than `room()`
says the endpoint can take now (rows of job work), so that claims follow what the pool can
start soon instead of a fixed count: a claimed job waits for a slot in the router, not in
the store, and a router killed meanwhile leaves it in the store uncharged. An endpoint
whose claim came back short has nothing claimable: it is not asked again until a submit's
`wake()` or `poll_s` later, so capacity wake-ups under sync traffic cost no store
transaction.

The store calls go through `io` (`floodway.jobs.store_thread`): the router passes the
store's own thread, so that no claim, renewal or completion holds up the event loop (a
commit can wait for the store's lock or a WAL checkpoint); the default runs them inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from floodway.core.clock import SYSTEM_CLOCK, Clock, within
from floodway.errors import EndpointError, RequestError, Unavailable
from floodway.jobs.job import Job
from floodway.jobs.store import JobStore
from floodway.jobs.store_thread import inline

log = logging.getLogger("floodway.jobs")

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class JobRunner:
    """Claims up to `concurrency` jobs at a time as `owner` (unique per runner: a router
    instance) with leases of `lease_s` seconds; polls every `poll_s` seconds when idle, or
    sooner after `wake()`. `endpoints`: only these (None: all). `room`: jobs each endpoint
    may take now (None: only `concurrency` bounds the claims; see the module docstring).
    `clock`: what its polls, lease renewals, back-offs and grace period wait on (the store
    keeps its own clock for the times it records). `io(fn, *args)`: runs a store call and
    returns its future (`floodway.jobs.store_thread`; default inline)."""

    def __init__(self, store: JobStore, run: Callable[[Job], Awaitable[list[Any]]], *,
                 owner: str, lease_s: float = 30.0, concurrency: int = 4, poll_s: float = 0.2,
                 endpoints: Iterable[str] | None = None, clock: Clock = SYSTEM_CLOCK,
                 room: Callable[[], Mapping[str, int]] | None = None,
                 io: Callable[..., asyncio.Future[Any]] = inline):
        if lease_s <= 0 or concurrency < 1 or poll_s <= 0:
            raise ValueError("lease_s and poll_s must be > 0, concurrency >= 1")
        self.store, self.run, self.owner, self.clock = store, run, owner, clock
        self.io = io
        self.lease_s, self.concurrency, self.poll_s = lease_s, concurrency, poll_s
        self.endpoints = None if endpoints is None else list(endpoints)
        self.room = room
        self._drained: dict[str, float] = {}   # endpoint -> when a claim came back short
        self._inflight: dict[asyncio.Task, str] = {}   # task -> job id
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task | None = None
        self._stopping = False
        self._paused_until = float("-inf")   # clock.monotonic(); set by an Unavailable
        self._failures = 0                   # Unavailables in a row (the backoff)

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def start(self) -> None:
        """Start the claim loop on the running event loop."""
        if self._loop_task is None:
            self._stopping = False
            self._loop_task = asyncio.get_running_loop().create_task(self._claim_loop())

    def wake(self, *, resume: bool = False) -> None:
        """Claim now instead of at the next poll: after a submit, or (`resume`) when
        capacity freed, which also ends a back-off pause."""
        if resume:
            self._paused_until = float("-inf")
        else:
            self._drained.clear()
        self._wake.set()

    async def stop(self, grace_s: float = 10.0, *, release: bool = True) -> None:
        """Claim nothing more; let in-flight jobs finish for up to `grace_s` seconds, then
        cancel the rest. `release`: hand those back to the queue at once (their attempt not
        counted); without it they are abandoned as by a crash and wait for their lease to
        expire."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None
        if self._inflight:
            with contextlib.suppress(TimeoutError):
                await within(self.clock, asyncio.wait(list(self._inflight)), grace_s)
        left = dict(self._inflight)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        if release:
            for job_id in left.values():   # our stop, not the job's doing: uncharged
                await self.io(self.store.release, job_id, self.owner, uncharge=True)

    # ------------------------------------------------------------------ internals
    async def _claim_loop(self) -> None:
        while not self._stopping:
            # Cleared before claiming: a wake() during the claim is not lost.
            self._wake.clear()
            if self.clock.monotonic() >= self._paused_until and await self._claim_all():
                await asyncio.sleep(0)   # let the new jobs take their room, then look again
                continue
            with contextlib.suppress(TimeoutError):
                await within(self.clock, self._wake.wait(), self.poll_s)

    def _wants(self) -> list[tuple[list[str] | None, int]]:
        """(endpoints, rows) of each claim to make now: one for all endpoints without
        `room` (a job each, up to `concurrency`), else one per endpoint with room whose
        last claim did not come back short within `poll_s` (delayed jobs and expired leases
        come due without a wake)."""
        if self.room is None:
            return [(self.endpoints, self.concurrency - len(self._inflight))]
        now = self.clock.monotonic()
        return [([ep], n) for ep, n in self.room().items()
                if n > 0 and now - self._drained.get(ep, -math.inf) >= self.poll_s
                and (self.endpoints is None or ep in self.endpoints)]

    async def _claim_all(self) -> bool:
        """Claim what `_wants` asks for and start each job; True when every claim came back
        full (there may be more to claim at once)."""
        full = False
        for eps, want in self._wants():
            limit = min(want, self.concurrency - len(self._inflight))
            if limit <= 0:
                break
            max_rows = want if self.room is not None else None
            try:
                jobs = await self.io(self.store.claim, self.owner, lease_s=self.lease_s,
                                     endpoints=eps, limit=limit, max_rows=max_rows)
            except Exception:   # a locked or broken store must not end the loop
                log.exception("claiming jobs failed; retrying in %.1fs", self.poll_s)
                return False
            for job in jobs:
                task = asyncio.get_running_loop().create_task(self._run_one(job))
                self._inflight[task] = job.id
            # Short: fewer jobs than asked and fewer rows (the store stops at max_rows).
            short = len(jobs) < limit and (max_rows is None or
                                           sum(max(1, len(j.inputs)) for j in jobs) < max_rows)
            if short and eps is not None and self.room is not None:
                self._drained.update(dict.fromkeys(eps, self.clock.monotonic()))
            full = full or (bool(jobs) and not short)
        return full

    def started(self, job_ids: Iterable[str]) -> None:
        """The work of these jobs reached a model: count their attempts (`JobStore.start`).
        A store that cannot be written now is logged: the jobs run on, uncharged. Nothing
        once stopping: what is in flight then is handed back uncharged (`stop`). The write
        is made at once (`io`, in order before the jobs' completion) and not awaited."""
        if self._stopping:
            return
        self.io(self.store.start, list(job_ids), self.owner).add_done_callback(_start_recorded)

    async def _renew(self, job_id: str) -> None:
        while True:
            await self.clock.sleep(self.lease_s / 3)
            try:
                if not await self.io(self.store.renew, job_id, self.owner, self.lease_s):
                    # Taken over or finished elsewhere; our result may still win (first
                    # completion wins), so keep running but stop renewing.
                    log.warning("job %s: lease lost while running", job_id)
                    return
            except Exception:
                log.exception("job %s: renewing its lease failed", job_id)

    def adopt(self, job: Job, work: Awaitable[list[Any]]) -> None:
        """Finish `job` (stored running and leased to this runner's owner) with `work`, a
        run already under way, as if the runner had claimed it: the lease is renewed, the
        result recorded once, a capacity failure hands the job back to the queue."""
        task = asyncio.get_running_loop().create_task(self._run_one(job, work))
        self._inflight[task] = job.id

    async def _run_one(self, job: Job, work: Awaitable[list[Any]] | None = None) -> None:
        renewer = asyncio.create_task(self._renew(job.id))
        try:
            try:
                outputs = await (self.run(job) if work is None else work)
            finally:
                renewer.cancel()
            await self._settle(job, outputs)
            self._failures = 0
        except asyncio.CancelledError:
            raise   # abandoned: the lease expires, or stop() releases it
        except Unavailable as e:
            self._failures += 1
            backoff_s = min(MIN_BACKOFF_S * 2 ** (self._failures - 1), MAX_BACKOFF_S)
            delay_s = min(max(e.retry_after_s, 0.0), backoff_s)
            self._paused_until = self.clock.monotonic() + delay_s
            # No capacity is not a failed attempt: back to the queue, attempts unchanged
            # (work that started and was lost with its container counted at its start).
            if not await self.io(self.store.release, job.id, self.owner, delay_s=delay_s,
                                 error=str(e)):
                log.info("job %s: no longer ours; not released: %s", job.id, e)
        except EndpointError as e:
            partial = None if e.outputs is None else {"outputs": e.outputs,
                                                      "item_errors": e.item_errors}
            await self._fail(job, str(e), retry=False, partial=partial)
        except RequestError as e:
            await self._fail(job, str(e), retry=False)
        except Exception as e:
            await self._fail(job, f"{type(e).__name__}: {e}", retry=True)
        finally:
            self._inflight.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._wake.set()   # a slot is free

    async def _settle(self, job: Job, outputs: Any) -> None:
        if not isinstance(outputs, list):
            raise EndpointError(f"job {job.id}: run returned {type(outputs).__name__}, "
                                "expected a list of outputs")
        try:
            done = await self.io(self.store.complete, job.id, self.owner, outputs)
        except (TypeError, ValueError) as e:
            raise EndpointError(f"job {job.id}: outputs are not JSON: {e}") from e
        if not done:
            log.info("job %s: already finished elsewhere; result dropped", job.id)

    async def _fail(self, job: Job, error: str, *, retry: bool, delay_s: float = 0.0,
                    partial: dict[str, Any] | None = None) -> None:
        try:
            if not await self.io(self.store.fail, job.id, self.owner, error, retry=retry,
                                 delay_s=delay_s, partial=partial):
                log.info("job %s: no longer ours; failure not recorded: %s", job.id, error)
        except Exception:
            log.exception("job %s: recording its failure failed; its lease will expire",
                          job.id)


def _start_recorded(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("recording that jobs started failed; their attempts not counted",
                  exc_info=done.exception())
