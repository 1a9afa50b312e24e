"""Bounded job storage: quotas on the bytes the job store holds (total and per tenant), a
job's inputs dropped when it finishes, a full disk answered as a 503 with the file intact.
Real SQLite files, a manual clock."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from floodway.core.clock import ManualClock
from floodway.errors import RequestError, Unavailable
from floodway.jobs.job import JobState
from floodway.jobs.quota import (
    DISK_FULL_RETRY_S,
    MAX_BYTES,
    MAX_TENANT_BYTES,
    UNFINISHED_RETRY_S,
)
from floodway.jobs.store import JobStore

ONE_KB = ["x" * 1000]          # '["xxx..."]': 1004 bytes as stored
SIZE = 1004


def _store(tmp_path: Path, clock: ManualClock, **kw) -> JobStore:
    return JobStore(tmp_path / "jobs.db", ttl_s=100.0, clock=clock.wall, **kw)


def test_a_tenant_over_its_quota_gets_a_503_and_others_go_on(tmp_path, clock):
    quota = 3 * SIZE + 8          # room for three jobs' inputs and a small result
    with _store(tmp_path, clock, max_bytes=10 * SIZE, max_tenant_bytes=quota) as store:
        ids = [store.submit("embed", ONE_KB, tenant="a")[0].id for _ in range(3)]
        with pytest.raises(Unavailable) as info:
            store.submit("embed", ONE_KB, tenant="a")
        assert "tenant 'a'" in str(info.value) and f"{quota} bytes" in str(info.value)
        # Its jobs are still queued: their inputs go when they finish, seconds from now.
        assert info.value.retry_after_s == UNFINISHED_RETRY_S
        assert store.counts()["queued"] == 3 and store.stored_bytes() == (3 * SIZE,
                                                                           {"a": 3 * SIZE})
        assert store.submit("embed", ONE_KB, tenant="b")[1]          # another tenant
        # One of a's jobs finishes: its inputs are dropped, its small result kept.
        [job] = store.claim("w", lease_s=10, endpoints=["embed"])
        assert job.id == ids[0] and store.complete(job.id, "w", [1])
        assert store.stored_bytes()[1]["a"] == 2 * SIZE + len("[]") + len("[1]")
        assert store.get(job.id).inputs == []
        assert store.submit("embed", ONE_KB, tenant="a")[1]          # room again
        assert dict(store.quota.rejections) == {"tenant": 1}


def test_the_total_quota_and_a_retry_after_from_the_first_expiry(tmp_path, clock):
    # Room for two jobs' results, and the few bytes a finished job's dropped inputs keep.
    with _store(tmp_path, clock, max_bytes=2 * SIZE + 8, max_tenant_bytes=2 * SIZE) as store:
        for tenant in ("a", "b"):
            job, _ = store.submit("embed", ONE_KB, tenant=tenant)
            store.claim("w", lease_s=10)
            store.complete(job.id, "w", ONE_KB)      # a result as large as its inputs
        clock.advance(30)
        with pytest.raises(Unavailable) as info:
            store.submit("embed", ONE_KB, tenant="c")
        assert "all jobs" in str(info.value)
        assert info.value.retry_after_s == 70          # the first result expires at +100
        clock.advance(71)                              # expired: purged to free its bytes
        assert store.submit("embed", ONE_KB, tenant="c")[1]
        assert store.get(job.id).state == JobState.EXPIRED
        assert dict(store.quota.rejections) == {"total": 1}


def test_results_count_and_a_result_past_the_quota_fails_its_job_unstored(tmp_path, clock):
    # Ten jobs of small inputs fit at once; their results, 5 KB each, would take 50 KB.
    result = ["r" * 5000]                 # 5004 bytes as stored
    with _store(tmp_path, clock, max_bytes=18_000, max_tenant_bytes=18_000) as store:
        ids = [store.submit("embed", ["x" * 400], tenant="a")[0].id for _ in range(10)]
        store.claim("w", lease_s=10, limit=10)
        assert all(store.complete(i, "w", result) for i in ids)
        states = [store.get(i).state for i in ids]
        total, _ = store.stored_bytes()
        failed = store.get(ids[-1])
    assert states == [JobState.SUCCEEDED] * 3 + [JobState.FAILED] * 7
    assert total <= 18_000                                      # never past the quota
    assert failed.outputs is None and "result of 5004 bytes exceeds the job store's quota" \
        in failed.error and "18000 bytes" in failed.error
    assert dict(store.quota.rejections) == {"result": 7}


def test_a_tenants_results_are_bounded_by_its_own_quota_and_others_go_on(tmp_path, clock):
    with _store(tmp_path, clock, max_bytes=100_000, max_tenant_bytes=2 * SIZE + 20) as store:
        a = [store.submit("embed", ["x"], tenant="a")[0].id for _ in range(3)]
        b, _ = store.submit("embed", ["x"], tenant="b")
        store.claim("w", lease_s=10, limit=4)
        for job_id in (*a, b.id):
            store.complete(job_id, "w", ONE_KB)
        states = [store.get(i).state for i in (*a, b.id)]
        per_tenant = store.stored_bytes()[1]
        # A failure's partial result past the quota is dropped too; its error says why.
        c, _ = store.submit("embed", ["x"], tenant="c")
        store.claim("w", lease_s=10)
        store.fail(c.id, "w", "one input failed", retry=False,
                   partial={"outputs": ["x" * 3000], "item_errors": []})
        partial, third = store.get(c.id), store.get(a[2])
    assert states == [JobState.SUCCEEDED] * 2 + [JobState.FAILED, JobState.SUCCEEDED]
    assert "tenant 'a'" in third.error and third.outputs is None
    # a's bytes: two results (inputs dropped), and the third's error, not its result.
    assert per_tenant["a"] == 2 * (2 + SIZE) + 2 + len(third.error.encode())
    assert partial.state == JobState.FAILED and partial.outputs is None
    assert partial.error.startswith("one input failed (its partial result: the job's result")


def test_a_job_larger_than_a_quota_is_a_413_and_a_repeat_key_is_no_new_bytes(tmp_path, clock):
    with _store(tmp_path, clock, max_bytes=10 * SIZE, max_tenant_bytes=SIZE) as store:
        with pytest.raises(RequestError) as info:
            store.submit("embed", ["x" * 2000], tenant="a")
        assert info.value.status == 413 and info.value.field == "inputs"
        first, _ = store.submit("embed", ONE_KB, tenant="a", idempotency_key="k")
        again, created = store.submit("embed", ONE_KB, tenant="a", idempotency_key="k")
        assert not created and again.id == first.id   # full, yet the same job comes back


def test_a_full_disk_is_a_503_and_the_store_is_intact(tmp_path, clock):
    with _store(tmp_path, clock) as store:
        kept, _ = store.submit("embed", ["kept"], tenant="a")
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages}")   # the file cannot grow
        with pytest.raises(Unavailable) as info:
            store.submit("embed", ["y" * 50_000], tenant="a")
        assert "disk is full" in str(info.value)
        assert info.value.retry_after_s == DISK_FULL_RETRY_S
        assert not store._db.in_transaction                     # rolled back, not left open
        assert store.counts()["queued"] == 1 and store.get(kept.id).inputs == ["kept"]
        assert store.stored_bytes() == (len('["kept"]'), {"a": len('["kept"]')})
        [job] = store.claim("w", lease_s=10)                    # the store goes on
        assert job.id == kept.id
        store._db.execute("PRAGMA max_page_count = 1000000")    # space again
        assert store.submit("embed", ["y" * 50_000], tenant="a")[1]
        assert dict(store.quota.rejections) == {"disk_full": 1}
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_bad_quotas_are_refused(tmp_path, clock):
    with pytest.raises(ValueError, match="max_tenant_bytes=0"):
        _store(tmp_path, clock, max_tenant_bytes=0)


def test_the_serve_command_defaults_are_the_stores():
    from floodway.cli import serve

    params = inspect.signature(serve).parameters
    assert params["job_max_mib"].default << 20 == MAX_BYTES == 1 << 30
    assert params["job_tenant_mib"].default << 20 == MAX_TENANT_BYTES == 256 << 20
