"""The router's HTTP surface, in process (ASGI), over a scripted backend."""

import asyncio
import time

import httpx
import pytest

import floodway as fw
from floodway.errors import EndpointError, Unavailable
from floodway.routers.decide import ContainerView, ServiceTime, Snapshot
from floodway.runtime.http import make_asgi_app

app = fw.App("t")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40), route=fw.Route(timeout_s=0.2))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


class ScriptedBackend:
    """Runs the endpoint function in process; `mode` makes it fail in chosen ways. Its
    snapshot shows one warm container with `free` free slots (0: all busy for 10 s)."""

    def __init__(self):
        self.mode = "ok"
        self.calls: list[tuple[str, list, float]] = []
        self.ready = True
        self.free = 4
        self.cold_starts = 0

    def snapshot(self, endpoint):
        backlog = 0.0 if self.free else 10.0
        c = ContainerView("1", "ready" if self.free else "busy", self.free, 4, backlog)
        return Snapshot(now_s=time.monotonic(), containers=(c,),
                        service=ServiceTime(0.001, 0.01), cold_start_s=0.05,
                        max_batch_rows=32, max_queue=8, max_containers=2)

    def start_cold(self, endpoint):
        self.cold_starts += 1
        return True

    async def run(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
        self.calls.append((endpoint, inputs, timeout_s))
        if self.mode == "unavailable":
            raise Unavailable("all busy", retry_after_s=2.5)
        if self.mode == "slow":
            await asyncio.wait_for(asyncio.sleep(10), timeout_s)
        if self.mode == "raises":
            return [EndpointError("endpoint 'upper' raised ValueError: boom")] * len(inputs)
        if self.mode == "one_bad":
            return [EndpointError("endpoint 'upper' raised ValueError: bad") if t == "bad"
                    else t.upper() for t in inputs]
        if self.mode == "short":
            return inputs[:-1]
        return app[endpoint](None, inputs)

    def readiness(self):
        return {"ready": self.ready, "endpoints": {}}


@pytest.fixture
def backend():
    return ScriptedBackend()


def run(coro):
    return asyncio.run(coro)


async def _post(client, body, path="/v1/upper"):
    return await client.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("mode,status,kind,retry", [
    ("ok", 200, None, None),
    ("unavailable", 503, "unavailable", "3"),
    ("slow", 504, "deadline_exceeded", None),
    ("raises", 500, "endpoint_error", None),
    ("short", 500, "endpoint_error", None),
])
def test_backend_outcomes_map_to_status(backend, mode, status, kind, retry):
    async def go():
        backend.mode = mode
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await _post(c, b'{"inputs": ["a", "b"]}')

    r = run(go())
    assert r.status_code == status
    if kind is None:
        assert r.json() == {"outputs": ["A", "B"]}
    else:
        assert r.json()["error"]["type"] == kind
    assert r.headers.get("retry-after") == retry
    assert r.headers["server-timing"].startswith("router;dur=")   # the router's own time


def test_bad_requests_never_reach_the_backend(backend):
    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            out = [await _post(c, b) for b in
                   (b"{nope", b'{"inputs": []}', b'{"inputs": [1]}', b'{"x": 1}')]
            out.append(await _post(c, b'{"inputs": ["a"]}', "/v1/missing"))
            out.append(await _post(c, b'{"inputs": ["ok"]}'))
            return out

    *bad, good = run(go())
    assert [r.status_code for r in bad] == [400, 422, 422, 422, 404]
    assert "no endpoint 'missing'; endpoints: upper" in bad[-1].json()["error"]["message"]
    assert good.status_code == 200
    assert len(backend.calls) == 1 and backend.calls[0] == ("upper", ["ok"], 0.2)


def test_health_and_readiness(backend):
    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            backend.ready = False
            a = await c.get("/readyz")
            backend.ready = True
            return await c.get("/healthz"), a, await c.get("/readyz")

    health, not_ready, ready = run(go())
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert not_ready.status_code == 503 and ready.status_code == 200


def test_wrong_method_and_unknown_path_are_json(backend):
    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.get("/v1/upper"), await c.get("/nope")

    wrong, unknown = run(go())
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "method_not_allowed"
    assert "GET /v1/upper" in wrong.json()["error"]["message"]
    assert "POST" in wrong.headers["allow"]
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"


small = fw.App("small")


@small.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
                route=fw.Route(max_body_bytes=2048, max_inputs=3))
def echo(model, texts: list[str]) -> list[str]:
    return texts


class EchoBackend(ScriptedBackend):
    async def run(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
        self.calls.append((endpoint, inputs, timeout_s))
        return inputs


def test_body_and_row_limits_are_413_before_the_backend():
    backend = EchoBackend()

    async def chunks():
        yield b'{"inputs": ["'
        for _ in range(10):
            yield b"x" * 500
        yield b'"]}'

    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(small, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            declared = await c.post("/v1/echo", json={"inputs": ["x" * 5000]})
            streamed = await c.post("/v1/echo", content=chunks())   # no Content-Length
            rows = await c.post("/v1/echo", json={"inputs": ["a", "b", "c", "d"]})
            ok = await c.post("/v1/echo", json={"inputs": ["a", "b", "c"]})
            return declared, streamed, rows, ok

    declared, streamed, rows, ok = run(go())
    assert declared.status_code == 413
    assert "the limit is 2048" in declared.json()["error"]["message"]
    assert streamed.status_code == 413 and "exceeds the limit of 2048" in streamed.text
    assert rows.status_code == 413 and rows.json()["error"]["field"] == "inputs"
    assert ok.status_code == 200 and ok.json() == {"outputs": ["a", "b", "c"]}
    assert len(backend.calls) == 1


def test_metrics_count_outcomes_and_report_containers():
    class PoolLike(ScriptedBackend):
        def readiness(self):
            return {"ready": True, "endpoints": {"upper": [
                {"id": 1, "state": "ready", "cold_start_s": {"imports": 0.25, "total": 1.5}},
                {"id": 2, "state": "starting", "cold_start_s": {}}]}}

    backend = PoolLike()

    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            await _post(c, b'{"inputs": ["a"]}')
            await _post(c, b'{"inputs": ["a"]}')
            await _post(c, b'{"inputs": []}')
            await _post(c, b'{"inputs": ["a"]}', "/v1/nope-1")
            await _post(c, b'{"inputs": ["a"]}', "/v1/nope-2")
            backend.mode = "unavailable"
            await _post(c, b'{"inputs": ["a"]}')
            return await c.get("/metrics")

    r = run(go())
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'floodway_requests_total{endpoint="upper",outcome="ok"} 2.0' in text
    assert 'floodway_requests_total{endpoint="upper",outcome="invalid_request"} 1.0' in text
    assert 'floodway_requests_total{endpoint="upper",outcome="unavailable"} 1.0' in text
    assert 'floodway_decisions_total{action="dispatch",endpoint="upper"} 3.0' in text
    assert 'floodway_requests_total{endpoint="(unknown)",outcome="not_found"} 2.0' in text
    assert 'floodway_request_seconds_count{endpoint="upper",outcome="ok"} 2.0' in text
    assert 'floodway_containers{endpoint="upper",state="ready"} 1.0' in text
    assert 'floodway_containers{endpoint="upper",state="starting"} 1.0' in text
    assert ('floodway_cold_start_seconds{container="1",endpoint="upper",phase="imports"} 0.25'
            in text)


def test_a_bad_item_fails_alone_and_is_named(backend):
    async def go():
        backend.mode = "one_bad"
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await _post(c, b'{"inputs": ["a", "bad", "c"]}')

    r = run(go())
    assert r.status_code == 500
    body = r.json()
    assert body["outputs"] == ["A", None, "C"]
    assert body["item_errors"] == [{"index": 1, "message": "endpoint 'upper' raised "
                                                         "ValueError: bad"}]
    assert "1 of 3 inputs failed; first: inputs[1]" in body["error"]["message"]


def test_overload_sheds_fast_with_retry_after_or_spills_cold(backend):
    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(app, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            backend.free = 0          # 10 s of backlog against a 0.2 s deadline
            spilled = await _post(c, b'{"inputs": ["a"]}')
            t = time.perf_counter()
            backend.snapshot = lambda ep: Snapshot(
                now_s=time.monotonic(), containers=(ContainerView("1", "busy", 0, 4, 10.0),),
                service=ServiceTime(0.001, 0.01), cold_start_s=5.0, max_batch_rows=32,
                max_queue=8, max_containers=2)
            shed = await _post(c, b'{"inputs": ["a"]}')
            return spilled, shed, time.perf_counter() - t, await c.get("/metrics")

    spilled, shed, shed_s, metrics = run(go())
    assert spilled.status_code == 200 and backend.cold_starts == 1
    assert shed.status_code == 503 and shed.json()["error"]["type"] == "overloaded"
    assert int(shed.headers["retry-after"]) >= 1
    assert shed_s < 1.0   # answered at once, not after the deadline
    assert len(backend.calls) == 1
    assert 'floodway_spills_total{endpoint="upper",to="cold"} 1.0' in metrics.text
    assert 'floodway_sheds_total{endpoint="upper",status="503"} 1.0' in metrics.text


def test_a_burst_sees_its_own_queue_and_sheds_past_the_cap():
    """Requests arriving together must each see the ones decided before them in the queue
    (the backend enqueues before the handler yields), so the queue cap holds in a burst."""
    capped = fw.App("capped")

    @capped.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
                     route=fw.Route(timeout_s=2.0, max_queue=8, spill=()))
    def echo(model, texts: list[str]) -> list[str]:
        return texts

    class QueueingBackend(ScriptedBackend):
        def __init__(self):
            super().__init__()
            self.queued = 0

        def snapshot(self, endpoint):
            busy = ContainerView("1", "busy", 0, 4, 0.1)
            return Snapshot(now_s=time.monotonic(), containers=(busy,),
                            service=ServiceTime(0.001, 0.01), cold_start_s=60.0,
                            max_batch_rows=32, max_queue=8, max_containers=1, spill=(),
                            queued=self.queued, queued_rows=self.queued)

        def enqueue(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
            self.queued += 1

            async def done():
                await asyncio.sleep(0.05)
                self.queued -= 1
                return inputs
            return done()

    backend = QueueingBackend()

    async def go():
        transport = httpx.ASGITransport(app=make_asgi_app(capped, backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await asyncio.gather(*(c.post("/v1/echo", json={"inputs": ["a"]})
                                          for _ in range(30)))

    codes = [r.status_code for r in run(go())]
    assert codes.count(200) == 7          # 90 % of max_queue 8 for normal priority
    assert codes.count(503) == 23
