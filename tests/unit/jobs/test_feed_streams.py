"""A streaming endpoint's jobs on the local pool: a job that does not fit now never holds up
the jobs behind it, and one that can never fit fails at once with the limit instead of
being claimed and handed back for ever. Fake streaming containers on a manual clock."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.jobs.job import JobState
from floodway.jobs.local import LocalJobs
from floodway.jobs.store_thread import inline
from floodway.runtime.pool import Pool
from tests.unit.runtime.fakes import StepClock, StreamFake, settle


def run(coro):
    # The timeout only guards against a hung test; nothing waits on it.
    return asyncio.run(asyncio.wait_for(coro, 20))


def _app() -> fw.App:
    # One container of 2 sequences; a job (low priority) queues at most 0.5 x 8 = 4.
    app = fw.App("jobs-streams")

    @app.endpoint(warm=fw.WarmPool(min_containers=1, max_containers=1),
                  generation=fw.Generation(max_sequences=2, max_new_tokens=16),
                  route=fw.Route(max_queue=8, timeout_s=30.0))
    async def gen(model, text: str):
        yield text

    return app


async def _started(tmp_path):
    clock = StepClock()
    app = _app()
    pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                make_container=lambda ep: StreamFake(ep, clock, slots=2))
    pool.machine_cap = 1          # the cores take one container, as on a small machine
    lj = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=clock, capacity=pool,
                   io=inline)
    await pool.start()
    (c,) = pool.containers["gen"]
    c.become_ready(1.0)
    await settle()
    return pool, lj, c


async def _stop(pool: Pool, lj: LocalJobs) -> None:
    await lj.runner.stop(grace_s=0)
    lj.store.close()
    await pool.stop()


def _states(lj: LocalJobs, *ids: str) -> list[str]:
    return [str(lj.store.get(i).state) for i in ids]


def test_a_job_that_does_not_fit_now_lets_the_next_tenants_job_through(tmp_path):
    async def go():
        pool, lj, c = await _started(tmp_path)
        ep = pool.endpoints["gen"]
        # Two sync sequences run, two more wait at normal priority: the queue's room for
        # a job is 4 sequences, 2 of them taken.
        sync = [pool.enqueue("gen", ["s1", "s2", "s3", "s4"], timeout_s=30.0, tenant="x")]
        await settle()
        big, _ = lj.store.submit("gen", ["a", "b", "c"], tenant="t1", priority="normal")
        small, _ = lj.store.submit("gen", ["d"], tenant="t2", priority="normal")
        await lj.start()
        await settle(200)
        seen = (_states(lj, big.id, small.id), ep.batcher.rows_by_priority[0],
                len(c.sequences))
        sync[0].cancel()
        await _stop(pool, lj)
        return seen

    (states, low_rows, running) = run(go())
    assert running == 2
    # The 3-sequence job waits (2 queued + 3 > 4); the 1-sequence job behind it was claimed
    # and queued all the same, instead of staying in the store while the first one waited.
    assert states == ["running", "running"] and low_rows == 1


def test_a_stored_job_that_can_never_fit_fails_at_once_and_the_next_runs(tmp_path):
    async def go():
        pool, lj, c = await _started(tmp_path)
        # Stored as an older router accepted it: 5 sequences, where a job can hold at most
        # max(1 container x 2, 4 queued) = 4.
        never, _ = lj.store.submit("gen", ["a"] * 5, tenant="t1", priority="normal")
        fits, _ = lj.store.submit("gen", ["b"], tenant="t2", priority="normal")
        await lj.start()
        await settle(200)
        seen = (lj.store.get(never.id), _states(lj, fits.id), len(c.sequences))
        await _stop(pool, lj)
        return seen

    failed, fits_state, running = run(go())
    assert failed.state == JobState.FAILED and failed.attempts == 1
    assert "the request makes 5 sequences" in failed.error
    assert "at most 4 can ever be admitted" in failed.error
    assert fits_state == ["running"] and running == 1       # the next job went on


def test_a_job_of_more_sequences_than_a_job_can_hold_is_refused_before_it_is_stored(tmp_path):
    import pytest

    from floodway.errors import RequestError
    from floodway.routers.admission import Priority

    async def go():
        pool, lj, _ = await _started(tmp_path)
        with pytest.raises(RequestError) as info:
            await lj.submit("gen", ["a"] * 5, tenant="t", priority=Priority.NORMAL,
                            idempotency_key=None)
        wire, created = await lj.submit("gen", ["a"] * 4, tenant="t",
                                        priority=Priority.NORMAL, idempotency_key=None)
        counts = lj.store.counts()
        await _stop(pool, lj)
        return info.value, created, counts

    err, created, counts = run(go())
    assert err.status == 413 and err.field == "inputs"
    assert "as a job" in str(err) and "makes 5 sequences" in str(err)
    assert created and counts["queued"] == 1          # only the one that fits was stored
