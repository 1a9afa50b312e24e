"""The job runner: claims, leases, retries and stops, over a real SQLite store. One manual
clock drives the store's times and the runner's polls and leases: nothing sleeps."""

from __future__ import annotations

import asyncio

import pytest

from floodway.core.clock import ManualClock
from floodway.errors import EndpointError, Unavailable
from floodway.jobs.job import Job, JobState
from floodway.jobs.runner import JobRunner
from floodway.jobs.store import JobStore
from tests.app.scripted import settle, until


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_runner_completes_jobs(store: JobStore, clock: ManualClock):
    seen: list[str] = []

    async def run(job: Job) -> list:
        seen.append(job.id)
        await asyncio.sleep(0)
        return [x * 2 for x in job.inputs]

    async def go() -> None:
        runner = JobRunner(store, run, owner="r1", concurrency=2, poll_s=10, clock=clock)
        runner.start()
        ids = [store.submit("embed", [i, i + 1])[0].id for i in range(5)]
        runner.wake()   # no waiting for the (long) poll
        await until(lambda: store.counts()["succeeded"] == 5)
        await runner.stop()
        assert sorted(seen) == sorted(ids)
        assert [store.get(i).outputs for i in ids] == [[2 * i, 2 * i + 2] for i in range(5)]

    asyncio.run(go())


def test_runner_retries_unavailable_and_fails_endpoint_errors(store: JobStore,
                                                             clock: ManualClock):
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
        runner = JobRunner(store, run, owner="r1", poll_s=0.01, clock=clock)
        busy, _ = store.submit("embed", ["busy"])
        broken, _ = store.submit("embed", ["broken"])
        flaky, _ = store.submit("embed", ["flaky"])
        bad, _ = store.submit("embed", ["not-a-list"])
        runner.start()
        await until(lambda: store.counts()["succeeded"] + store.counts()["failed"] == 4)
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
                                                                    clock: ManualClock):
    async def go() -> None:
        running = asyncio.Event()

        async def hang(job: Job) -> list:
            running.set()
            await asyncio.Event().wait()   # never finishes
            return []

        async def ok(job: Job) -> list:
            return ["done by r2"]

        job, _ = store.submit("embed", ["x"])
        r1 = JobRunner(store, hang, owner="r1", lease_s=30, poll_s=0.01, clock=clock)
        r1.start()
        await asyncio.wait_for(running.wait(), 5)
        await r1.stop(grace_s=0, release=False)   # dies: nothing reported to the store
        assert store.get(job.id).state == JobState.RUNNING
        r2 = JobRunner(store, ok, owner="r2", lease_s=30, poll_s=0.01, clock=clock)
        r2.start()
        await settle()
        assert store.get(job.id).state == JobState.RUNNING   # r1's lease still holds
        clock.advance(31)
        r2.wake()
        await until(lambda: store.get(job.id).state == JobState.SUCCEEDED)
        await r2.stop()
        done = store.get(job.id)
        # r1's run never said its work started: its claim and lost lease cost nothing;
        # r2's result counts the attempt it made.
        assert done.outputs == ["done by r2"] and done.attempts == 1 and done.claims == 2

    asyncio.run(go())


def test_runner_stop_releases_in_flight_jobs(store: JobStore, clock: ManualClock):
    async def go() -> None:
        gate = asyncio.Event()

        async def hang(job: Job) -> list:
            gate.set()
            await asyncio.Event().wait()
            return []

        job, _ = store.submit("embed", ["x"])
        runner = JobRunner(store, hang, owner="r1", poll_s=0.01, clock=clock)
        runner.start()
        await asyncio.wait_for(gate.wait(), 5)
        await runner.stop(grace_s=0)
        assert runner.inflight == 0
        back = store.get(job.id)
        assert back.state == JobState.QUEUED and back.attempts == 0

    asyncio.run(go())




def test_an_unavailable_backs_off_boundedly_and_freed_capacity_resumes_at_once(
        store: JobStore, clock: ManualClock):
    # A Retry-After of 30 s no longer stops the runner for 30 s: the first Unavailable
    # pauses it for the bounded backoff (0.5 s), and a wake-up from freed capacity ends
    # even that pause at once.
    seen: list[str] = []

    async def run(job: Job) -> list:
        seen.append(job.inputs[0])
        if job.inputs[0] == "first":
            raise Unavailable("its container died twice", retry_after_s=30.0)
        return ["ok"]

    async def go() -> tuple[list[str], list[str], float]:
        runner = JobRunner(store, run, owner="r1", concurrency=1, poll_s=10, clock=clock)
        store.submit("embed", ["first"])
        runner.start()
        await until(lambda: seen == ["first"])
        store.submit("embed", ["second"])
        runner.wake()                    # a submit: still paused, nothing claimed
        await settle()
        paused = list(seen)
        runner.wake(resume=True)         # a slot freed
        await until(lambda: store.counts()["succeeded"] == 1)
        await runner.stop()
        early = store.claim("x", lease_s=1.0, limit=5)
        clock.advance(0.5)
        due = store.claim("x", lease_s=1.0, limit=5)
        return paused, list(seen), early, due

    paused, seen_after, early, due = asyncio.run(go())
    assert paused == ["first"] and seen_after == ["first", "second"]
    # The job that met the Unavailable went back delayed by the backoff (0.5 s, not 30 s)
    # with no attempt counted (its work never started), its error kept.
    assert early == []
    assert [(j.inputs, j.attempts, j.error) for j in due] == [
        (["first"], 0, "its container died twice")]


def test_the_runner_claims_what_the_room_can_start_and_charges_only_started_jobs(
        store: JobStore, clock: ManualClock):
    # Room for 3 rows: whole 2-row jobs while fewer than 3 rows are claimed (two jobs), and
    # nothing more while they wait. Only the job whose work started costs an attempt.
    gate = asyncio.Event()
    seen: list[Job] = []

    async def run(job: Job) -> list:
        seen.append(job)
        await gate.wait()
        return ["ok", "ok"]

    async def go():
        runner = JobRunner(store, run, owner="r1", poll_s=10, clock=clock,
                           room=lambda: {"embed": 3 - sum(len(j.inputs) for j in seen)})
        ids = [store.submit("embed", [i, i])[0].id for i in range(5)]
        runner.start()
        await until(lambda: len(seen) == 2)
        runner.wake()
        await settle()
        claimed = [(j.id, j.attempts) for j in seen]
        runner.started([ids[0]])
        attempts = [store.get(i).attempts for i in ids]
        await runner.stop(grace_s=0, release=False)   # killed
        return ids, claimed, attempts

    ids, claimed, attempts = asyncio.run(go())
    assert claimed == [(ids[0], 0), (ids[1], 0)]
    assert attempts == [1, 0, 0, 0, 0]
    assert store.counts()["queued"] == 3
