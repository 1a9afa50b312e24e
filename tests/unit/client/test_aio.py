"""`floodway.AsyncClient` against scripted answers on fake time: the retry budget holds a
fleet of clients to its bound against a server that always sheds, concurrent calls of one
client share one budget, and the async stream closes its connection when closed."""

from __future__ import annotations

import asyncio
import random

import httpx

import floodway as fw
from floodway.client import Overloaded, RetryBudgetExhausted, RetryPolicy, StreamChunk
from tests.unit.client.fakes import FakeTime, error, sse

POLICY = RetryPolicy()   # the defaults: 3 retries, 20% + 1/s, 10 tokens saved


def always_shed(counts: list[int]):
    async def handler(request: httpx.Request) -> httpx.Response:
        counts[0] += 1
        await asyncio.sleep(0)   # let the other clients interleave
        return error(503, "overloaded", "over capacity", headers={"Retry-After": "0"})
    return handler


def async_client(handler, t: FakeTime, seed: int) -> fw.AsyncClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return fw.AsyncClient("http://router", http=http, clock=t.monotonic, sleep=t.asleep,
                          rng=random.Random(seed), retry=POLICY)


def test_fifty_clients_against_a_server_that_always_sheds_stay_within_their_budget():
    calls = 20

    async def one(seed: int) -> tuple[int, float, list[type], fw.AsyncClient]:
        counts, t = [0], FakeTime()
        c = async_client(always_shed(counts), t, seed)
        raised = []
        for i in range(calls):
            try:
                await c.call("embed", [f"text {i}"])
            except (Overloaded, RetryBudgetExhausted) as e:
                raised.append(type(e))
        return counts[0], t.now, raised, c

    async def fleet():
        return await asyncio.gather(*(one(seed) for seed in range(50)))

    results = asyncio.run(fleet())
    without_budget = calls * (1 + POLICY.max_retries)
    for attempts, elapsed_s, raised, c in results:
        bound = calls + c.budget.bound(calls, elapsed_s)
        assert attempts <= bound < without_budget
        assert attempts >= calls + POLICY.budget_max_tokens   # the saved tokens were used
        assert len(raised) == calls and RetryBudgetExhausted in raised
    assert sum(r[0] for r in results) <= 50 * (calls + 10 + 0.2 * calls)


def test_concurrent_calls_of_one_client_share_its_budget():
    counts, t = [0], FakeTime()
    c = async_client(always_shed(counts), t, 0)

    async def go():
        return await asyncio.gather(*(c.call("embed", ["a"]) for _ in range(40)),
                                    return_exceptions=True)

    out = asyncio.run(go())
    assert all(isinstance(e, Overloaded | RetryBudgetExhausted) for e in out)
    retries = counts[0] - 40
    assert retries <= c.budget.bound(40, t.now) and retries >= 10
    assert sum(isinstance(e, RetryBudgetExhausted) for e in out) > 0


def test_async_call_retries_under_one_key_after_retry_after():
    t = FakeTime()
    seen: list[tuple[float, str]] = []

    async def handler(request):
        seen.append((t.now, request.headers["idempotency-key"]))
        if len(seen) <= 2:
            return error(503, "overloaded", "busy", headers={"Retry-After": "1"})
        return httpx.Response(200, json={"outputs": [[1.0]]})

    async def go():
        async with async_client(handler, t, 1) as c:
            return await c.call("embed", ["a"], deadline_ms=5000)

    assert asyncio.run(go()) == [[1.0]]
    assert len(seen) == 3 and len({k for _, k in seen}) == 1
    assert seen[1][0] - seen[0][0] >= 1.0 and seen[2][0] - seen[1][0] >= 1.0


class Body(httpx.AsyncByteStream):
    def __init__(self):
        self.sent, self.closed = 0, False

    async def __aiter__(self):
        for i in range(100):
            self.sent += 1
            yield sse({"index": 0, "chunk": i}, done=False)

    async def aclose(self) -> None:
        self.closed = True


def test_closing_the_async_stream_closes_the_connection():
    t = FakeTime()
    body = Body()

    async def handler(request):
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, stream=body)

    async def go():
        c = async_client(handler, t, 2)
        async with await c.stream("generate", [{"prompt": "Hi"}]) as s:
            got = [await s.__anext__(), await s.__anext__()]
        return got

    assert asyncio.run(go()) == [StreamChunk(0, 0), StreamChunk(0, 1)]
    assert body.closed and body.sent < 100
