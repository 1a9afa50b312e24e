"""The async side of the simulated router: the deadline hand-off, and the job backlog that
runs on idle containers, as the local runtime runs it.

The hand-off (`floodway.http.handoff`): where the route spills to async, a request still
queued `handoff_margin_s` before its deadline leaves the queue as an async job.

The backlog (`JobBacklog`, mixed into `floodway.sim.pool.Pool`): every request spilled to
async (`decide()`'s spill_async) or handed off becomes a job, in arrival order. As the
local pool feeds jobs (`floodway.jobs.feed`, the batcher's low priority and top-up rule), a
job batch goes only to a warm container with nothing in flight while no sync request is
queued, is sent at once (its jobs have waited), and holds jobs in order while its rows fit
``max_batch_rows``, its padded tokens the batcher's token budget, and its time by the
router's fit `JOB_BATCH_SHARE` x the route's timeout (its first job always goes). A sync
request that comes meanwhile waits behind it, as in the runtime (measured: with 427 jobs
spilled in a 30 s replay, job batches of 7 long texts filled both containers for seconds
between bursts and the sync requests behind them took up to 1.5 s). A job batch holds
containers busy (the busy time, the buffer) but records no latency: its requests were
answered 202 when they spilled. `jobs_run` counts the jobs run, `jobs_end_s` when the last
one ended (NaN: none ran).

Not modelled: the backlog as demand for the warm-pool policy (the runtime counts queued
jobs towards its warm target; the simulated policy sees arrivals only), and job retries.
"""

from __future__ import annotations

import functools
import math
from collections import deque

from floodway.config import Route
from floodway.core import handoff
from floodway.routers.batch_item import JOB_BATCH_SHARE


def handoff_margin_s(route: Route) -> float:
    """Seconds before a request's deadline (``route.timeout_s`` after its arrival) at which
    it is handed off to the async queue: the router's margin
    (`floodway.core.handoff.handoff_margin_s`); 0.0 when the route does not spill to async
    (no hand-off: a queued request waits until its deadline)."""
    if "async" not in route.spill:
        return 0.0
    return handoff.handoff_margin_s(route.timeout_s)


class JobBacklog:
    """The pool's async jobs (request indices, in order) and how they run; `Pool` provides
    `cfg`, `fit`, `mbr`, `max_tokens`, `tok`, `rows`, `live`, `queue` and `open_batch`."""

    jobs_run = 0
    jobs_end_s = math.nan
    handed_off = 0                 # queued requests withdrawn at their hand-off (a counter)

    @functools.cached_property
    def handoff_s(self) -> float:
        """`handoff_margin_s` of the run's route."""
        return handoff_margin_s(self.cfg.route)

    @property
    def jobs(self) -> deque[int]:
        q = self.__dict__.get("_jobs")
        if q is None:
            q = self._jobs = deque()
        return q

    def add_job(self, idx: int, now: float) -> None:
        """Request `idx` became an async job at `now`: it waits, or runs at once on an idle
        container."""
        self.jobs.append(idx)
        if not self.queue:
            for box in self.live:
                if not self.jobs:
                    return
                if box.warm and not box.batches:
                    self.run_jobs(box, now)

    def run_jobs(self, box, now: float) -> bool:
        """Open a job batch on `box` (warm, nothing in flight) if jobs wait and no sync
        request is queued; True if it did."""
        jobs = self.jobs
        if not jobs or self.queue or box.batches or not box.warm:
            return False
        limit_s = JOB_BATCH_SHARE * self.cfg.route.timeout_s
        take, rows, tok = [], 0, 0
        for idx in jobs:
            r = 1 if self.rows is None else self.rows[idx]
            t = 0 if self.tok is None else self.tok[idx]
            hi, n = max(tok, t), rows + r
            if take and (n > self.mbr or (self.max_tokens and n * hi > self.max_tokens)
                         or self.fit.seconds(n, n * hi) > limit_s):
                break
            take.append(idx)
            rows, tok = n, hi
        for _ in take:
            jobs.popleft()
        self.jobs_run += len(take)
        self.open_batch(box, take, rows, tok, now, low=True)
        return True


__all__ = ["JobBacklog", "handoff_margin_s"]
