"""Jobs of an endpoint whose containers keep failing to start (a `load` hook that raises):
after `health.FAILING_STARTS` failed starts in a row its queued jobs fail with the load
error instead of waiting for a container that never comes, and new ones are refused with a
503. Fake containers on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

import floodway as fw
from floodway.errors import StartFailing
from floodway.jobs.job import JobState
from floodway.jobs.local import LocalJobs
from floodway.jobs.store_thread import inline
from floodway.routers.admission import Priority
from floodway.runtime import health
from floodway.runtime.pool import Pool
from tests.unit.runtime.fakes import FakeContainer, StepClock, app_with, settle

BOOM = "ValueError: the weights file is corrupt"


def run(coro):
    # The timeout only guards against a hung test; nothing waits on it.
    return asyncio.run(asyncio.wait_for(coro, 20))


async def _crash(pool: Pool, clock: StepClock, starts: range) -> None:
    """These starts of the endpoint (0: its first) fail on load; each is replaced after its
    backoff."""
    for i in starts:
        await settle()
        (c,) = pool.containers["embed"]
        c.fail_start(BOOM)
        await settle()
        clock.advance(health.backoff_s(i))
        await settle()


def test_queued_jobs_of_an_endpoint_that_cannot_start_fail_with_its_load_error(tmp_path):
    async def go():
        clock = StepClock()
        app = app_with(warm=fw.WarmPool(min_containers=1))
        pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                    make_container=lambda ep: FakeContainer(ep, clock))
        pool.machine_cap = 8
        lj = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=clock, capacity=pool,
                       io=inline)
        # Accepted (202) while the endpoint had not failed yet.
        ids = [lj.store.submit("embed", [f"t{i}"], tenant="a")[0].id for i in range(3)]
        await pool.start()
        await lj.start()
        await _crash(pool, clock, range(health.FAILING_STARTS - 1))
        before = lj.store.counts()["queued"]
        await _crash(pool, clock, range(health.FAILING_STARTS - 1, health.FAILING_STARTS))
        jobs = [lj.store.get(i) for i in ids]
        with pytest.raises(StartFailing) as refused:
            await lj.submit("embed", ["new"], tenant="a", priority=Priority.NORMAL,
                            idempotency_key=None)
        await lj.runner.stop(grace_s=0)
        lj.store.close()
        await pool.stop()
        return before, jobs, refused.value

    before, jobs, refused = run(go())
    assert before == 3                     # two failed starts: still waiting for the next
    assert [j.state for j in jobs] == [JobState.FAILED] * 3
    assert all(j.attempts == 0 and "'embed' cannot start" in j.error and BOOM in j.error
               for j in jobs)
    assert BOOM in str(refused) and refused.retry_after_s >= 1.0
