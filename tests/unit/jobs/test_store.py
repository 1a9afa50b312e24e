"""The durable job store: real SQLite files and an injected clock."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from floodway.core.clock import ManualClock
from floodway.errors import RequestError
from floodway.jobs.job import JobState
from floodway.jobs.store import JobStore

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------- durability
def test_submit_get_roundtrip_and_wire(store: JobStore, clock: ManualClock):
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


def test_reopen_same_file_and_wal(tmp_path: Path, clock: ManualClock):
    path = tmp_path / "jobs.db"
    s1 = JobStore(path, clock=clock.wall)
    job, _ = s1.submit("embed", [1, 2, 3], priority="high")
    s1.close()
    s2 = JobStore(path, clock=clock.wall)
    assert s2.get(job.id) == job
    s2.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_submitted_job_survives_kill_9(tmp_path: Path):
    path = tmp_path / "jobs.db"
    child = textwrap.dedent(f"""
        import signal
        from floodway.jobs.store import JobStore
        store = JobStore({str(path)!r})
        job, _ = store.submit("embed", ["survive me"])
        print(job.id, flush=True)   # the moment a 202 would be sent
        signal.pause()   # until killed
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
                                                                   clock: ManualClock):
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
def test_claim_order_priority_then_age(store: JobStore, clock: ManualClock):
    ids = {}
    for name, prio in [("n1", "normal"), ("l1", "low"), ("h1", "high"), ("n2", "normal"),
                       ("h2", "high")]:
        ids[store.submit("embed", [name], priority=prio)[0].id] = name
        clock.advance(1)
    first = store.claim("w", lease_s=10, limit=2)
    rest = store.claim("w", lease_s=10, limit=10)
    assert [ids[j.id] for j in first + rest] == ["h1", "h2", "n1", "n2", "l1"]
    # A claim is no attempt (the work has not started): see tests/unit/jobs/test_attempts.py.
    assert all(j.state == JobState.RUNNING and j.attempts == 0 and j.claims == 1
               for j in first + rest)
    assert store.claim("w", lease_s=10) == []


def test_claim_filters_endpoints(store: JobStore):
    store.submit("embed", [1])
    b, _ = store.submit("rerank", [2])
    assert [j.id for j in store.claim("w", lease_s=5, endpoints=["rerank"], limit=5)] == [b.id]
    assert store.claim("w", lease_s=5, endpoints=[]) == []


def test_lease_expiry_reclaim_and_complete_once(store: JobStore, clock: ManualClock):
    job, _ = store.submit("embed", ["x"])
    [a] = store.claim("w1", lease_s=10)
    assert store.start([job.id], "w1") == [job.id]     # its work reached a container
    assert store.claim("w2", lease_s=10) == []          # leased
    clock.advance(5)
    assert store.renew(job.id, "w1", 10)                # lease now ends at +15
    clock.advance(9)
    assert store.claim("w2", lease_s=10) == []
    clock.advance(2)                                    # w1 went silent: lease expired
    [b] = store.claim("w2", lease_s=10)
    assert b.id == job.id and b.attempts == 1 and b.claims == 2
    assert b.error == "lease of w1 expired after its work started"
    assert not store.renew(job.id, "w1", 10)            # w1 no longer holds it
    assert not store.fail(job.id, "w1", "late", retry=True)
    assert store.complete(job.id, "w2", ["second"])
    assert not store.complete(job.id, "w1", ["stale"])  # late result changes nothing
    done = store.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.outputs == ["second"]
    assert done.error is None and done.finished_s == clock.wall()
    assert done.expires_s == clock.wall() + 100
    assert done.to_wire()["outputs"] == ["second"] and "error" not in done.to_wire()


def test_stale_owner_completing_first_wins(store: JobStore, clock: ManualClock):
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


def test_max_attempts_gives_up(store: JobStore, clock: ManualClock):
    # Each attempt's router dies mid-work: those count against their own, larger bound
    # (a crash-looping router is no sign against its jobs; see test_attempts.py).
    job, _ = store.submit("embed", ["x"])
    for _ in range(store.max_lost_attempts):
        [j] = store.claim("w", lease_s=10)
        store.start([j.id], "w")
        clock.advance(11)
    assert store.claim("w", lease_s=10) == []
    failed = store.get(job.id)
    assert failed.state == JobState.FAILED and failed.attempts == failed.lost == 10
    assert failed.error == "gave up after 10 attempts: lease of w expired after its work started"
    assert failed.to_wire()["error"] == failed.error and "outputs" not in failed.to_wire()


def test_fail_retry_and_fail_for_good(store: JobStore, clock: ManualClock):
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
    # Work that started and was lost with its container keeps its attempt; a graceful
    # stop (`uncharge`) hands it back uncharged.
    store.claim("w", lease_s=10)
    store.start([job.id], "w")
    assert store.release(job.id, "w", error="its container died twice")
    back = store.get(job.id)
    assert (back.attempts, back.error, back.started_s) == (1, "its container died twice", None)
    store.claim("w", lease_s=10)
    store.start([job.id], "w")
    assert store.release(job.id, "w", uncharge=True)
    assert store.get(job.id).attempts == 1


# ---------------------------------------------------------------------- expiry
def test_ttl_expiry_and_purge(store: JobStore, clock: ManualClock):
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
    # A purged job is a tombstone: its payload is gone from disk, it still answers expired.
    with store._write() as db:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (done.id,)).fetchone()
    assert (row["inputs"], row["outputs"], row["error"]) == ("[]", None, None)
    assert store.get(done.id).state == JobState.EXPIRED
    assert store.get(failed.id).state == JobState.EXPIRED
    assert store.purge() == 0
    clock.advance(store.tombstone_s)
    assert store.purge() == 0 and store.get(queued.id).state == JobState.QUEUED
    assert store.get(done.id) is None and store.get(failed.id) is None


def test_lazy_purge_on_submit(store: JobStore, clock: ManualClock):
    job, _ = store.submit("embed", ["x"])
    store.claim("w", lease_s=10)
    store.complete(job.id, "w", [1])
    clock.advance(200)
    store.submit("embed", ["y"])
    assert store.get(job.id).state == JobState.EXPIRED
    with store._write() as db:
        assert db.execute("SELECT outputs FROM jobs WHERE id = ?", (job.id,)).fetchone()[0] \
            is None
    clock.advance(store.tombstone_s)
    store.submit("embed", ["z"])
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


def test_a_job_submitted_with_an_owner_starts_running_under_its_lease(store: JobStore,
                                                                       clock: ManualClock):
    job, created = store.submit("embed", ["x"], tenant="t", owner="router-a", lease_s=10)
    assert created and job.state == JobState.RUNNING and job.attempts == 1
    assert job.started_s == clock.wall() and job.claims == 1   # adopted work: started
    assert store.claim("router-b", lease_s=10) == []        # leased: nobody else takes it
    clock.advance(11)                                            # the owner died: lease expired
    (again,) = store.claim("router-b", lease_s=10)
    assert again.id == job.id and again.attempts == 1 and again.started_s is None
    assert store.start([job.id], "router-b") == [job.id]
    assert store.get(job.id).attempts == 2
    assert store.complete(job.id, "router-a", ["late but first"])   # first result wins
    assert store.get(job.id).outputs == ["late but first"]


@pytest.mark.parametrize("inputs", [[{"\udc00": 1}], [["ok", "\ud800"]], ["\udfff"]])
def test_inputs_json_cannot_store_are_a_422_not_a_crash(store: JobStore, inputs):
    with pytest.raises(RequestError) as info:
        store.submit("anyin", inputs, tenant="t")
    assert info.value.status == 422 and info.value.field == "inputs"
    assert "\\u" in str(info.value)   # the bad character escaped, never quoted raw
    str(info.value).encode("utf-8")
    assert store.counts()["queued"] == 0
    job, created = store.submit("anyin", ["fine"], tenant="t")   # the store goes on
    assert created and store.get(job.id).inputs == ["fine"]
