"""The router's HTTP surface, in process (ASGI), over a scripted backend and a manual
clock: a request that would wait on a timer never finishes unless the test advances it."""

import asyncio
import sys

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.routers.decide import ContainerView, ServiceTime, Snapshot
from tests.app.scripted import ScriptedBackend, ScriptedPending, advance_when, client

app = fw.App("t")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.2))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def backend(clock):
    return ScriptedBackend(app, clock)


def asgi_of(backend, a=app, **kw):
    return make_asgi_app(a, backend, clock=backend.clock, **kw)


async def _post(c, body, path="/v1/upper"):
    return await c.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("mode,status,kind,retry", [
    ("ok", 200, None, None),
    ("unavailable", 503, "unavailable", "3"),
    ("not_started", 503, "unavailable", "1"),
    ("slow", 504, "deadline_exceeded", None),
    ("raises", 500, "endpoint_error", None),
    ("short", 500, "endpoint_error", None),
])
def test_backend_outcomes_map_to_status(backend, clock, mode, status, kind, retry):
    async def go():
        backend.mode = mode
        async with client(asgi_of(backend)) as c:
            answer = asyncio.ensure_future(_post(c, b'{"inputs": ["a", "b"]}'))
            if mode == "slow":   # the route's 0.2 s deadline passes on the clock
                await advance_when(clock, lambda: backend.calls, 0.25)
            return await answer

    r = asyncio.run(go())
    assert r.status_code == status
    if kind is None:
        assert r.json() == {"outputs": ["A", "B"]}
    else:
        assert r.json()["error"]["type"] == kind
    assert r.headers.get("retry-after") == retry
    assert r.headers["server-timing"].startswith("router;dur=")   # the router's own time
    assert r.headers["x-floodway-decision"] == "dispatch"         # on error answers too
    if mode == "slow":
        assert "did not answer within 0.2 s" in r.json()["error"]["message"]
        assert r.headers["server-timing"] == "router;dur=250.0"   # measured on the clock


def test_bad_requests_never_reach_the_backend(backend):
    async def go():
        async with client(asgi_of(backend)) as c:
            out = [await _post(c, b) for b in
                   (b"{nope", b'{"inputs": []}', b'{"inputs": [1]}', b'{"x": 1}')]
            out.append(await _post(c, b'{"inputs": ["a"]}', "/v1/missing"))
            out.append(await _post(c, b'{"inputs": ["ok"]}'))
            return out

    *bad, good = asyncio.run(go())
    assert [r.status_code for r in bad] == [400, 422, 422, 422, 404]
    assert "no endpoint 'missing'; endpoints: upper" in bad[-1].json()["error"]["message"]
    assert all("x-floodway-decision" not in r.headers for r in bad)   # refused before
    assert good.status_code == 200
    assert len(backend.calls) == 1 and backend.calls[0] == ("upper", ["ok"], 0.2)


def test_health_and_readiness(backend):
    async def go():
        async with client(asgi_of(backend)) as c:
            backend.ready = False
            a = await c.get("/readyz")
            backend.ready = True
            return await c.get("/healthz"), a, await c.get("/readyz")

    health, not_ready, ready = asyncio.run(go())
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert not_ready.status_code == 503 and ready.status_code == 200
    assert "server-timing" not in health.headers   # probes are not API answers


def test_wrong_method_and_unknown_path_are_json(backend):
    async def go():
        async with client(asgi_of(backend)) as c:
            return await c.get("/v1/upper"), await c.get("/nope")

    wrong, unknown = asyncio.run(go())
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "method_not_allowed"
    assert "GET /v1/upper" in wrong.json()["error"]["message"]
    assert "POST" in wrong.headers["allow"]
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"


def test_job_routes_without_a_job_queue_are_501(backend):
    async def go():
        async with client(asgi_of(backend)) as c:
            return (await c.post("/v1/upper/jobs", json={"inputs": ["a"]}),
                    await c.get("/v1/jobs/" + "0" * 32),
                    await c.post("/v1/upper", json={"inputs": ["a"]},
                                 headers={"Prefer": "respond-async"}))

    for r in asyncio.run(go()):
        assert r.status_code == 501 and r.json()["error"]["type"] == "not_implemented"
    assert backend.calls == []


small = fw.App("small")


@small.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
                route=fw.Route(max_body_bytes=2048, max_inputs=3))
def echo(model, texts: list[str]) -> list[str]:
    return texts


def test_body_and_row_limits_are_413_before_the_backend(clock):
    backend = ScriptedBackend(small, clock)

    async def chunks():
        yield b'{"inputs": ["'
        for _ in range(10):
            yield b"x" * 500
        yield b'"]}'

    async def go():
        async with client(asgi_of(backend, small)) as c:
            declared = await c.post("/v1/echo", json={"inputs": ["x" * 5000]})
            streamed = await c.post("/v1/echo", content=chunks())   # no Content-Length
            rows = await c.post("/v1/echo", json={"inputs": ["a", "b", "c", "d"]})
            ok = await c.post("/v1/echo", json={"inputs": ["a", "b", "c"]})
            return declared, streamed, rows, ok

    declared, streamed, rows, ok = asyncio.run(go())
    assert declared.status_code == 413 and declared.json()["error"]["type"] == "too_large"
    assert "the limit is 2048" in declared.json()["error"]["message"]
    assert streamed.status_code == 413 and "exceeds the limit of 2048" in streamed.text
    assert rows.status_code == 413 and rows.json()["error"]["field"] == "inputs"
    assert ok.status_code == 200 and ok.json() == {"outputs": ["a", "b", "c"]}
    assert len(backend.calls) == 1


def test_metrics_count_outcomes_and_report_containers(clock):
    class PoolLike(ScriptedBackend):
        def readiness(self):
            return {"ready": True, "endpoints": {"upper": [
                {"id": 1, "state": "ready", "cold_start_s": {"imports": 0.25, "total": 1.5}},
                {"id": 2, "state": "starting", "cold_start_s": {}}]}}

    backend = PoolLike(app, clock)

    async def go():
        async with client(asgi_of(backend)) as c:
            await _post(c, b'{"inputs": ["a"]}')
            await _post(c, b'{"inputs": ["a"]}')
            await _post(c, b'{"inputs": []}')
            await _post(c, b'{"inputs": ["a"]}', "/v1/nope-1")
            await _post(c, b'{"inputs": ["a"]}', "/v1/nope-2")
            backend.mode = "unavailable"
            await _post(c, b'{"inputs": ["a"]}')
            for listener in backend.listeners:   # the backend reports a batch
                listener("upper", 3, 0.02)
            return await c.get("/metrics")

    r = asyncio.run(go())
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'floodway_requests_total{endpoint="upper",outcome="ok"} 2.0' in text
    assert 'floodway_requests_total{endpoint="upper",outcome="invalid_request"} 1.0' in text
    assert 'floodway_requests_total{endpoint="upper",outcome="unavailable"} 1.0' in text
    assert 'floodway_decisions_total{action="dispatch",endpoint="upper"} 3.0' in text
    assert 'floodway_requests_total{endpoint="(unknown)",outcome="not_found"} 2.0' in text
    assert 'floodway_request_seconds_count{endpoint="upper",outcome="ok"} 2.0' in text
    assert 'floodway_containers{endpoint="upper",lane="",state="ready"} 1.0' in text
    assert 'floodway_containers{endpoint="upper",lane="",state="starting"} 1.0' in text
    assert ('floodway_cold_start_seconds{container="1",endpoint="upper",lane="",'
            'phase="imports"} 0.25' in text)
    assert 'floodway_batch_rows_count{endpoint="upper"} 1.0' in text
    assert 'floodway_batch_seconds_sum{endpoint="upper"} 0.02' in text
    if sys.platform.startswith("linux"):     # the router process's own, from /proc
        from floodway.bench.batches import read_metrics
        assert (read_metrics(text, "upper").cpu_s or 0) > 0


def test_a_bad_item_fails_alone_and_is_named(backend):
    async def go():
        backend.mode = "one_bad"
        async with client(asgi_of(backend)) as c:
            return await _post(c, b'{"inputs": ["a", "bad", "c"]}')

    r = asyncio.run(go())
    assert r.status_code == 500
    body = r.json()
    assert body["outputs"] == ["A", None, "C"]
    assert body["item_errors"] == [{"index": 1, "message": "endpoint 'upper' raised "
                                                         "ValueError: bad"}]
    assert "1 of 3 inputs failed; first: inputs[1]" in body["error"]["message"]


def test_overload_sheds_fast_with_retry_after_or_spills_cold(backend, clock):
    """The clock never moves here: an answer that waited on a timer would never come."""
    async def go():
        async with client(asgi_of(backend)) as c:
            backend.free = 0          # 10 s of backlog against a 0.2 s deadline
            spilled = await _post(c, b'{"inputs": ["a"]}')
            backend.snapshot = lambda ep: Snapshot(
                now_s=clock.monotonic(),
                containers=(ContainerView("1", "busy", 0, 4, 10.0),),
                service=ServiceTime(0.001, 0.01), cold_start_s=5.0, max_batch_rows=32,
                max_queue=8, max_containers=2)
            shed = await _post(c, b'{"inputs": ["a"]}')
            return spilled, shed, await c.get("/metrics")

    spilled, shed, metrics = asyncio.run(go())
    assert spilled.status_code == 200 and backend.cold_starts == 1
    assert spilled.headers["x-floodway-decision"] == "spill_cold"
    assert shed.status_code == 503 and shed.json()["error"]["type"] == "overloaded"
    assert shed.headers["x-floodway-decision"] == "shed"
    assert int(shed.headers["retry-after"]) >= 1
    assert len(backend.calls) == 1
    assert 'floodway_spills_total{endpoint="upper",to="cold"} 1.0' in metrics.text
    assert 'floodway_sheds_total{endpoint="upper",status="503"} 1.0' in metrics.text
    assert 'floodway_requests_total{endpoint="upper",outcome="overloaded"} 1.0' in metrics.text


def test_a_client_that_leaves_withdraws_its_work(backend):
    """A disconnect while the work waits: the work is cancelled (its queued items withdrawn)
    and the answer, which nobody reads, counts as client_closed."""
    backend.mode = "slow"
    asgi = asgi_of(backend)

    async def go():
        body = [{"type": "http.request", "body": b'{"inputs": ["a"]}', "more_body": False}]
        gone = asyncio.Event()

        async def receive():
            if body:
                return body.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/upper", "raw_path": b"",
                 "query_string": b"", "root_path": "", "server": ("t", 80),
                 "headers": [(b"content-type", b"application/json")]}
        call = asyncio.ensure_future(asgi(scope, receive, send))
        await advance_when(backend.clock, lambda: backend.calls, 0.0)
        gone.set()
        await call
        return sent

    sent = asyncio.run(go())
    assert sent[0]["status"] == 499
    assert backend.pendings[0]._work.cancelled()


def test_a_burst_sees_its_own_queue_and_sheds_past_the_cap(clock):
    """Requests arriving together must each see the ones decided before them in the queue
    (the backend enqueues before the handler yields), so the queue cap holds in a burst."""
    capped = fw.App("capped")

    @capped.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
                     route=fw.Route(timeout_s=2.0, max_queue=8, spill=()))
    def echo(model, texts: list[str]) -> list[str]:
        return texts

    class QueueingBackend(ScriptedBackend):
        def __init__(self):
            super().__init__(capped, clock)
            self.queued = self.decided = 0

        def snapshot(self, endpoint):
            self.decided += 1
            busy = ContainerView("1", "busy", 0, 4, 0.1)
            return Snapshot(now_s=clock.monotonic(), containers=(busy,),
                            service=ServiceTime(0.001, 0.01), cold_start_s=60.0,
                            max_batch_rows=32, max_queue=8, max_containers=1, spill=(),
                            queued=self.queued, queued_rows=self.queued)

        def enqueue(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
            self.calls.append((endpoint, inputs, timeout_s))
            self.queued += 1

            async def done():
                await clock.sleep(0.05)
                self.queued -= 1
                return inputs
            return ScriptedPending(done(), clock=clock, timeout_s=timeout_s)

    backend = QueueingBackend()

    async def go():
        async with client(asgi_of(backend, capped)) as c:
            burst = asyncio.gather(*(c.post("/v1/echo", json={"inputs": ["a"]})
                                     for _ in range(30)))
            await advance_when(clock, lambda: backend.decided == 30, 0.05)
            return await burst

    codes = [r.status_code for r in asyncio.run(go())]
    assert codes.count(200) == 7          # 90 % of max_queue 8 for normal priority
    assert codes.count(503) == 23
