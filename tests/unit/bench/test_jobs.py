"""Following a replay's jobs: polled to their end on an in-process router, and the drain
after a burst computed from when each finished."""

from __future__ import annotations

import asyncio
import math

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from floodway.bench.jobs import drain, follow, unix_s
from floodway.bench.replay import Result


def router(polls_until_done: int) -> Starlette:
    seen: dict[str, int] = {}

    async def job(request):
        jid = request.path_params["id"]
        if jid == "gone":
            return JSONResponse({"detail": "no job"}, status_code=404)
        seen[jid] = seen.get(jid, 0) + 1
        if seen[jid] < polls_until_done:
            return JSONResponse({"id": jid, "status": "queued", "finished_at": None})
        return JSONResponse({"id": jid, "status": "succeeded",
                             "finished_at": "2026-12-02T10:00:05.250Z"})

    return Starlette(routes=[Route("/v1/jobs/{id}", job)])


def test_each_job_is_followed_to_its_end_and_when_it_finished_is_the_routers():
    results = [Result(0, 0.0, status=202, job="/v1/jobs/a"),
               Result(1, 0.1, status=202, job="/v1/jobs/gone"),
               Result(2, 0.2, status=200)]
    t0 = unix_s("2026-12-02T10:00:00.000Z")

    async def go() -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(router(3)),
                                     base_url="http://router") as c:
            return await follow(c, results, t0)

    assert asyncio.run(go()) == 2
    assert results[0].job_status == "succeeded"
    assert math.isclose(results[0].job_done_s, 5.25, abs_tol=1e-6)
    assert results[1].job_status == "lost" and math.isnan(results[1].job_done_s)
    assert results[2].job_status == ""


def test_the_drain_counts_jobs_and_200s_from_the_bursts_end_to_the_last_job():
    jobs = [Result(i, 1.0, status=202, job=f"/v1/jobs/{i}", job_status="succeeded",
                   job_done_s=2.0 + i * 0.1) for i in range(20)]      # 2.0 .. 3.9 s
    served = [Result(100 + i, 2.5, status=200, latency_s=0.1) for i in range(10)]
    d = drain([*jobs, *served], capacity_rps=15.0, burst_end_s=1.9)
    assert (d.jobs, d.succeeded) == (20, 20)
    assert math.isclose(d.after_s, 2.0)
    assert math.isclose(d.per_s, 30 / 2.0) and math.isclose(d.ratio, 1.0)
    few = drain(jobs[:3], capacity_rps=15.0, burst_end_s=1.9)
    assert math.isnan(few.ratio)             # too few jobs to measure a rate
