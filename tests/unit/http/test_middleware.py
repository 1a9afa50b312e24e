"""`Observe`, the per-route middleware: metrics by endpoint and outcome, Server-Timing on
the injected clock, noted headers on every answer; plain ASGI, so streaming and disconnects
pass through."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from floodway.core.clock import ManualClock
from floodway.errors import Unavailable
from floodway.http.errors import EXCEPTION_HANDLERS
from floodway.http.metrics import Metrics
from floodway.http.middleware import Observe, notes, outcome


def build(handler, clock, path="/v1/{endpoint}"):
    metrics = Metrics(lambda: {"ready": True})
    observed = [Middleware(Observe, metrics=metrics, endpoints={"embed"}, clock=clock)]
    app = Starlette(exception_handlers=EXCEPTION_HANDLERS, routes=[
        Route(path, handler, methods=["POST"], middleware=observed),
        Route("/plain", handler, methods=["POST"])])
    return app, metrics


def text(metrics: Metrics) -> str:
    return metrics.render()[0].decode()


def test_server_timing_is_measured_on_the_clock_and_metrics_count_it():
    clock = ManualClock()

    async def slow(request):
        clock.advance(0.25)
        notes(request.scope).headers["X-Floodway-Decision"] = "dispatch"
        return JSONResponse({"outputs": []})

    app, metrics = build(slow, clock)
    r = TestClient(app).post("/v1/embed")
    assert r.status_code == 200 and r.headers["server-timing"] == "router;dur=250.0"
    assert r.headers["x-floodway-decision"] == "dispatch"
    assert 'floodway_requests_total{endpoint="embed",outcome="ok"} 1.0' in text(metrics)
    assert 'floodway_request_seconds_sum{endpoint="embed",outcome="ok"} 0.25' in text(metrics)
    plain = TestClient(app).post("/plain")   # a route without the middleware
    assert "server-timing" not in plain.headers


def test_error_answers_carry_noted_headers_and_count_by_error_type():
    clock = ManualClock()

    async def shed(request):
        notes(request.scope).headers["X-Floodway-Decision"] = "shed"
        raise Unavailable("all busy")

    app, metrics = build(shed, clock)
    client = TestClient(app)
    r = client.post("/v1/embed")
    client.post("/v1/other-1")
    client.post("/v1/other-2")
    assert r.status_code == 503 and r.headers["x-floodway-decision"] == "shed"
    assert r.headers["server-timing"] == "router;dur=0.0"
    assert 'floodway_requests_total{endpoint="embed",outcome="unavailable"} 1.0' in text(metrics)
    # Names outside the app share one label: a client cannot grow the label set.
    assert ('floodway_requests_total{endpoint="(unknown)",outcome="unavailable"} 2.0'
            in text(metrics))


def test_a_route_without_an_endpoint_is_counted_as_jobs():
    async def accepted(request):
        return JSONResponse({"id": "j"}, status_code=202)

    app, metrics = build(accepted, ManualClock(), path="/v1/jobs/{job_id}")
    assert TestClient(app).post("/v1/jobs/j").status_code == 202
    assert 'floodway_requests_total{endpoint="(jobs)",outcome="accepted"} 1.0' in text(metrics)


def test_an_unexpected_error_is_counted_and_passed_on():
    async def bug(request):
        raise ZeroDivisionError("bug")

    app, metrics = build(bug, ManualClock())
    r = TestClient(app, raise_server_exceptions=False).post("/v1/embed")
    assert r.status_code == 500
    assert 'floodway_requests_total{endpoint="embed",outcome="500"} 1.0' in text(metrics)


@pytest.mark.parametrize(("status", "error_type", "want"), [
    (200, None, "ok"), (202, None, "accepted"), (201, None, "ok"), (503, "overloaded",
                                                                   "overloaded"),
    (418, None, "418"),
])
def test_outcome(status, error_type, want):
    assert outcome(status, error_type) == want


def _scope(path: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "server": ("t", 80), "headers": []}


def test_a_streamed_body_passes_through_as_it_comes():
    go_on = asyncio.Event()

    async def stream(request):
        async def chunks():
            yield b"first"
            await go_on.wait()   # only once the client has the first chunk
            yield b"second"
        return StreamingResponse(chunks())

    app, _ = build(stream, ManualClock())

    async def go():
        sent: list[dict] = []

        async def send(message):
            sent.append(message)
            if message.get("body") == b"first":
                go_on.set()

        body = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if body:
                return body.pop()
            await asyncio.Event().wait()   # the client stays

        async with asyncio.timeout(10):   # a middleware that buffered would hang here
            await app(_scope("/v1/embed"), receive, send)
        return sent

    sent = asyncio.run(go())
    bodies = [m.get("body") for m in sent if m["type"] == "http.response.body"]
    assert bodies[:2] == [b"first", b"second"]
    start = sent[0]
    assert (b"server-timing", b"router;dur=0.0") in start["headers"]


def test_the_handler_sees_the_client_leave():
    seen = []

    async def watch(request: Request):
        await request.body()
        seen.append((await request.receive())["type"])   # after the body: the disconnect
        return JSONResponse({}, status_code=499)

    app, _ = build(watch, ManualClock())

    async def go():
        messages = [{"type": "http.disconnect"},
                    {"type": "http.request", "body": b"{}", "more_body": False}]

        async def receive():
            return messages.pop()

        async def send(message):
            pass

        await app(_scope("/v1/embed"), receive, send)

    asyncio.run(go())
    assert seen == ["http.disconnect"]
