"""`floodway.AsyncClient` against the real router app in process (ASGI), its job queue and
a scripted backend: a lost answer never makes a second job, a 202 is followed to the job's
result, a refused request names its field, and a fleet of clients against a router that
sheds stays within its retry budget. The client's sleeps are fake; the router's clock is a
ManualClock: nothing waits on real time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random

import httpx
import pytest

import floodway as fw
from floodway.client import (
    Overloaded,
    RequestRefused,
    RetryBudgetExhausted,
    RetryPolicy,
)
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from tests.app.scripted import ScriptedBackend, settle
from tests.app.test_admission_http import running
from tests.unit.client.fakes import FakeTime

app = fw.App("cl")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.5))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


class Recorder(httpx.AsyncBaseTransport):
    """Forwards to the app; records each request; `drop` POSTs have their answer lost
    after the router made it (the connection drops before the client reads it)."""

    def __init__(self, asgi, drop: int = 0):
        self.inner = httpx.ASGITransport(app=asgi)
        self.drop = drop
        self.requests: list[httpx.Request] = []
        self.lost: list[httpx.Response] = []
        self.answered: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and self.drop:
            self.drop -= 1
            await response.aread()
            self.lost.append(response)
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.",
                                            request=request)
        self.answered.append(response)
        return response


def setup(tmp_path, **kw):
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock)
    return backend, jobs, make_asgi_app(app, backend, jobs=jobs, clock=clock, **kw)


def client_over(transport: httpx.AsyncBaseTransport, t: FakeTime, **kw) -> fw.AsyncClient:
    return fw.AsyncClient("http://router", http=httpx.AsyncClient(transport=transport),
                          clock=t.monotonic, sleep=t.asleep, rng=random.Random(5), **kw)


def test_a_submit_whose_answer_was_lost_makes_one_job_and_gets_its_result(tmp_path):
    backend, jobs, asgi = setup(tmp_path)
    wire = Recorder(asgi, drop=1)
    t = FakeTime()

    async def go():
        c = client_over(wire, t)
        job = await c.submit("upper", ["a", "b"])
        async with running(jobs):
            outputs = await c.result(job)
            await jobs.refresh()
            return job, outputs, jobs.counts()

    job, outputs, counts = asyncio.run(go())
    assert outputs == ["A", "B"]
    posts = [r for r in wire.requests if r.method == "POST"]
    assert len(posts) == 2 and len({r.headers["idempotency-key"] for r in posts}) == 1
    assert wire.lost[0].status_code == 202                      # the router made the job...
    assert json.loads(wire.lost[0].content)["id"] == job.id     # ...the retry got that one
    assert sum(counts.values()) == 1 and counts["succeeded"] == 1
    assert len(backend.calls) == 1                               # and it ran once


def test_a_call_spilled_to_a_job_whose_202_was_lost_finds_that_job_again(tmp_path):
    backend, jobs, asgi = setup(tmp_path)
    # Every container busy for 10 s and a cold start too slow for the 0.5 s deadline: the
    # request spills to the job queue.
    backend.free = 0
    plain = backend.snapshot
    backend.snapshot = lambda ep: dataclasses.replace(plain(ep), cold_start_s=5.0)
    wire = Recorder(asgi, drop=1)
    t = FakeTime()

    async def go():
        c = client_over(wire, t)
        call = asyncio.ensure_future(c.call("upper", ["x"], deadline_ms=500))
        while not wire.lost:
            await asyncio.sleep(0)
        backend.free, backend.snapshot = 4, plain   # capacity is back: the job can run
        async with running(jobs):
            outputs = await call
            await jobs.refresh()
            return outputs, jobs.counts()

    outputs, counts = asyncio.run(go())
    assert outputs == ["X"]
    assert wire.lost[0].status_code == 202
    assert wire.lost[0].headers["x-floodway-decision"] == "spill_async"
    posts = [r for r in wire.requests if r.method == "POST"]
    assert len(posts) == 2 and posts[0].headers["idempotency-key"] == \
        posts[1].headers["idempotency-key"]
    again = wire.answered[0]   # the retry: the job its key names, not a new run
    assert (again.request.method, again.status_code) == ("POST", 200)
    assert again.headers["location"] == wire.lost[0].headers["location"]
    assert counts["succeeded"] == 1 and sum(counts.values()) == 1 and len(backend.calls) == 1


@pytest.mark.parametrize("kw,inputs,status,field", [
    ({}, [1], 422, "inputs[0]"),
    ({"priority": "urgent"}, ["a"], 400, "X-Priority"),
    ({}, [], 422, "inputs"),
])
def test_a_refused_request_raises_request_refused_naming_the_field(tmp_path, kw, inputs,
                                                                   status, field):
    backend, _, asgi = setup(tmp_path)
    wire = Recorder(asgi)

    async def go():
        return await client_over(wire, FakeTime()).call("upper", inputs, **kw)

    with pytest.raises(RequestRefused) as e:
        asyncio.run(go())
    assert (e.value.status, e.value.field) == (status, field)
    assert len(wire.requests) == 1 and backend.calls == []   # not retried, no work done
    assert isinstance(e.value, fw.RequestError) and field in str(e.value)


def test_an_unknown_endpoint_and_a_wrong_key(tmp_path):
    from floodway.routers.admission import ApiKeys

    _, _, asgi = setup(tmp_path, api_keys=ApiKeys(frozenset({"s3cret"})))

    async def go(endpoint: str, key: str | None):
        t = FakeTime()
        c = client_over(httpx.ASGITransport(app=asgi), t, api_key=key)
        try:
            return await c.call(endpoint, ["a"])
        except fw.client.ClientError as e:
            return e

    assert asyncio.run(go("upper", "s3cret")) == ["A"]
    missing = asyncio.run(go("nope", "s3cret"))
    assert isinstance(missing, RequestRefused) and missing.status == 404
    wrong = asyncio.run(go("upper", "guess"))
    assert isinstance(wrong, fw.Unauthorized) and wrong.field == "Authorization"


def test_fifty_clients_against_a_shedding_router_stay_within_their_retry_budget(tmp_path):
    """Each client fires 10 calls at once at a router that sheds every one (503,
    Retry-After: 1). The clients sleep on the router's ManualClock, which the test moves
    from one wake-up to the next: concurrent simulated time."""
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    backend.mode = "not_started"   # every request: 503 + Retry-After
    asgi = make_asgi_app(app, backend, clock=clock)
    policy = RetryPolicy()
    per_client = 10

    class Counting(httpx.ASGITransport):
        def __init__(self) -> None:
            super().__init__(app=asgi)
            self.attempts = 0

        async def handle_async_request(self, request):
            self.attempts += 1
            return await super().handle_async_request(request)

    async def one(i: int):
        wire = Counting()
        c = fw.AsyncClient("http://router", http=httpx.AsyncClient(transport=wire),
                           retry=policy, clock=clock.monotonic, sleep=clock.sleep,
                           rng=random.Random(i))
        out = await asyncio.gather(*(c.call("upper", [f"t{i}-{j}"])
                                     for j in range(per_client)), return_exceptions=True)
        return wire, c, out

    async def go():
        fleet = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(50))))
        async with asyncio.timeout(60):   # a guard against a hang, not a wait
            while not fleet.done():
                await settle()
                if (wake := clock.next_wake_s()) is not None:
                    clock.advance(max(0.0, wake - clock.monotonic()))
        return fleet.result()

    results = asyncio.run(go())
    elapsed_s = clock.monotonic()
    assert elapsed_s >= 1.0   # the Retry-After was waited for, on the clock
    for wire, c, out in results:
        assert all(isinstance(e, Overloaded | RetryBudgetExhausted) for e in out)
        assert wire.attempts <= per_client + c.budget.bound(per_client, elapsed_s)
        assert any(isinstance(e, RetryBudgetExhausted) for e in out)
    total = sum(w.attempts for w, _, _ in results)
    assert total < 50 * per_client * (1 + policy.max_retries)
