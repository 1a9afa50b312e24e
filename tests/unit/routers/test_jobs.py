"""The durable job queue and its runner: real SQLite files, an injected clock, no sleeps for
correctness."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from floodway.errors import EndpointError, RequestError, Unavailable
from floodway.routers.job_runner import JobRunner
from floodway.routers.jobs import (
    TRANSITIONS,
    IllegalTransition,
    Job,
    JobState,
    JobStore,
    check_transition,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock):
    s = JobStore(tmp_path / "jobs.db", ttl_s=100.0, max_attempts=3, clock=clock)
    yield s
    s.close()


# ---------------------------------------------------------------------- state machine
def test_transitions_table():
    check_transition(JobState.QUEUED, JobState.RUNNING)
    check_transition(JobState.RUNNING, JobState.RUNNING)    # lease taken over
    check_transition(JobState.SUCCEEDED, JobState.EXPIRED)
    for old, new in [(JobState.SUCCEEDED, JobState.RUNNING), (JobState.FAILED, JobState.QUEUED),
                     (JobState.EXPIRED, JobState.QUEUED), (JobState.QUEUED, JobState.EXPIRED)]:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)
    assert TRANSITIONS[JobState.EXPIRED] == frozenset()


# ---------------------------------------------------------------------- durability
def test_submit_get_roundtrip_and_wire(store: JobStore, clock: Clock):
    job, created = store.submit("embed", ["a", {"b": [1, 2.5]}], tenant="t1")
    assert created and len(job.id) == 32 and job.state == JobState.QUEUED
    got = store.get(job.id)
    assert got == job
    assert got.inputs == ["a", {"b": [1, 2.5]}] and got.attempts == 0
    assert got.finished_s is None and got.expires_s is None
    wire = got.to_wire()
    assert wire == {"id": job.id, "endpoint": "embed", "status": "queued", "attempts": 0,
                    "created_at": "2023-11-14T22:13:20.000Z", "finished_at": None}
    assert store.get("f" * 31) is None and store.get(job.id.upper()) is None
    assert store.get("../../etc") is None and store.get("0" * 32) is None


def test_reopen_same_file_and_wal(tmp_path: Path, clock: Clock):
    path = tmp_path / "jobs.db"
    s1 = JobStore(path, clock=clock)
    job, _ = s1.submit("embed", [1, 2, 3], priority="high")
    s1.close()
    s2 = JobStore(path, clock=clock)
    assert s2.get(job.id) == job
    s2.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1


def test_submitted_job_survives_kill_9(tmp_path: Path):
    path = tmp_path / "jobs.db"
    child = textwrap.dedent(f"""
        import sys, time
        from floodway.routers.jobs import JobStore
        store = JobStore({str(path)!r})
        job, _ = store.submit("embed", ["survive me"])
        print(job.id, flush=True)   # the moment a 202 would be sent
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, env=env,
                            text=True)
    try:
        job_id = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    with JobStore(path) as store:
        job = store.get(job_id)
    assert job is not None and job.state == JobState.QUEUED and job.inputs == ["survive me"]


# ---------------------------------------------------------------------- idempotency
def test_idempotency_key(store: JobStore):
    a, created_a = store.submit("embed", ["x"], tenant="t1", idempotency_key="k-1")
    b, created_b = store.submit("embed", ["x"], tenant="t1", idempotency_key="k-1")
    assert created_a and not created_b and b.id == a.id
    with pytest.raises(RequestError) as e:
        store.submit("embed", ["y"], tenant="t1", idempotency_key="k-1")
    assert e.value.status == 409 and e.value.field == "Idempotency-Key"
    assert "different request" in str(e.value)
    # Keys are scoped per (tenant, endpoint): another endpoint or tenant is another job.
    o, created_o = store.submit("other", ["x"], tenant="t1", idempotency_key="k-1")
    assert created_o and o.id != a.id
    c, created_c = store.submit("embed", ["x"], tenant="t2", idempotency_key="k-1")
    d, created_d = store.submit("embed", ["x"], idempotency_key="k-1")
    e2, _ = store.submit("embed", ["x"], idempotency_key="k-1")
    assert created_c and created_d and len({a.id, c.id, d.id}) == 3 and e2.id == d.id
    # Without a key every submit is a new job.
    assert store.submit("embed", ["x"])[0].id != store.submit("embed", ["x"])[0].id


def test_idempotency_returns_job_in_any_state_then_expires_with_it(store: JobStore,
                                                                   clock: Clock):
    a, _ = store.submit("embed", ["x"], idempotency_key="k")
    [claimed] = store.claim("w1", lease_s=10)
    assert store.complete(claimed.id, "w1", [[0.1]])
    again, created = store.submit("embed", ["x"], idempotency_key="k")
    assert not created and again.state == JobState.SUCCEEDED and again.outputs == [[0.1]]
    clock.advance(101)   # past the TTL: the key is free again
    fresh, created = store.submit("embed", ["x"], idempotency_key="k")
    assert created and fresh.id != a.id and fresh.state == JobState.QUEUED


def test_bad_priority_and_key(store: JobStore):
    with pytest.raises(RequestError) as e:
        store.submit("embed", [1], priority="urgent")
    assert e.value.status == 422 and e.value.field == "priority"
    for key in ("", "has space", "x" * 256):
        with pytest.raises(RequestError) as e:
            store.submit("embed", [1], idempotency_key=key)
        assert e.value.status == 400


# ---------------------------------------------------------------------- claims and leases
def test_claim_order_priority_then_age(store: JobStore, clock: Clock):
    ids = {}
    for name, prio in [("n1", "normal"), ("l1", "low"), ("h1", "high"), ("n2", "normal"),
                       ("h2", "high")]:
        ids[store.submit("embed", [name], priority=prio)[0].id] = name
        clock.advance(1)
    first = store.claim("w", lease_s=10, limit=2)
    rest = store.claim("w", lease_s=10, limit=10)
    assert [ids[j.id] for j in first + rest] == ["h1", "h2", "n1", "n2", "l1"]
    assert all(j.state == JobState.RUNNING and j.attempts == 1 for j in first + rest)
    assert store.claim("w", lease_s=10) == []


def test_claim_filters_endpoints(store: JobStore):
    store.submit("embed", [1])
    b, _ = store.submit("rerank", [2])
    assert [j.id for j in store.claim("w", lease_s=5, endpoints=["rerank"], limit=5)] == [b.id]
    assert store.claim("w", lease_s=5, endpoints=[]) == []


def test_lease_expiry_reclaim_and_complete_once(store: JobStore, clock: Clock):
    job, _ = store.submit("embed", ["x"])
    [a] = store.claim("w1", lease_s=10)
    assert store.claim("w2", lease_s=10) == []          # leased
    clock.advance(5)
    assert store.renew(job.id, "w1", 10)                # lease now ends at +15
    clock.advance(9)
    assert store.claim("w2", lease_s=10) == []
    clock.advance(2)                                    # w1 went silent: lease expired
    [b] = store.claim("w2", lease_s=10)
    assert b.id == job.id and b.attempts == 2 and "lease of w1 expired" in b.error
    assert not store.renew(job.id, "w1", 10)            # w1 no longer holds it
    assert not store.fail(job.id, "w1", "late", retry=True)
    assert store.complete(job.id, "w2", ["second"])
    assert not store.complete(job.id, "w1", ["stale"])  # late result changes nothing
    done = store.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.outputs == ["second"]
    assert done.error is None and done.finished_s == clock.t and done.expires_s == clock.t + 100
    assert done.to_wire()["outputs"] == ["second"] and "error" not in done.to_wire()


def test_stale_owner_completing_first_wins(store: JobStore, clock: Clock):
    job, _ = store.submit("embed", ["x"])
    store.claim("w1", lease_s=10)
    clock.advance(11)
    store.claim("w2", lease_s=10)
    assert store.complete(job.id, "w1", ["first"])      # expired lease, but first to finish
    assert not store.complete(job.id, "w2", ["second"])
    assert store.get(job.id).outputs == ["first"]


def test_complete_needs_a_claim(store: JobStore):
    job, _ = store.submit("embed", ["x"])
    assert not store.complete(job.id, "w", [1])
    assert not store.complete("0" * 32, "w", [1])
    assert store.get(job.id).state == JobState.QUEUED


def test_max_attempts_gives_up(store: JobStore, clock: Clock):
    job, _ = store.submit("embed", ["x"])
    for _ in range(3):
        [j] = store.claim("w", lease_s=10)
        clock.advance(11)                               # each worker dies
    assert store.claim("w", lease_s=10) == []
    failed = store.get(job.id)
    assert failed.state == JobState.FAILED and failed.attempts == 3
    assert failed.error == "gave up after 3 attempts: lease of w expired"
    assert failed.to_wire()["error"] == failed.error and "outputs" not in failed.to_wire()


def test_fail_retry_and_fail_for_good(store: JobStore, clock: Clock):
    job, _ = store.submit("embed", ["x"])
    store.claim("w", lease_s=10)
    assert store.fail(job.id, "w", "no capacity", retry=True, delay_s=5)
    again = store.get(job.id)
    assert again.state == JobState.QUEUED and again.error == "no capacity"
    assert store.claim("w", lease_s=10) == []           # delayed
    clock.advance(5)
    store.claim("w", lease_s=10)
    assert store.fail(job.id, "w", "boom", retry=True)
    store.claim("w", lease_s=10)
    assert store.fail(job.id, "w", "boom again", retry=True)   # third attempt: exhausted
    assert store.get(job.id).error == "gave up after 3 attempts: boom again"
    other, _ = store.submit("embed", ["y"])
    store.claim("w", lease_s=10)
    assert store.fail(other.id, "w", "bad input", retry=False)
    assert store.get(other.id).state == JobState.FAILED
    assert store.get(other.id).error == "bad input"
    assert not store.fail(other.id, "w", "twice", retry=False)


def test_release_does_not_count_an_attempt(store: JobStore):
    job, _ = store.submit("embed", ["x"])
    store.claim("w", lease_s=10)
    assert not store.release(job.id, "someone else")
    assert store.release(job.id, "w")
    assert store.get(job.id).state == JobState.QUEUED and store.get(job.id).attempts == 0


# ---------------------------------------------------------------------- expiry
def test_ttl_expiry_and_purge(store: JobStore, clock: Clock):
    done, _ = store.submit("embed", ["done"])
    store.claim("w", lease_s=1000)
    store.complete(done.id, "w", ["out"])
    failed, _ = store.submit("embed", ["bad"])
    store.claim("w", lease_s=1000)
    store.fail(failed.id, "w", "bad", retry=False)
    queued, _ = store.submit("embed", ["waiting"])
    clock.advance(99)
    assert store.purge() == 0 and store.get(done.id).state == JobState.SUCCEEDED
    clock.advance(2)
    tomb = store.get(done.id)
    assert tomb.state == JobState.EXPIRED and tomb.outputs is None and tomb.inputs == []
    assert tomb.to_wire()["status"] == "expired" and "outputs" not in tomb.to_wire()
    assert store.counts()["expired"] == 2
    assert store.purge() == 2
    assert store.get(done.id) is None and store.get(failed.id) is None
    clock.advance(10_000)
    assert store.purge() == 0 and store.get(queued.id).state == JobState.QUEUED


def test_lazy_purge_on_submit(store: JobStore, clock: Clock):
    job, _ = store.submit("embed", ["x"])
    store.claim("w", lease_s=10)
    store.complete(job.id, "w", [1])
    clock.advance(200)
    store.submit("embed", ["y"])
    assert store.get(job.id) is None


def test_counts(store: JobStore):
    assert store.counts() == {"queued": 0, "running": 0, "succeeded": 0, "failed": 0,
                              "expired": 0}
    jobs = [store.submit("embed", [i])[0] for i in range(5)]
    a, b = store.claim("w", lease_s=10, limit=2)
    store.complete(a.id, "w", [0])
    store.fail(b.id, "w", "x", retry=False)
    store.claim("w", lease_s=10)
    assert len(jobs) == 5
    assert store.counts() == {"queued": 2, "running": 1, "succeeded": 1, "failed": 1,
                              "expired": 0}


# ---------------------------------------------------------------------- runner
def _until(cond, timeout_s: float = 5.0):
    async def wait() -> None:
        async with asyncio.timeout(timeout_s):
            while not cond():
                await asyncio.sleep(0.005)
    return wait()


def test_runner_completes_jobs(store: JobStore):
    seen: list[str] = []

    async def run(job: Job) -> list:
        seen.append(job.id)
        await asyncio.sleep(0)
        return [x * 2 for x in job.inputs]

    async def go() -> None:
        runner = JobRunner(store, run, owner="r1", concurrency=2, poll_s=10)
        runner.start()
        ids = [store.submit("embed", [i, i + 1])[0].id for i in range(5)]
        runner.wake()   # no waiting for the (long) poll
        await _until(lambda: store.counts()["succeeded"] == 5)
        await runner.stop()
        assert sorted(seen) == sorted(ids)
        assert [store.get(i).outputs for i in ids] == [[2 * i, 2 * i + 2] for i in range(5)]

    asyncio.run(go())


def test_runner_retries_unavailable_and_fails_endpoint_errors(store: JobStore):
    calls: dict[str, int] = {}

    async def run(job: Job) -> list:
        calls[job.inputs[0]] = calls.get(job.inputs[0], 0) + 1
        if job.inputs[0] == "busy" and calls["busy"] == 1:
            raise Unavailable("no container free", retry_after_s=0.0)
        if job.inputs[0] == "broken":
            raise EndpointError("endpoint 'embed' raised ValueError: bad shape")
        if job.inputs[0] == "flaky" and calls["flaky"] == 1:
            raise ConnectionError("reset")
        if job.inputs[0] == "not-a-list":
            return "oops"   # type: ignore[return-value]
        return ["ok"]

    async def go() -> None:
        runner = JobRunner(store, run, owner="r1", poll_s=0.01)
        busy, _ = store.submit("embed", ["busy"])
        broken, _ = store.submit("embed", ["broken"])
        flaky, _ = store.submit("embed", ["flaky"])
        bad, _ = store.submit("embed", ["not-a-list"])
        runner.start()
        await _until(lambda: store.counts()["succeeded"] + store.counts()["failed"] == 4)
        await runner.stop()
        b = store.get(busy.id)
        # No capacity is not a failed attempt: run twice, one attempt counted.
        assert b.state == JobState.SUCCEEDED and b.attempts == 1 and calls["busy"] == 2
        f = store.get(flaky.id)
        assert f.state == JobState.SUCCEEDED and f.attempts == 2
        e = store.get(broken.id)
        assert e.state == JobState.FAILED and e.attempts == 1 and calls["broken"] == 1
        assert e.error == "endpoint 'embed' raised ValueError: bad shape"
        assert "expected a list" in store.get(bad.id).error

    asyncio.run(go())


def test_runner_dying_mid_job_lease_expires_second_runner_completes(store: JobStore,
                                                                    clock: Clock):
    async def go() -> None:
        running = asyncio.Event()

        async def hang(job: Job) -> list:
            running.set()
            await asyncio.Event().wait()   # never finishes
            return []

        async def ok(job: Job) -> list:
            return ["done by r2"]

        job, _ = store.submit("embed", ["x"])
        r1 = JobRunner(store, hang, owner="r1", lease_s=30, poll_s=0.01)
        r1.start()
        await asyncio.wait_for(running.wait(), 5)
        await r1.stop(grace_s=0, release=False)   # dies: nothing reported to the store
        assert store.get(job.id).state == JobState.RUNNING
        r2 = JobRunner(store, ok, owner="r2", lease_s=30, poll_s=0.01)
        r2.start()
        await asyncio.sleep(0.05)
        assert store.get(job.id).state == JobState.RUNNING   # r1's lease still holds
        clock.advance(31)
        r2.wake()
        await _until(lambda: store.get(job.id).state == JobState.SUCCEEDED)
        await r2.stop()
        done = store.get(job.id)
        assert done.outputs == ["done by r2"] and done.attempts == 2

    asyncio.run(go())


def test_runner_stop_releases_in_flight_jobs(store: JobStore):
    async def go() -> None:
        gate = asyncio.Event()

        async def hang(job: Job) -> list:
            gate.set()
            await asyncio.Event().wait()
            return []

        job, _ = store.submit("embed", ["x"])
        runner = JobRunner(store, hang, owner="r1", poll_s=0.01)
        runner.start()
        await asyncio.wait_for(gate.wait(), 5)
        await runner.stop(grace_s=0)
        assert runner.inflight == 0
        back = store.get(job.id)
        assert back.state == JobState.QUEUED and back.attempts == 0

    asyncio.run(go())


def test_a_job_submitted_with_an_owner_starts_running_under_its_lease(store: JobStore,
                                                                       clock: Clock):
    job, created = store.submit("embed", ["x"], tenant="t", owner="router-a", lease_s=10)
    assert created and job.state == JobState.RUNNING and job.attempts == 1
    assert store.claim("router-b", lease_s=10) == []        # leased: nobody else takes it
    clock.t += 11                                            # the owner died: lease expired
    (again,) = store.claim("router-b", lease_s=10)
    assert again.id == job.id and again.attempts == 2
    assert store.complete(job.id, "router-a", ["late but first"])   # first result wins
    assert store.get(job.id).outputs == ["late but first"]
