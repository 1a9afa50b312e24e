"""The open-loop replay, against an in-process ASGI app on a fake clock: requests go out at
their planned times whatever earlier answers do, each answer's status, latency and decision
are recorded, and a request with no answer is recorded as such."""

import asyncio
import heapq
import itertools
import math

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from floodway.bench.plan import Planned
from floodway.bench.replay import replay


class FakeClock:
    """A clock that moves only when every task is waiting on it: then to the earliest
    sleeper's wake-up time."""

    def __init__(self):
        self.now = 0.0
        self._sleepers: list = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), fut))
        await fut

    async def drive(self, coro):
        task = asyncio.ensure_future(coro)
        while not task.done():
            for _ in range(200):                # let everything runnable run first
                await asyncio.sleep(0)
            if self._sleepers and not task.done():
                wake, _, fut = heapq.heappop(self._sleepers)
                self.now = max(self.now, wake)
                fut.set_result(None)
        return task.result()


# per request index: (seconds the app takes, status, decision)
BEHAVIOUR = {0: (5.0, 200, "dispatch"), 1: (0.25, 200, "queue"), 2: (0.01, 503, "shed"),
             3: (0.02, 202, "spill_async"), 4: (1.5, 200, "dispatch")}


def _app(clock: FakeClock, arrivals: dict[int, float], headers: list[dict]):
    async def endpoint(request: Request):
        body = await request.json()
        index = int(body["inputs"][0].split()[0].lstrip("#"))
        arrivals[index] = clock()
        headers.append(dict(request.headers))
        if index == 5:
            raise RuntimeError("the app fails this one")
        took, status, decision = BEHAVIOUR[index]
        await clock.sleep(took)
        return JSONResponse({"outputs": [index]}, status_code=status,
                            headers={"X-Floodway-Decision": decision})

    return Starlette(routes=[Route("/v1/embed", endpoint, methods=["POST"])])


def _plan(times):
    return [Planned(i, t, [f"#{i} some text"]) for i, t in enumerate(times)]


def test_open_loop_sends_on_time_and_records_each_answer():
    clock, arrivals, headers = FakeClock(), {}, []
    app = _app(clock, arrivals, headers)
    plan = _plan([0.0, 1.0, 1.5, 2.0, 3.0])
    seen = []

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://bench") as client:
            return await replay(client, "embed", plan, 800, headers={"Authorization": "Bearer k"},
                                clock=clock, sleep=clock.sleep, on_answer=seen.append)

    results = asyncio.run(clock.drive(go()))
    # request 0 takes 5 s: the others still went out at their own times (open loop)
    assert arrivals == pytest.approx({0: 0.0, 1: 1.0, 2: 1.5, 3: 2.0, 4: 3.0})
    assert [r.index for r in results] == [0, 1, 2, 3, 4]
    assert [r.status for r in results] == [200, 200, 503, 202, 200]
    assert [r.latency_s for r in results] == pytest.approx([5.0, 0.25, 0.01, 0.02, 1.5])
    assert [r.decision for r in results] == ["dispatch", "queue", "shed", "spill_async",
                                             "dispatch"]
    assert all(r.lag_s == 0 for r in results)
    # an answer >= 400 keeps its body's message (this app's 503 has no floodway error)
    assert [r.error for r in results] == ["", "", '{"outputs":[2]}', "", ""]
    assert [r.index for r in seen] == [1, 2, 3, 4, 0]    # ended at 1.25, 1.51, 2.02, 4.5, 5
    assert all(h["x-deadline-ms"] == "800" and h["authorization"] == "Bearer k"
               for h in headers)


def test_a_request_without_an_answer_is_recorded_not_raised():
    clock, arrivals, headers = FakeClock(), {}, []
    app = _app(clock, arrivals, headers)
    plan = [Planned(0, 0.0, ["#1 ok"]), Planned(1, 0.5, ["#5 boom"])]

    async def go():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            return await replay(client, "embed", plan, 1000, clock=clock, sleep=clock.sleep)

    ok, failed = asyncio.run(clock.drive(go()))
    assert ok.status == 200 and ok.latency_s == pytest.approx(0.25)
    assert failed.status == 500 and failed.send_s == 0.5


def test_a_transport_error_is_an_answer_of_status_0():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    clock = FakeClock()

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse),
                                     base_url="http://bench") as client:
            return await replay(client, "embed", _plan([0.0, 0.2]), 1000, clock=clock,
                                sleep=clock.sleep)

    results = asyncio.run(clock.drive(go()))
    assert [r.status for r in results] == [0, 0]
    assert all(r.error.startswith("ConnectError") for r in results)
    assert [r.send_s for r in results] == [0.0, 0.2]


def test_router_seconds_are_read_from_server_timing():
    from floodway.bench.replay import router_seconds

    assert router_seconds("router;dur=12.5") == 0.0125
    assert router_seconds('cache;desc="hit", router;dur=1500') == 1.5
    assert math.isnan(router_seconds("")) and math.isnan(router_seconds("db;dur=3"))
    assert math.isnan(router_seconds("router;dur=x"))


def test_an_error_answer_keeps_the_routers_message():
    async def refuse(request: Request):
        return JSONResponse({"error": {"type": "invalid_request", "field": "inputs[0]",
                                       "message": "expected an array of float32"}},
                            status_code=422)

    app = Starlette(routes=[Route("/v1/embed", refuse, methods=["POST"])])
    clock = FakeClock()

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://bench") as client:
            return await replay(client, "embed", _plan([0.0]), 1000, clock=clock,
                                sleep=clock.sleep)

    (r,) = asyncio.run(clock.drive(go()))
    assert r.status == 422 and r.error == "inputs[0]: expected an array of float32"


def test_error_messages_are_read_from_any_body():
    from floodway.bench.replay import ERROR_CHARS, error_message

    assert error_message(b'{"error": {"message": "inputs[2]: bad", "field": "inputs[2]"}}') \
        == "inputs[2]: bad"
    assert error_message(b"<html>\n  Bad Gateway </html>") == "<html> Bad Gateway </html>"
    assert len(error_message(b"x" * 1000)) == ERROR_CHARS


async def _keepalive_once_server():
    """A loopback HTTP server that answers the first request of each connection (keeping
    the connection) and closes the connection at the second without answering it, as a
    server closing an idle keep-alive connection just as a request comes does."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if served:
                    break                               # closed with no byte of an answer
                served += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 14\r\n\r\n{\"outputs\":[]}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_a_request_on_a_reused_connection_the_server_closed_is_sent_again():
    from floodway.bench.replay import Result, send, sessions

    async def go():
        server = await _keepalive_once_server()
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        load, fresh = sessions(base, {}, 10.0)
        out = []
        async with server, load, fresh:
            # one after another: a new connection, then that one reused (closed: sent
            # again through `fresh`), then a new one again, then that one reused
            for i in range(3):
                res = Result(i, 0.0)
                await send(load, "v1/embed", {"inputs": ["a"]}, {}, res, 0.0, lambda: 0.0,
                           fresh)
                out.append(res)
            # without `fresh` the retry goes through the load's own pool (a new connection)
            alone = Result(3, 0.0)
            await send(load, "v1/embed", {"inputs": ["a"]}, {}, alone, 0.0, lambda: 0.0)
            out.append(alone)
        return out

    results = asyncio.run(go())
    assert [r.status for r in results] == [200, 200, 200, 200]
    assert [r.reconnected for r in results] == [False, True, False, True]
    assert all(r.error == "" for r in results)


def test_a_new_connection_closed_without_an_answer_is_a_failure():
    from floodway.bench.replay import Result, send, sessions

    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def go():
        server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        load, fresh = sessions(base, {}, 10.0)
        async with server, load, fresh:
            res = Result(0, 0.0)
            await send(load, "v1/embed", {"inputs": ["a"]}, {}, res, 0.0, lambda: 0.0, fresh)
        return res

    res = asyncio.run(go())
    assert res.status == 0 and not res.reconnected
    assert res.error.startswith(("ServerDisconnectedError", "ClientOSError"))
