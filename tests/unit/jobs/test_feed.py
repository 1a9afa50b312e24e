"""Async jobs on the local pool: a backlog fills every idle container with full batches of
job rows, resumes the moment capacity frees, counts as warm-pool demand, and never makes a
sync request wait behind job rows not yet running. Fake containers on a manual clock: the
test plays the workers; nothing waits on real time."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.jobs.local import LocalJobs
from floodway.jobs.store_thread import inline
from floodway.routers.decide import Action, Request, decide
from floodway.runtime.container import State
from floodway.runtime.pool import Pool
from tests.unit.runtime.fakes import FakeContainer, StepClock, app_with, settle


def run(coro):
    # The timeout only guards against a hung test; nothing waits on it.
    return asyncio.run(asyncio.wait_for(coro, 20))


def _pool_and_jobs(tmp_path, *, containers: int, rows: int, jobs: int, ready: bool = True,
                   max_containers: int = 8):
    clock = StepClock()
    app = app_with(warm=fw.WarmPool(min_containers=containers,
                                    max_containers=max_containers),
                   batching=fw.Batching(max_batch_rows=rows, wait_ms=5),
                   route=fw.Route(max_queue=64, timeout_s=2.0))
    pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                make_container=lambda ep: FakeContainer(ep, clock, slots=2))
    pool.machine_cap = max_containers          # whatever this machine's cores
    for ep in pool.endpoints.values():
        pool._retarget(ep, clock.wall())       # the floor under that cap
    lj = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=clock, capacity=pool,
                   io=inline)   # the manual clock steps the runner: no store thread
    # Queued by an earlier run in the same store: one text each, as a burst's spills.
    for i in range(jobs):
        lj.store.submit("embed", [f"t{i}"], tenant="anonymous", priority="normal")
    return pool, lj, clock


async def _start(pool: Pool, lj: LocalJobs, *, ready: bool = True) -> list[FakeContainer]:
    await pool.start()
    cs = pool.containers["embed"]
    if ready:
        for c in cs:
            c.become_ready(1.0)
    await lj.start()
    await settle(200)
    return cs


async def _stop(pool: Pool, lj: LocalJobs) -> None:
    await lj.runner.stop(grace_s=0)   # the manual clock never reaches a grace period
    lj.store.close()
    await pool.stop()


def _answer_all(c: FakeContainer, per_row_s: float = 0.0) -> int:
    """Answer every batch in flight on `c` (no outputs: each item fails "no output"), each
    taking 0.02 s + `per_row_s` per row; how many rows."""
    rows = 0
    for bid in list(c.inflight):
        n = c.inflight_rows[bid]
        c.answer(bid, {}, service_s=0.02 + per_row_s * n)
        rows += n
    return rows


def test_a_backlog_fills_every_idle_container_with_full_batches_of_job_rows(tmp_path):
    async def go():
        pool, lj, _ = _pool_and_jobs(tmp_path, containers=4, rows=32, jobs=400)
        cs = await _start(pool, lj)
        in_flight = [list(c.inflight_rows.values()) for c in cs]
        queued_low = pool.endpoints["embed"].batcher.rows_by_priority[0]
        claimed = lj.store.counts()["running"]
        await _stop(pool, lj)
        return in_flight, queued_low, claimed

    in_flight, queued_low, claimed = run(go())
    # One full job batch on each of the 4 containers (jobs batched with each other), and a
    # full batch per container ready in the queue: 256 jobs claimed, not 4 or 32.
    assert in_flight == [[32]] * 4
    assert queued_low == 4 * 32
    assert claimed == 256


def test_a_job_waiting_for_capacity_goes_the_moment_a_container_is_ready(tmp_path):
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=1, rows=8, jobs=3)
        cs = await _start(pool, lj, ready=False)
        before = (lj.store.counts()["running"], sum(len(c.inflight) for c in cs))
        cs[0].become_ready(1.0)          # only the wake-up: no poll, no Retry-After passes
        await settle(200)
        clock.advance(0.006)             # the batcher's wait for more rows (wait_ms 5)
        pool.endpoints["embed"].batcher.notify()
        await settle(50)
        after = (lj.store.counts()["running"], list(cs[0].inflight_rows.values()))
        await _stop(pool, lj)
        return before, after

    before, after = run(go())
    assert before == (0, 0)        # no warm container: nothing claimed, nothing sent
    assert after == (3, [3])       # at once, as one batch of the three jobs' rows


def test_jobs_finish_and_their_freed_slots_take_the_next_jobs_at_once(tmp_path):
    async def go():
        pool, lj, _ = _pool_and_jobs(tmp_path, containers=2, rows=4, jobs=40)
        cs = await _start(pool, lj)
        done = 0
        for _ in range(5):   # five rounds of both containers answering, the clock still
            for c in cs:
                done += _answer_all(c)
            await settle(200)
        counts = lj.store.counts()
        await _stop(pool, lj)
        return done, counts

    done, counts = run(go())
    assert done == 40          # 5 rounds x 2 containers x 4 rows: no pause between them
    assert counts["failed"] == 40 and counts["queued"] == 0   # no outputs: "no output"


def test_an_idle_server_with_a_job_backlog_answers_a_short_sync_request(tmp_path):
    """The new user's report: 895 jobs left queued by an earlier run, `make run`'s example
    request (two short texts) on an otherwise idle server was a 202 four times out of four.
    Cause: the job rows the runner fed the batcher counted in the arrival rate that
    `decide()` reads, so a 2-row request was planned as riding in a full batch behind a full
    job batch (wait + service over the 2 s deadline's budget: spill to async); and any job
    request queued kept it from the idle-container dispatch."""
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=2, rows=32, jobs=895,
                                         max_containers=2)
        ep = pool.endpoints["embed"]
        for rows, s in ((32, 0.9), (16, 0.46), (2, 0.08), (8, 0.25)):
            ep.service.record(rows, s)     # long texts on CPU: a full batch ~0.9 s
        cs = await _start(pool, lj)
        decisions = []
        for _ in range(4):          # the backlog drains as it did: a batch each ~0.9 s
            clock.advance(0.9)
            for c in cs:
                _answer_all(c, per_row_s=0.0275)
            await settle(200)
            snap = pool.snapshot("embed")
            decisions.append(decide(snap, Request(rows=2, deadline_s=snap.now_s + 2.0)))
        queued_jobs = pool.endpoints["embed"].batcher.rows_by_priority[0]
        pool.enqueue("embed", ["a", "b"], timeout_s=2.0)
        await settle(50)
        clock.advance(0.006)             # the batcher's wait for more rows (wait_ms 5)
        pool.endpoints["embed"].batcher.notify()
        await settle(50)
        pipes = [list(c.inflight_rows.values()) for c in cs]
        await _stop(pool, lj)
        return decisions, (queued_jobs, pipes)

    decisions, (queued_jobs, pipes) = run(go())
    assert all(d.action in (Action.DISPATCH, Action.QUEUE) for d in decisions), decisions
    # The sync rows go next, right behind a running job batch, ahead of every queued job
    # row (a full batch per container waits in the queue). A job batch is cut at a quarter
    # of the 2 s deadline by the fit (JOB_BATCH_SHARE): 17 rows of ~0.0275 s, not 32.
    assert queued_jobs == 64
    assert sorted(pipes) == [[17], [17, 2]], pipes


def test_a_backlog_counts_as_demand_for_the_warm_pool_up_to_max_containers(tmp_path):
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=0, rows=32, jobs=900,
                                         max_containers=3)
        ep = pool.endpoints["embed"]
        ep.service.record(32, 0.32)
        ep.service.record(8, 0.1)
        ep.cold.record(2.0)                   # 900 rows: ~9 s of work, 2 s cold starts
        await pool.start()
        await lj.start()
        idle = len(pool.containers["embed"])
        pool.tick(clock.advance(0.5))
        await settle(50)
        target = ep.target
        started = [c for c in pool.containers["embed"] if c.state == State.STARTING]
        await _stop(pool, lj)
        return idle, target, len(started)

    idle, target, started = run(go())
    assert idle == 0                          # min_containers 0 and no traffic
    assert target.min_containers == 3 and "backlog of 900" in target.reason, target
    assert started == 3
