"""Admission over HTTP (in process): auth, headers, tenant rate, async jobs and their expiry."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx

import floodway as fw
from floodway.routers.admission import ApiKeys
from floodway.runtime.http import make_asgi_app
from floodway.runtime.local_jobs import LocalJobs
from tests.app.test_http import ScriptedBackend

app = fw.App("adm")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.5, tenant_rate_per_s=1, tenant_burst=2))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def client(asgi) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")


@contextlib.asynccontextmanager
async def running(jobs: LocalJobs):
    """The job runner started for the block, stopped after it."""
    await jobs.start()
    try:
        yield jobs
    finally:
        await jobs.stop()


async def poll_job(c: httpx.AsyncClient, location: str, status: str) -> dict:
    """The job at `location` once it has `status` (or as last seen after about 3 s)."""
    for _ in range(300):
        job = (await c.get(location)).json()
        if job["status"] == status:
            break
        await asyncio.sleep(0.01)
    return job


def test_bearer_auth_when_keys_are_configured():
    backend = ScriptedBackend()
    asgi = make_asgi_app(app, backend, api_keys=ApiKeys(frozenset({"s3cret"})))

    async def go():
        async with client(asgi) as c:
            body = {"inputs": ["a"]}
            return (await c.post("/v1/upper", json=body),
                    await c.post("/v1/upper", json=body,
                                 headers={"Authorization": "Bearer wrong"}),
                    await c.post("/v1/upper", json=body,
                                 headers={"Authorization": "Bearer s3cret"}))

    missing, wrong, ok = asyncio.run(go())
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"]["field"] == "Authorization"
    assert wrong.status_code == 401 and "wrong" not in wrong.text
    assert ok.status_code == 200
    assert len(backend.calls) == 1   # refused requests did no work


def test_tenant_token_bucket_answers_429_with_retry_after_per_tenant():
    backend = ScriptedBackend()
    asgi = make_asgi_app(app, backend)

    async def go():
        async with client(asgi) as c:
            a = [await c.post("/v1/upper", json={"inputs": ["a"]},
                              headers={"Authorization": "Bearer tenant-a"}) for _ in range(3)]
            b = await c.post("/v1/upper", json={"inputs": ["b"]},
                             headers={"Authorization": "Bearer tenant-b"})
            return a, b, await c.get("/metrics")

    a, b, metrics = asyncio.run(go())
    assert [r.status_code for r in a] == [200, 200, 429]   # burst of 2, then 1/s
    assert a[2].json()["error"]["type"] == "rate_limited"
    assert int(a[2].headers["retry-after"]) >= 1
    assert b.status_code == 200   # another tenant has its own bucket
    assert 'floodway_sheds_total{endpoint="upper",status="429"} 1.0' in metrics.text


def test_priority_and_deadline_headers_are_validated_and_used():
    backend = ScriptedBackend()
    asgi = make_asgi_app(app, backend)

    async def go():
        async with client(asgi) as c:
            body = {"inputs": ["a"]}
            return (await c.post("/v1/upper", json=body, headers={"X-Priority": "urgent"}),
                    await c.post("/v1/upper", json=body, headers={"X-Deadline-Ms": "-5"}),
                    await c.post("/v1/upper", json=body, headers={"X-Deadline-Ms": "1500",
                                                                 "X-Priority": "high"}))

    prio, deadline, ok = asyncio.run(go())
    assert prio.status_code == 400 and prio.json()["error"]["field"] == "X-Priority"
    assert "urgent" in prio.json()["error"]["message"]
    assert deadline.status_code == 400 and deadline.json()["error"]["field"] == "X-Deadline-Ms"
    assert ok.status_code == 200 and backend.calls == [("upper", ["a"], 1.5)]


def test_async_job_lifecycle_and_expiry_is_410(tmp_path):
    backend = ScriptedBackend()
    now = [1_700_000_000.0]
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", ttl_s=60)
    jobs.store.clock = lambda: now[0]
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with running(jobs), client(asgi) as c:
            r = await c.post("/v1/upper/jobs", json={"inputs": ["a", "b"]})
            loc = r.headers["location"]
            done = await poll_job(c, loc, "succeeded")
            other = await c.get(loc, headers={"Authorization": "Bearer someone-else"})
            now[0] += 61   # past the TTL
            expired = await c.get(loc)
            bad = await c.post("/v1/upper/jobs", json={"inputs": []})
            return r, done, other, expired, bad

    r, done, other, expired, bad = asyncio.run(go())
    assert r.status_code == 202 and r.json()["status"] == "queued"
    assert done["outputs"] == ["A", "B"]
    assert other.status_code == 404           # another tenant's job is not visible
    assert expired.status_code == 410 and expired.json()["error"]["type"] == "expired"
    assert bad.status_code == 422              # validated before it is stored


def test_overload_spills_to_async_when_the_router_has_a_job_queue(tmp_path):
    backend = ScriptedBackend()
    backend.free = 0   # 10 s of backlog, deadline 0.5 s, cold start too slow below
    backend.snapshot = lambda ep: ScriptedBackend.snapshot(backend, ep).__class__(
        **{**ScriptedBackend.snapshot(backend, ep).__dict__, "cold_start_s": 5.0})
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3")
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with client(asgi) as c:
            t = time.perf_counter()
            r = await c.post("/v1/upper", json={"inputs": ["a"]})
            return r, time.perf_counter() - t

    r, took_s = asyncio.run(go())
    jobs.store.close()
    assert r.status_code == 202 and r.headers["x-floodway-decision"] == "spill_async"
    assert r.headers["location"].startswith("/v1/jobs/")
    assert "preference-applied" not in r.headers   # the client did not ask for async
    assert took_s < 1.0 and backend.calls == []


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.5, spill=("cold",)))
def no_async(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def test_a_request_about_to_miss_its_deadline_is_handed_to_the_async_queue(tmp_path):
    backend = ScriptedBackend()
    backend.mode = "slow"   # the sync attempt never finishes in time
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3")
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with client(asgi) as c:
            t = time.perf_counter()
            handed = await c.post("/v1/upper", json={"inputs": ["a"]},
                                  headers={"Idempotency-Key": "k1"})
            took_s = time.perf_counter() - t
            plain = await c.post("/v1/no_async", json={"inputs": ["a"]})
            backend.mode = "ok"   # capacity came back: the job runs
            async with running(jobs):
                done = await poll_job(c, handed.headers["location"], "succeeded")
                again = await c.post("/v1/upper/jobs", json={"inputs": ["a"]},
                                     headers={"Idempotency-Key": "k1"})
                calls = len(backend.calls)
                await asyncio.sleep(2.0)   # the tenant's bucket (1/s, burst 2) refills
                retry = await c.post("/v1/upper", json={"inputs": ["a"]},
                                     headers={"Idempotency-Key": "k1"})
                other = await c.post("/v1/upper", json={"inputs": ["b"]},
                                     headers={"Idempotency-Key": "k1"})
                ran = len(backend.calls) - calls
            return handed, took_s, plain, done, again, retry, other, ran

    handed, took_s, plain, done, again, retry, other, ran = asyncio.run(go())
    jobs.store.close()
    assert handed.status_code == 202 and handed.headers["x-floodway-handoff"] == "deadline"
    assert handed.headers["x-floodway-decision"] in ("dispatch", "queue")
    assert took_s < 0.5                        # before the 0.5 s deadline, not after it
    assert plain.status_code == 504            # no async spill on this route: a 504
    assert done["outputs"] == ["A"]            # the job ran the request to completion
    assert again.json()["id"] == handed.json()["id"]   # the client's key names the job
    # A sync retry under the key gets that job at once; other inputs under it, a 409; and
    # neither runs anything.
    assert retry.status_code == 200 and retry.json()["id"] == handed.json()["id"]
    assert other.status_code == 409 and ran == 0


def test_work_already_on_a_container_is_adopted_by_its_job_not_run_twice(tmp_path):
    from floodway.runtime.pool import Pending, Pool

    class OnContainer(ScriptedBackend):
        """Each request's inputs are 'on a container' at once and answered after 0.8 s,
        past the route's 0.5 s deadline."""

        def enqueue(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
            self.calls.append((endpoint, inputs, timeout_s))
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in inputs]
            for f, x in zip(futures, inputs, strict=True):
                loop.call_later(0.8, lambda f=f, x=x: f.done() or f.set_result(x.upper()))
            return Pending(futures, lambda: True,
                           lambda p: Pool._results(endpoint, futures, timeout_s, p))

    backend = OnContainer()
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3")
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with running(jobs), client(asgi) as c:
            t = time.perf_counter()
            r = await c.post("/v1/upper", json={"inputs": ["a", "b"]})
            took_s = time.perf_counter() - t
            first = (await c.get(r.headers["location"])).json()
            return r, took_s, first, await poll_job(c, r.headers["location"], "succeeded")

    r, took_s, first, done = asyncio.run(go())
    assert r.status_code == 202 and r.headers["x-floodway-handoff"] == "deadline"
    assert took_s < 0.5                              # answered before the deadline
    assert first["status"] == "running" and first["attempts"] == 1   # adopted, not queued
    assert done["outputs"] == ["A", "B"] and done["attempts"] == 1
    assert len(backend.calls) == 1                   # the work ran once, for both answers


def test_each_app_has_its_own_default_job_queue(tmp_path, monkeypatch):
    from floodway.runtime.local_jobs import JOBS_DB_ENV, default_jobs_path

    monkeypatch.delenv(JOBS_DB_ENV, raising=False)
    a, b = default_jobs_path(tmp_path, "app-a"), default_jobs_path(tmp_path, "app b/../x")
    assert a != b and a.parent.parent == b.parent.parent == tmp_path / ".jobs"
    assert b.parent.name == "app_b_.._x"            # no path separators from a name
    monkeypatch.setenv(JOBS_DB_ENV, str(tmp_path / "mine.sqlite3"))
    assert default_jobs_path(tmp_path, "app-a") == tmp_path / "mine.sqlite3"


def test_a_queue_deadline_that_fires_before_the_hand_off_still_hands_off(tmp_path):
    class Expires(ScriptedBackend):
        """The queue's deadline fires first (as on a busy event loop): TimeoutError."""

        async def run(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
            self.calls.append((endpoint, inputs, timeout_s))
            raise TimeoutError("deadline passed while queued")

    backend = Expires()
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3")
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with client(asgi) as c:
            return (await c.post("/v1/upper", json={"inputs": ["a"]}),
                    await c.post("/v1/no_async", json={"inputs": ["a"]}))

    handed, plain = asyncio.run(go())
    jobs.store.close()
    assert handed.status_code == 202 and handed.headers["x-floodway-handoff"] == "deadline"
    assert plain.status_code == 504


def test_a_job_with_a_bad_item_keeps_the_good_outputs(tmp_path):
    backend = ScriptedBackend()
    backend.mode = "one_bad"
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3")
    asgi = make_asgi_app(app, backend, jobs=jobs)

    async def go():
        async with running(jobs), client(asgi) as c:
            r = await c.post("/v1/upper/jobs", json={"inputs": ["a", "bad", "c"]})
            return await poll_job(c, r.headers["location"], "failed")

    done = asyncio.run(go())
    assert done["status"] == "failed" and "1 of 3 inputs failed" in done["error"]
    assert done["outputs"] == ["A", None, "C"]          # as a sync 500 answers them
    assert [e["index"] for e in done["item_errors"]] == [1]
