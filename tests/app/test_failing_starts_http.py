"""An endpoint whose `load` hook keeps crashing, over HTTP (in process, on the local pool
with fake containers and a manual clock): once its starts have failed
`health.FAILING_STARTS` times in a row, a request is a 503 with Retry-After naming the load
error (never a 202 job that waits for ever), /readyz says why, and a job accepted before
fails with that error."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from floodway.runtime import health
from floodway.runtime.pool import Pool
from tests.app.scripted import client
from tests.app.test_admission_http import poll_job
from tests.unit.runtime.fakes import FakeContainer, StepClock, app_with, settle

BOOM = "OSError: [Errno 2] No such file or directory: 'weights.bin'"


def test_a_crash_looping_endpoint_answers_503_with_its_load_error_and_fails_its_jobs(
        tmp_path):
    app = app_with(warm=fw.WarmPool(min_containers=1),
                   route=fw.Route(timeout_s=5.0, spill=("cold", "async")))

    async def go():
        clock = StepClock()
        pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                    make_container=lambda ep: FakeContainer(ep, clock))
        pool.machine_cap = 8
        jobs = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=clock, capacity=pool)
        asgi = make_asgi_app(app, pool, jobs=jobs, clock=clock)
        await pool.start()
        await jobs.start()
        async with client(asgi) as http:
            early = await http.post("/v1/embed/jobs", json={"inputs": ["a"]})
            for i in range(health.FAILING_STARTS):
                pool.containers["embed"][0].fail_start(BOOM)
                await settle()
                clock.advance(health.BACKOFF_S[i])
                await settle()
            sync = await http.post("/v1/embed", json={"inputs": ["b"]})
            later = await http.post("/v1/embed/jobs", json={"inputs": ["c"]})
            ready = await http.get("/readyz")
            job = await poll_job(http, early.headers["location"], "failed")
        await jobs.stop()
        await pool.stop()
        return early, sync, later, ready, job

    early, sync, later, ready, job = asyncio.run(asyncio.wait_for(go(), 20))
    assert early.status_code == 202
    for r in (sync, later):
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        message = r.json()["error"]["message"]
        assert "endpoint 'embed' cannot start" in message and BOOM in message
    assert ready.status_code == 503
    assert BOOM in ready.json()["failures"]["embed"]["failing"]
    assert "cannot start" in job["error"] and BOOM in job["error"]
