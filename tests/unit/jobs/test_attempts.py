"""Attempts count work, not claims: a claimed job costs an attempt only once its work starts,
a lease that expires before that hands it back uncharged, and a router killed over and over
never fails the jobs it had only claimed. Real SQLite files, a manual clock."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from floodway.core.clock import ManualClock
from floodway.errors import FloodwayError
from floodway.jobs.job import JobState
from floodway.jobs.store import JobStore
from tests.unit.jobs.conftest import T0


def test_a_claim_is_uncharged_and_a_start_is_charged_once(store: JobStore, clock: ManualClock):
    job, _ = store.submit("embed", ["x"], tenant="t")
    [claimed] = store.claim("w1", lease_s=10)
    assert (claimed.attempts, claimed.claims, claimed.started_s) == (0, 1, None)
    assert store.get(job.id).attempts == 0
    assert store.start([job.id], "w2") == []            # not its owner: nothing counted
    clock.advance(1)
    assert store.start([job.id], "w1") == [job.id]
    assert store.start([job.id], "w1") == []            # once per claim
    got = store.get(job.id)
    assert (got.attempts, got.started_s) == (1, T0 + 1)
    assert store.complete(job.id, "w1", ["out"])
    done = store.get(job.id)
    assert (done.attempts, done.completions, done.inputs) == (1, 1, [])


def test_an_expired_lease_without_a_start_goes_back_to_the_queue_uncharged(
        store: JobStore, clock: ManualClock):
    job, _ = store.submit("embed", ["x"])
    for i in range(10):                                 # claimed, then its router dies
        [j] = store.claim(f"router-{i}", lease_s=10)
        assert j.id == job.id and j.attempts == 0
        clock.advance(11)
        assert store.claim("nobody", lease_s=10, endpoints=[]) == []   # sweeps the lease
        back = store.get(job.id)
        assert (back.state, back.attempts, back.error) == (JobState.QUEUED, 0, None)
        assert back.claims == i + 1
    [j] = store.claim("survivor", lease_s=10)
    assert store.start([j.id], "survivor") and store.complete(j.id, "survivor", [1])
    done = store.get(job.id)
    assert (done.state, done.attempts, done.claims) == (JobState.SUCCEEDED, 1, 11)


def test_an_expired_lease_after_a_start_is_charged_once_not_twice(store: JobStore,
                                                                   clock: ManualClock):
    job, _ = store.submit("embed", ["x"])
    store.claim("a", lease_s=10)
    store.start([job.id], "a")
    clock.advance(11)
    [again] = store.claim("b", lease_s=10)
    assert (again.attempts, again.error) == (1, "lease of a expired after its work started")
    assert store.complete(again.id, "b", ["ok"])        # without a start of its own
    assert store.get(job.id).attempts == 2              # the result counts b's attempt
    assert not store.complete(job.id, "a", ["late"])    # a's work finished too, later:
    assert store.get(job.id).completions == 2           # the double run is visible
    assert store.get(job.id).outputs == ["ok"]


def test_attempts_lost_with_their_router_have_a_bound_of_their_own(tmp_path: Path,
                                                                    clock: ManualClock):
    store = JobStore(tmp_path / "lost.db", max_attempts=3, max_lost_attempts=4,
                     clock=clock.wall)
    job, _ = store.submit("embed", ["x"])
    for i in range(3):      # three routers die while its batch runs: charged, not failed
        store.claim(f"r{i}", lease_s=10)
        store.start([job.id], f"r{i}")
        clock.advance(11)
    [again] = store.claim("r3", lease_s=10)
    assert (again.attempts, again.lost) == (3, 3)
    store.start([job.id], "r3")
    assert store.fail(job.id, "r3", "transient", retry=True)   # its own failure: still 1 < 3
    assert store.get(job.id).state == JobState.QUEUED
    store.claim("r4", lease_s=10)
    store.start([job.id], "r4")
    clock.advance(11)                                    # a fourth router lost: the bound
    assert store.claim("r5", lease_s=10) == []
    failed = store.get(job.id)
    assert (failed.state, failed.attempts, failed.lost) == (JobState.FAILED, 5, 4)
    assert failed.error == "gave up after 5 attempts: lease of r4 expired after its work started"
    store.close()


def test_failures_count_their_attempt_started_or_not(store: JobStore):
    job, _ = store.submit("embed", ["x"])
    store.claim("w", lease_s=10)
    assert store.fail(job.id, "w", "boom", retry=True)  # failed before any start
    assert store.get(job.id).attempts == 1
    store.claim("w", lease_s=10)
    store.start([job.id], "w")
    assert store.fail(job.id, "w", "boom", retry=True)  # started: counted once, not twice
    assert store.get(job.id).attempts == 2
    store.claim("w", lease_s=10)
    store.start([job.id], "w")
    assert store.fail(job.id, "w", "boom", retry=True)
    failed = store.get(job.id)
    assert (failed.state, failed.attempts) == (JobState.FAILED, 3)
    assert failed.error == "gave up after 3 attempts: boom" and failed.inputs == []


def test_a_job_whose_containers_die_under_it_still_uses_its_attempts_up(store: JobStore):
    # Its work starts, the container dies with it (twice: Unavailable), it goes back: a job
    # that crashes what runs it must not be retried forever.
    job, _ = store.submit("embed", ["poison"])
    for _ in range(3):
        [j] = store.claim("w", lease_s=10)
        store.start([j.id], "w")
        store.release(j.id, "w", error="its container died twice")
    assert store.claim("w", lease_s=10) == []
    failed = store.get(job.id)
    assert failed.state == JobState.FAILED
    assert failed.error == "gave up after 3 attempts: its container died twice"


def test_claims_take_whole_jobs_up_to_a_row_budget(store: JobStore, clock: ManualClock):
    big, _ = store.submit("embed", ["a"] * 10)
    clock.advance(1)
    small = [store.submit("embed", [i, i])[0].id for i in range(4)]
    # The first job is taken whatever its rows (it would starve otherwise).
    assert [j.id for j in store.claim("w", lease_s=10, limit=5, max_rows=4)] == [big.id]
    # Whole jobs while fewer than 3 rows are taken: 2, then 4 (one job past the budget).
    got = store.claim("w", lease_s=10, limit=5, max_rows=3)
    assert [j.id for j in got] == small[:2]
    assert store.claim("w", lease_s=10, limit=5, max_rows=0) == []
    assert [j.id for j in store.claim("w", lease_s=10, limit=5)] == small[2:]


def test_a_crash_looping_router_never_fails_an_accepted_job(tmp_path: Path,
                                                            clock: ManualClock):
    store = JobStore(tmp_path / "loop.db", max_attempts=3, clock=clock.wall)
    # Twenty kills: each router claims what its pool can start soon (a row budget), starts
    # some of it (a batch or two went to containers), finishes some, and is killed. Before,
    # every claim cost an attempt and a third of the jobs failed "gave up after 3 attempts".
    rng = random.Random(7)
    accepted: list[str] = []
    for cycle in range(20):
        accepted += [store.submit("embed", [f"{cycle}-{i}"], tenant="t")[0].id
                     for i in range(20)]
        owner = f"router-{cycle}"
        claimed = store.claim(owner, lease_s=10, limit=64, max_rows=8)
        started = claimed[:rng.randint(0, 4)]
        store.start([j.id for j in started], owner)
        for j in started[:rng.randint(0, len(started))]:
            store.complete(j.id, owner, [j.inputs[0]])
        clock.advance(rng.uniform(0.0, 0.3) + (11 if cycle % 4 == 3 else 0))
    while store.counts()["queued"] + store.counts()["running"]:   # then it runs in peace
        clock.advance(11)
        for j in store.claim("last", lease_s=10, limit=64):
            store.start([j.id], "last")
            store.complete(j.id, "last", [j.inputs[0]])
    jobs = [store.get(i) for i in accepted]
    assert all(j.state == JobState.SUCCEEDED for j in jobs), \
        [(j.attempts, j.error) for j in jobs if j.state != JobState.SUCCEEDED]
    assert all(j.completions == 1 and j.attempts <= 3 for j in jobs)
    assert sorted(j.outputs[0] for j in jobs) == sorted(
        f"{c}-{i}" for c in range(20) for i in range(20))
    store.close()


# ---------------------------------------------------------------------- migration
V1_TABLE = """
CREATE TABLE jobs (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, tenant TEXT,
    priority TEXT NOT NULL, rank INTEGER NOT NULL, state TEXT NOT NULL, inputs TEXT NOT NULL,
    outputs TEXT, error TEXT, attempts INTEGER NOT NULL DEFAULT 0, owner TEXT,
    lease_until_s REAL, not_before_s REAL NOT NULL, created_s REAL NOT NULL,
    updated_s REAL NOT NULL, finished_s REAL, expires_s REAL, idem_scope TEXT UNIQUE,
    body_sha256 TEXT NOT NULL);
CREATE INDEX jobs_claim ON jobs (state, rank, created_s);
PRAGMA user_version = 1;
"""


def _v1_file(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(V1_TABLE)
        rows = [("a" * 32, "queued", '["wait"]', None, 0, None),
                ("b" * 32, "running", '["run"]', None, 2, T0 + 5),
                ("c" * 32, "succeeded", '["in"]', '[[1.5]]', 1, None)]
        for jid, state, inputs, outputs, attempts, lease in rows:
            db.execute("INSERT INTO jobs (id, endpoint, tenant, priority, rank, state, inputs, "
                       "outputs, attempts, owner, lease_until_s, not_before_s, created_s, "
                       "updated_s, finished_s, expires_s, body_sha256) VALUES (?, 'embed', "
                       "'t', 'normal', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'sha')",
                       (jid, state, inputs, outputs, attempts, "old" if lease else None,
                        lease, T0, T0, T0, T0 if outputs else None,
                        T0 + 100 if outputs else None))


def test_a_version_1_file_opens_and_is_brought_up_to_date(tmp_path: Path, clock: ManualClock):
    path = tmp_path / "jobs.db"
    _v1_file(path)
    with JobStore(path, clock=clock.wall, max_attempts=3) as store:
        queued, running, done = (store.get(c * 32) for c in "abc")
        assert (queued.state, queued.inputs, queued.claims) == (JobState.QUEUED, ["wait"], 0)
        assert (running.attempts, running.claims) == (2, 2)   # its claims were its attempts
        assert done.outputs == [[1.5]] and done.inputs == []  # a finished job's inputs go
        total, per = store.stored_bytes()
        assert per == {"t": len('["wait"]') + len('["run"]') + len("[]") + len("[[1.5]]")}
        assert total == per["t"]
        clock.advance(10)                                      # the old router's lease ends
        assert {j.id for j in store.claim("new", lease_s=10, limit=5)} == {"a" * 32, "b" * 32}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    JobStore(path, clock=clock.wall).close()                  # reopening changes nothing


def test_a_file_of_a_newer_schema_is_refused(tmp_path: Path):
    path = tmp_path / "jobs.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(FloodwayError, match="schema version 99"):
        JobStore(path)
