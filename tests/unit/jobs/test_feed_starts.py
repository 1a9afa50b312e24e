"""When a job's attempt counts on the local pool: the moment its rows go to a container (the
pool's send wake-up), not when the runner claims it. Fake containers on a manual clock."""

from __future__ import annotations

from floodway.jobs.job import JobState
from tests.unit.jobs.test_feed import _pool_and_jobs, _start, run
from tests.unit.runtime.fakes import settle


def _by_state(lj) -> dict[str, list[tuple[int, int]]]:
    """(attempts, claims) of every job, by state."""
    with lj.store._write() as db:
        rows = db.execute("SELECT state, attempts, claims FROM jobs ORDER BY created_s, rowid")
        out: dict[str, list[tuple[int, int]]] = {}
        for state, attempts, claims in rows:
            out.setdefault(state, []).append((attempts, claims))
    return out


def test_a_job_is_charged_when_its_batch_goes_to_a_container_not_when_claimed(tmp_path):
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=1, rows=4, jobs=10)
        cs = await _start(pool, lj, ready=False)
        cold = _by_state(lj)
        cs[0].become_ready(1.0)
        await settle(200)
        sent = list(cs[0].inflight_rows.values())
        warm = _by_state(lj)
        # The router is killed now: nothing more reaches the store.
        await lj.runner.stop(grace_s=0, release=False)
        lj.store.close()
        await pool.stop()
        return cold, sent, warm

    cold, sent, warm = run(go())
    assert cold == {"queued": [(0, 0)] * 10}        # no warm container: nothing claimed
    assert sent == [4]                              # a full batch of four jobs' rows
    # Those four started (one attempt each); the next four are claimed for the batch ready
    # behind them (the pool's job room) and cost nothing yet; the rest stay in the store.
    assert warm == {"running": [(1, 1)] * 4 + [(0, 1)] * 4, "queued": [(0, 0)] * 2}


def _answer_latest(c) -> int:
    """Answer the one batch in flight on `c` with each item's text upper-cased; its rows."""
    (bid,) = c.inflight
    c.answer(bid, {item_id: text.upper() for item_id, text in c.items})
    return len(c.items)


def test_jobs_that_succeed_count_one_attempt_and_one_completion(tmp_path):
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=1, rows=4, jobs=10)
        cs = await _start(pool, lj)
        done = 0
        while done < 10:
            done += _answer_latest(cs[0])
            await settle(200)
            clock.advance(0.006)             # the batcher's wait for more rows (wait_ms 5)
            pool.endpoints["embed"].batcher.notify()
            await settle(50)
        with lj.store._write() as db:
            rows = db.execute("SELECT state, attempts, completions, outputs, inputs "
                              "FROM jobs ORDER BY created_s, rowid").fetchall()
        await lj.runner.stop(grace_s=0)
        lj.store.close()
        await pool.stop()
        return [tuple(r) for r in rows]

    rows = run(go())
    assert rows == [(str(JobState.SUCCEEDED), 1, 1, f'["T{i}"]', "[]") for i in range(10)]


def test_a_graceful_stop_hands_started_jobs_back_uncharged(tmp_path):
    async def go():
        pool, lj, clock = _pool_and_jobs(tmp_path, containers=1, rows=4, jobs=4)
        cs = await _start(pool, lj)
        on_container = sum(cs[0].inflight_rows.values())
        await lj.runner.stop(grace_s=0)            # release=True: our stop, not the job's
        state = _by_state(lj)
        lj.store.close()
        await pool.stop()
        return on_container, state

    on_container, state = run(go())
    assert on_container == 4 and state == {"queued": [(0, 1)] * 4}
