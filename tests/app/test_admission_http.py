"""Admission over HTTP (in process): auth, headers, tenant rate, async jobs, the deadline
hand-off and job expiry. One manual clock drives the router, the job store and its runner:
a test moves time by advancing it, never by sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend, advance_when, client, until

app = fw.App("adm")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.5, tenant_rate_per_s=1, tenant_burst=2))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.5, spill=("cold",)))
def no_async(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def setup(tmp_path=None, **kw):
    """A clock, a scripted backend, the job queue (with `tmp_path`) and the router app."""
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    jobs = None if tmp_path is None else LocalJobs(app, backend, tmp_path / "jobs.sqlite3",
                                                   clock=clock, **kw)
    return clock, backend, jobs, make_asgi_app(app, backend, jobs=jobs, clock=clock)


@contextlib.asynccontextmanager
async def running(jobs: LocalJobs):
    """The job runner started for the block, stopped after it."""
    await jobs.start()
    try:
        yield jobs
    finally:
        await jobs.stop()


async def poll_job(c: httpx.AsyncClient, location: str, status: str) -> dict:
    """The job at `location` once it has `status`."""
    job: dict = {}

    async def seen() -> bool:
        nonlocal job
        job = (await c.get(location)).json()
        return job["status"] == status

    async with asyncio.timeout(20):   # a guard against a hang, not a wait
        while not await seen():
            await asyncio.sleep(0)
    return job


def server_ms(r: httpx.Response) -> float:
    return float(r.headers["server-timing"].removeprefix("router;dur="))


def test_bearer_auth_when_keys_are_configured():
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    asgi = make_asgi_app(app, backend, api_keys=ApiKeys(frozenset({"s3cret"})), clock=clock)

    async def go():
        async with client(asgi) as c:
            body = {"inputs": ["a"]}
            return (await c.post("/v1/upper", json=body),
                    await c.post("/v1/upper", json=body,
                                 headers={"Authorization": "Bearer wrong"}),
                    await c.post("/v1/upper", json=body,
                                 headers={"Authorization": "Bearer s3cret"}),
                    await c.get("/v1/jobs/" + "0" * 32))

    missing, wrong, ok, job = asyncio.run(go())
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"]["field"] == "Authorization"
    assert missing.json()["error"]["type"] == "unauthorized"
    assert wrong.status_code == 401 and "wrong" not in wrong.text
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert ok.status_code == 200
    assert job.status_code == 501    # no job queue: answered before auth, as before
    assert len(backend.calls) == 1   # refused requests did no work


def test_tenant_token_bucket_answers_429_with_retry_after_per_tenant():
    clock, backend, _, asgi = setup()
    arrivals: list[tuple[str, float]] = []

    async def go():
        async with client(make_asgi_app(app, backend, clock=clock, on_arrival=lambda e, t:
                                        arrivals.append((e, t)))) as c:
            a = [await c.post("/v1/upper", json={"inputs": ["a"]},
                              headers={"Authorization": "Bearer tenant-a"}) for _ in range(3)]
            b = await c.post("/v1/upper", json={"inputs": ["b"]},
                             headers={"Authorization": "Bearer tenant-b"})
            clock.advance(1.0)   # one token back for tenant-a
            again = await c.post("/v1/upper", json={"inputs": ["a"]},
                                 headers={"Authorization": "Bearer tenant-a"})
            return a, b, again, await c.get("/metrics")

    a, b, again, metrics = asyncio.run(go())
    assert [r.status_code for r in a] == [200, 200, 429]   # burst of 2, then 1/s
    assert a[2].json()["error"]["type"] == "rate_limited"
    assert a[2].headers["retry-after"] == "1"
    assert b.status_code == 200   # another tenant has its own bucket
    assert again.status_code == 200
    assert 'floodway_sheds_total{endpoint="upper",status="429"} 1.0' in metrics.text
    # Admitted requests only, at the clock's wall time.
    assert [t for _, t in arrivals] == [clock.wall() - 1] * 3 + [clock.wall()]


def test_priority_and_deadline_headers_are_validated_and_used():
    _, backend, _, asgi = setup()

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
    clock, backend, jobs, asgi = setup(tmp_path, ttl_s=60)

    async def go():
        async with running(jobs), client(asgi) as c:
            r = await c.post("/v1/upper/jobs", json={"inputs": ["a", "b"]})
            loc = r.headers["location"]
            done = await poll_job(c, loc, "succeeded")
            other = await c.get(loc, headers={"Authorization": "Bearer someone-else"})
            clock.advance(61)   # past the TTL
            expired = await c.get(loc)
            bad = await c.post("/v1/upper/jobs", json={"inputs": []})
            return r, done, other, expired, bad

    r, done, other, expired, bad = asyncio.run(go())
    assert r.status_code == 202 and r.json()["status"] == "queued"
    assert r.json()["location"] == r.headers["location"]
    assert "preference-applied" not in r.headers
    assert done["outputs"] == ["A", "B"]
    assert other.status_code == 404           # another tenant's job is not visible
    assert expired.status_code == 410 and expired.json()["error"]["type"] == "expired"
    assert bad.status_code == 422              # validated before it is stored


def test_prefer_respond_async_is_a_job_with_preference_applied(tmp_path):
    _, backend, jobs, asgi = setup(tmp_path)

    async def go():
        async with client(asgi) as c:
            return await c.post("/v1/upper", json={"inputs": ["a"]},
                                headers={"Prefer": "respond-async, wait=5"})

    r = asyncio.run(go())
    jobs.store.close()
    assert r.status_code == 202 and r.headers["preference-applied"] == "respond-async"
    assert "x-floodway-decision" not in r.headers   # the client chose: nothing decided
    assert backend.calls == []


def test_overload_spills_to_async_when_the_router_has_a_job_queue(tmp_path):
    """The clock never moves: the 202 comes without waiting on any timer."""
    _, backend, jobs, asgi = setup(tmp_path)
    backend.free = 0   # 10 s of backlog, deadline 0.5 s, cold start too slow below
    plain = backend.snapshot
    backend.snapshot = lambda ep: plain(ep).__class__(**{**plain(ep).__dict__,
                                                         "cold_start_s": 5.0})

    async def go():
        async with client(asgi) as c:
            return await c.post("/v1/upper", json={"inputs": ["a"]})

    r = asyncio.run(go())
    jobs.store.close()
    assert r.status_code == 202 and r.headers["x-floodway-decision"] == "spill_async"
    assert r.headers["location"].startswith("/v1/jobs/")
    assert "preference-applied" not in r.headers   # the client did not ask for async
    assert backend.calls == []


def test_a_request_about_to_miss_its_deadline_is_handed_to_the_async_queue(tmp_path):
    clock, backend, jobs, asgi = setup(tmp_path)
    backend.mode = "slow"   # the sync attempt never finishes in time

    async def go():
        async with client(asgi) as c:
            handed = asyncio.ensure_future(c.post("/v1/upper", json={"inputs": ["a"]},
                                                  headers={"Idempotency-Key": "k1"}))
            # 0.47 s on: past the hand-off (0.45 s), before the 0.5 s deadline.
            await advance_when(clock, lambda: backend.calls, 0.47)
            handed = await handed
            plain = asyncio.ensure_future(c.post("/v1/no_async", json={"inputs": ["a"]}))
            await advance_when(clock, lambda: len(backend.calls) == 2, 0.5)
            plain = await plain
            backend.mode = "ok"   # capacity came back: the job runs
            async with running(jobs):
                done = await poll_job(c, handed.headers["location"], "succeeded")
                again = await c.post("/v1/upper/jobs", json={"inputs": ["a"]},
                                     headers={"Idempotency-Key": "k1"})
                calls = len(backend.calls)
                clock.advance(2.0)   # the tenant's bucket (1/s, burst 2) refills
                retry = await c.post("/v1/upper", json={"inputs": ["a"]},
                                     headers={"Idempotency-Key": "k1"})
                other = await c.post("/v1/upper", json={"inputs": ["b"]},
                                     headers={"Idempotency-Key": "k1"})
                ran = len(backend.calls) - calls
            return handed, plain, done, again, retry, other, ran

    handed, plain, done, again, retry, other, ran = asyncio.run(go())
    assert handed.status_code == 202 and handed.headers["x-floodway-handoff"] == "deadline"
    assert handed.headers["x-floodway-decision"] in ("dispatch", "queue")
    assert server_ms(handed) < 500             # before the 0.5 s deadline, not after it
    assert backend.pendings[0]._work.cancelled()   # the queued attempt was withdrawn
    assert plain.status_code == 504            # no async spill on this route: a 504
    assert done["outputs"] == ["A"]            # the job ran the request to completion
    assert again.json()["id"] == handed.json()["id"]   # the client's key names the job
    # A sync retry under the key gets that job at once; other inputs under it, a 409; and
    # neither runs anything.
    assert retry.status_code == 200 and retry.json()["id"] == handed.json()["id"]
    assert other.status_code == 409 and other.json()["error"]["type"] == "conflict"
    assert ran == 0


def test_work_already_on_a_container_is_adopted_by_its_job_not_run_twice(tmp_path):
    clock, backend, jobs, asgi = setup(tmp_path)
    backend.mode = "on_container"   # dispatched at once, answered 0.8 s on: past 0.5 s

    async def go():
        async with running(jobs), client(asgi) as c:
            r = asyncio.ensure_future(c.post("/v1/upper", json={"inputs": ["a", "b"]}))
            await advance_when(clock, lambda: backend.calls, 0.47)
            r = await r
            first = (await c.get(r.headers["location"])).json()
            clock.advance(0.4)   # 0.87 s: the work on the container finishes
            return r, first, await poll_job(c, r.headers["location"], "succeeded")

    r, first, done = asyncio.run(go())
    assert r.status_code == 202 and r.headers["x-floodway-handoff"] == "deadline"
    assert server_ms(r) < 500                        # answered before the deadline
    assert first["status"] == "running" and first["attempts"] == 1   # adopted, not queued
    assert done["outputs"] == ["A", "B"] and done["attempts"] == 1
    assert len(backend.calls) == 1                   # the work ran once, for both answers
    assert not backend.pendings[0]._work.cancelled()


def test_a_queue_deadline_that_fires_before_the_hand_off_still_hands_off(tmp_path):
    _, backend, jobs, asgi = setup(tmp_path)
    backend.mode = "timeout"   # the queue's deadline fires first (as on a busy event loop)

    async def go():
        async with client(asgi) as c:
            return (await c.post("/v1/upper", json={"inputs": ["a"]}),
                    await c.post("/v1/no_async", json={"inputs": ["a"]}))

    handed, plain = asyncio.run(go())
    jobs.store.close()
    assert handed.status_code == 202 and handed.headers["x-floodway-handoff"] == "deadline"
    assert plain.status_code == 504


def test_a_job_with_a_bad_item_keeps_the_good_outputs(tmp_path):
    _, backend, jobs, asgi = setup(tmp_path)
    backend.mode = "one_bad"

    async def go():
        async with running(jobs), client(asgi) as c:
            r = await c.post("/v1/upper/jobs", json={"inputs": ["a", "bad", "c"]})
            return await poll_job(c, r.headers["location"], "failed")

    done = asyncio.run(go())
    assert done["status"] == "failed" and "1 of 3 inputs failed" in done["error"]
    assert done["outputs"] == ["A", None, "C"]          # as a sync 500 answers them
    assert [e["index"] for e in done["item_errors"]] == [1]


def test_a_job_waits_for_capacity_without_spending_an_attempt(tmp_path):
    """No capacity is not a failed attempt: the job goes back to the queue for the retry
    delay (on the clock) and runs once capacity is back."""
    clock, backend, jobs, asgi = setup(tmp_path)
    backend.mode = "unavailable"

    async def go():
        async with running(jobs), client(asgi) as c:
            r = await c.post("/v1/upper/jobs", json={"inputs": ["a"]})
            await until(lambda: len(backend.calls) == 1)
            queued = await poll_job(c, r.headers["location"], "queued")
            backend.mode = "ok"
            clock.advance(3.0)   # past the 2.5 s Retry-After of the items
            return queued, await poll_job(c, r.headers["location"], "succeeded")

    queued, done = asyncio.run(go())
    assert queued["attempts"] == 0
    assert done["outputs"] == ["A"] and done["attempts"] == 1


def test_the_deadline_runs_from_arrival_so_a_slow_body_spends_it_too():
    """A body that takes 0.3 s to arrive leaves the queue 0.2 s of the 0.5 s deadline, and
    the decision plans with that much."""
    clock, backend, _, asgi = setup()
    body = json.dumps({"inputs": ["a"]}).encode()
    sent: list[dict] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/upper", "raw_path": b"/v1/upper",
             "query_string": b"", "root_path": "", "server": ("router", 80),
             "client": ("client", 1), "headers": [(b"content-type", b"application/json"),
                                                  (b"content-length", str(len(body)).encode())]}

    given = asyncio.Event()

    async def receive() -> dict:
        if given.is_set():               # then the client just waits for its answer
            await asyncio.Event().wait()
        given.set()
        clock.advance(0.3)               # the body trickles in
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async def go() -> None:
        async with asyncio.timeout(20):   # a guard against a hang, not a wait
            await asgi(scope, receive, send)

    asyncio.run(go())
    assert sent[0]["status"] == 200
    (_, _, timeout_s), = backend.calls
    assert timeout_s == pytest.approx(0.2)
