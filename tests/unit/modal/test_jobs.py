"""Async jobs on Modal, offline: `ModalJobs` through the router's ASGI app over a recording
stand-in for the ``run_job`` function and its FunctionCalls, and `run_job_rows`."""

from __future__ import annotations

import asyncio

import pytest

from floodway.errors import EndpointError
from floodway.modal.jobs import run_job_rows
from floodway.modal.kv import MemoryKV
from floodway.routers.admission import key_id
from tests.unit.modal.router.test_backend import (
    AUTH_A,
    AUTH_B,
    KEY_A,
    FakeCall,
    FakeJobFunction,
    FakeModal,
    _backend,
    _client,
    _jobs,
    _post,
)


@pytest.fixture
def fake():
    return FakeModal()


@pytest.fixture
def job_fn():
    return FakeJobFunction()


def test_jobs_lifecycle(fake, job_fn):
    async def go():
        async with _client(_backend(fake), _jobs(job_fn)) as c:
            created = await _post(c, ["a", "b"], "/v1/upper/jobs")
            job_id = created.json()["id"]
            call = job_fn.registry[job_id]
            pending = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_A)
            other = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_B)
            call.state, call.value = "done", ["A", "B"]
            done = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_A)
            call.state, call.error = "failed", EndpointError("1 of 2 inputs failed; first: x")
            failed = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_A)
            call.state = "unreachable"
            unreachable = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_A)
            call.state = "expired"
            expired = await c.get(f"/v1/jobs/{job_id}", headers=AUTH_A)
            unknown = await c.get("/v1/jobs/fc-00000000000000000000000999", headers=AUTH_A)
            malformed = await c.get("/v1/jobs/not-an-id", headers=AUTH_A)
            return (created, job_id, call, pending, other, done, failed, unreachable,
                    expired, unknown, malformed)

    (created, job_id, call, pending, other, done, failed, unreachable, expired, unknown,
     malformed) = asyncio.run(go())
    assert created.status_code == 202
    assert created.headers["location"] == f"/v1/jobs/{job_id}"
    assert created.json()["status"] == "queued" and created.json()["endpoint"] == "upper"
    assert job_fn.spawns == [("upper", ["a", "b"])]
    assert fake.count("predict.remote.aio") == 0        # the job function runs the rows
    assert pending.status_code == 200 and pending.json()["status"] == "running"
    assert call.gets[0] == 0                            # a poll, never a wait
    assert other.status_code == 404
    assert done.json()["status"] == "succeeded" and done.json()["outputs"] == ["A", "B"]
    assert failed.json()["status"] == "failed" and "1 of 2 inputs" in failed.json()["error"]
    assert unreachable.status_code == 503 and unreachable.headers["retry-after"] == "1"
    assert expired.status_code == 410 and expired.json()["error"]["type"] == "expired"
    assert unknown.status_code == 404 and malformed.status_code == 404


def test_idempotency_key(fake, job_fn):
    data: dict = {}

    async def go():
        async with _client(_backend(fake), _jobs(job_fn, data)) as c:
            key = {"Idempotency-Key": "order-1"}
            first = await _post(c, ["a"], "/v1/upper/jobs", key)
            again = await _post(c, ["a"], "/v1/upper/jobs", key)
            other_body = await _post(c, ["b"], "/v1/upper/jobs", key)
            other_tenant = await c.post("/v1/upper/jobs", json={"inputs": ["a"]},
                                        headers={**AUTH_B, **key})
            bad_key = await _post(c, ["a"], "/v1/upper/jobs", {"Idempotency-Key": "a b"})
            return first, again, other_body, other_tenant, bad_key

    first, again, other_body, other_tenant, bad_key = asyncio.run(go())
    assert first.status_code == 202
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert other_body.status_code == 409
    assert other_body.json()["error"]["field"] == "Idempotency-Key"
    assert other_tenant.status_code == 202 and other_tenant.json()["id"] != first.json()["id"]
    assert bad_key.status_code == 400
    assert len(job_fn.spawns) == 2                      # the resubmit spawned nothing
    assert data[("job", first.json()["id"])]["tenant"] == key_id(KEY_A)


def test_idempotency_race_keeps_the_first_job(job_fn):
    data: dict = {}
    jobs = _jobs(job_fn, data)

    class Racing(MemoryKV):
        """Another router stores the same key between our check and our put."""

        async def put(self, key, value, *, skip_if_exists=False):
            if skip_if_exists and key[0] == "idem" and key not in self.data:
                self.data[key] = {"id": winner.object_id, "body": value["body"]}
                self.data[("job", winner.object_id)] = {"tenant": "t", "endpoint": "upper",
                                                        "created_s": 0.0}
            return await super().put(key, value, skip_if_exists=skip_if_exists)

    winner = FakeCall("fc-" + "w" * 26)
    job_fn.registry[winner.object_id] = winner
    jobs._kv = Racing(data)
    wire, created = asyncio.run(jobs.submit("upper", ["a"], tenant="t", priority=None,
                                            idempotency_key="k"))
    assert (wire["id"], created) == (winner.object_id, False)
    ours = [c for i, c in job_fn.registry.items() if i != winner.object_id]
    assert [c.state for c in ours] == ["cancelled"]


def test_run_job_rows_fails_the_job_on_a_bad_row(fake):
    backend = _backend(fake)
    assert asyncio.run(run_job_rows(backend, "upper", ["a", "b"])) == ["A", "B"]
    with pytest.raises(EndpointError, match=r"1 of 2 inputs failed; first: inputs\[1\]"):
        asyncio.run(run_job_rows(backend, "upper", ["a", "bad"]))
