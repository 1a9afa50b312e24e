"""The async side of the simulated router: the deadline hand-off, and the job backlog
(`JobBacklog`, mixed into `floodway.sim.pool.Pool`) that runs on idle containers as the
local runtime runs it (`floodway.jobs.feed`). What is and is not modelled:
docs/design/simulator.md ("Jobs and the deadline hand-off").
"""

from __future__ import annotations

import functools
import math
from collections import deque

from floodway.config import Route
from floodway.routers.batch_item import JOB_BATCH_SHARE

# How long before its deadline the router hands a request off to the async queue: the
# value of `floodway.http.handoff.HANDOFF_MARGIN_S` (the simulator imports no http;
# tests/unit/sim/test_handoff.py holds the two equal), at most a tenth of a short budget.
HANDOFF_MARGIN_S = 0.1


def handoff_margin_s(route: Route) -> float:
    """Seconds before a request's deadline (``route.timeout_s`` after its arrival) at which
    it is handed off to the async queue: `DeadlineHandoff.after_s`'s margin,
    min(HANDOFF_MARGIN_S, timeout_s / 10); 0.0 when the route does not spill to async (no
    hand-off: a queued request waits until its deadline)."""
    if "async" not in route.spill:
        return 0.0
    return min(HANDOFF_MARGIN_S, route.timeout_s / 10)


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


__all__ = ["HANDOFF_MARGIN_S", "JobBacklog", "handoff_margin_s"]
