"""Following a replay's 202s to their end: every job's ``GET /v1/jobs/<id>`` is polled
until it succeeded, failed or expired, after the replay (polls during it would be load the
trace does not have). When a job finished comes from its ``finished_at`` (the router's
wall clock, milliseconds), so a poll every `POLL_S` does not blur it.

    await follow(client, results, t0_unix_s, wait_s=...)   # fills Result.job_status/_done_s
    drain(results, capacity_rps, overloaded) -> Drain
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import aiohttp
import httpx

from floodway.bench.replay import Client, Result

POLL_S = 0.5
CONCURRENCY = 8       # polls at once: a few, beside a router still draining the jobs
DONE = ("succeeded", "failed", "expired")
# The shortest window after a burst over which a drain rate means anything.
MIN_DRAIN_S = 1.0
MIN_DRAIN_JOBS = 10


def unix_s(rfc3339: str | None) -> float:
    """Epoch seconds of an RFC 3339 string ("...Z"); NaN for None or a bad one."""
    if not rfc3339:
        return math.nan
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.nan


async def _get(client: Client, path: str) -> tuple[int, dict]:
    if isinstance(client, httpx.AsyncClient):
        r = await client.get(path)
        return r.status_code, r.json() if r.status_code == 200 else {}
    async with client.get(path) as a:
        return a.status, await a.json() if a.status == 200 else {}


async def follow(client: Client, results: Sequence[Result], t0_unix_s: float, *,
                 wait_s: float = 600.0, clock=time.monotonic) -> int:
    """Poll the job of every result that has one until it is done or `wait_s` passed;
    fill in `job_status` (its end state; "unfinished" after `wait_s`, "lost" for a 404)
    and `job_done_s` (its ``finished_at`` in seconds after `t0_unix_s`, the replay's
    start on the wall clock). Returns how many jobs were followed."""
    todo = [r for r in results if r.job]
    end = clock() + wait_s
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(r: Result) -> None:
        path = r.job.lstrip("/")
        while True:
            async with gate:
                try:
                    status, wire = await _get(client, path)
                except (httpx.HTTPError, aiohttp.ClientError, TimeoutError, ValueError):
                    status, wire = 0, {}
            if status == 404:
                r.job_status = "lost"
                return
            if wire.get("status") in DONE:
                r.job_status = wire["status"]
                r.job_done_s = unix_s(wire.get("finished_at")) - t0_unix_s
                return
            if clock() > end:
                r.job_status = "unfinished"
                return
            await asyncio.sleep(POLL_S)

    await asyncio.gather(*(one(r) for r in todo))
    return len(todo)


@dataclass(frozen=True)
class Drain:
    """How the job backlog left by a burst drained: `jobs` accepted, `succeeded`, the
    seconds from the burst's end to the end of the last job accepted by then (`after_s`),
    and the rate of work done meanwhile (every job that finished plus the 200s answered, per
    second, in that window) against the capacity (`ratio`; NaN when the window is shorter
    than MIN_DRAIN_S or held fewer than MIN_DRAIN_JOBS jobs: nothing to measure).
    `p99_done_s`: from a job's 202 to its end."""

    jobs: int
    succeeded: int
    after_s: float
    per_s: float
    ratio: float
    p99_done_s: float


def drain(results: Sequence[Result], capacity_rps: float | None,
          burst_end_s: float) -> Drain:
    """The `Drain` of `results` (followed: `follow`) after a burst that ended at
    `burst_end_s` seconds into the replay (the end of its last overloaded second): the
    backlog is the jobs sent by then; jobs sent later (a smaller spike after it) are
    work done in the window, not the backlog."""
    from floodway.bench.outcomes import percentile

    jobs = [r for r in results if r.job]
    ok = [r for r in jobs if r.job_status == "succeeded"]
    took = [r.job_done_s - r.send_s for r in jobs if not math.isnan(r.job_done_s)]
    last = max((r.job_done_s for r in ok if r.send_s <= burst_end_s), default=math.nan)
    window = last - burst_end_s
    finished = sum(1 for r in ok if burst_end_s < r.job_done_s <= last)
    served = sum(1 for r in results if r.status == 200 and
                 burst_end_s < r.send_s + r.lag_s + r.latency_s <= last)
    if not (window >= MIN_DRAIN_S and finished >= MIN_DRAIN_JOBS):
        per_s = ratio = math.nan
    else:
        per_s = (finished + served) / window
        ratio = per_s / capacity_rps if capacity_rps else math.nan
    return Drain(len(jobs), len(ok), max(0.0, window) if not math.isnan(window) else math.nan,
                 per_s, ratio, percentile(took, 99))


__all__ = ["Drain", "drain", "follow", "unix_s"]
