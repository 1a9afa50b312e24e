"""The routers' per-minute arrivals on Modal, offline: the recorder's counts and writes (a
MemoryKV for the traffic Dict), and the router's hook through the ASGI app."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import modal

from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.modal.kv import MemoryKV, MemoryStore
from floodway.modal.router.backend import ModalBackend
from floodway.modal.traffic import ArrivalRecorder, scan_traffic
from floodway.routers.admission import ApiKeys
from floodway.warmers.target import minute_of
from tests.unit.modal.router.test_backend import (
    AUTH_A,
    KEY_A,
    FakeJobFunction,
    FakeModal,
    _jobs,
    until,
)
from tests.unit.modal.router.test_backend import app as router_app
from tests.unit.modal.warmers.test_apply import _utc


def test_recorder_aggregates_per_minute_and_rewrites_idempotently():
    data: dict = {}
    rec = ArrivalRecorder("warmers", MemoryKV(data), router_id="r1")
    t0 = _utc(2025, 1, 6, 12)
    for dt in (0, 10, 59.9):
        rec.record("pred", t0 + dt)
    rec.record("pred", t0 + 60)
    rec.record("sched", t0 + 5)
    assert asyncio.run(rec.flush()) == 2
    m = minute_of(t0)
    assert data[("arrivals", "warmers", "pred", "r1")] == {m: 3, m + 1: 1}
    assert data[("arrivals", "warmers", "sched", "r1")] == {m: 1}
    assert asyncio.run(rec.flush()) == 0                # nothing new: no write
    rec.record("pred", t0 + 70)
    asyncio.run(rec.flush())
    assert data[("arrivals", "warmers", "pred", "r1")] == {m: 3, m + 1: 2}   # not 3

    other = ArrivalRecorder("warmers", MemoryKV(data), router_id="r2")
    other.record("pred", t0 + 80)
    asyncio.run(other.flush())
    hist, stale = scan_traffic(MemoryStore(data), "warmers", ["pred", "sched"], t0 + 90,
                               minutes=5)
    assert hist["pred"].counts.tolist() == [0, 0, 0, 3, 3]
    assert hist["sched"].counts.tolist() == [0, 0, 0, 1, 0]
    assert stale == []


def test_recorder_writes_once_per_period_on_the_loop():
    class CountingKV(MemoryKV):
        puts = 0
        fail = True

        async def put(self, key, value, *, skip_if_exists=False):
            CountingKV.puts += 1
            if CountingKV.fail:
                CountingKV.fail = False
                raise modal.exception.ConnectionError("blip")
            return await super().put(key, value)

    kv, clock = CountingKV(), ManualClock()
    rec = ArrivalRecorder("warmers", kv, router_id="r1", flush_s=30.0, clock=clock)
    t0 = _utc(2025, 1, 6, 12)

    async def go():
        for i in range(50):
            rec.record("pred", t0 + i * 0.1)
        await until(lambda: clock.sleeping == 1)        # one timer for the 50 arrivals
        puts = [CountingKV.puts]
        clock.advance(29.0)                             # before the period: no write
        await until(lambda: clock.sleeping == 1)
        puts.append(CountingKV.puts)
        clock.advance(1.0)                              # the write fails: a retry is timed
        await until(lambda: CountingKV.puts == 1 and clock.sleeping == 1)
        clock.advance(30.0)                             # the retry writes
        await until(lambda: CountingKV.puts == 2)
        await until(lambda: rec._timer is None)
        for _ in range(5):                              # nothing new: no timer, no write
            clock.advance(30.0)
            await asyncio.sleep(0)
        return puts, clock.sleeping

    puts, sleeping = asyncio.run(go())
    assert puts == [0, 0] and sleeping == 0
    # The first write failed and was retried; 50 arrivals cost two writes.
    assert CountingKV.puts == 2 and rec.writes == 1
    assert kv.data[rec.key("pred")] == {minute_of(t0): 50}


def test_a_cancelled_write_timer_does_not_start_another():
    """A router shutting down cancels the timer with counts unsaved: it must end there (a
    new timer would never be awaited, and shutdown would wait on it forever)."""
    kv, clock = MemoryKV(), ManualClock()
    rec = ArrivalRecorder("warmers", kv, router_id="r1", flush_s=30.0, clock=clock)

    async def go():
        rec.record("pred", _utc(2025, 1, 6, 12))
        await until(lambda: clock.sleeping == 1)
        timer = rec._timer
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        await asyncio.sleep(0)
        return rec._timer, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    timer, others = asyncio.run(go())
    assert timer is None and others == []


def test_router_records_user_requests_only():
    arrivals: list[tuple[str, float]] = []
    fake = FakeModal()
    backend = ModalBackend(router_app, {"upper": fake.cls()}, stats=MemoryKV())
    asgi = make_asgi_app(router_app, backend, jobs=_jobs(FakeJobFunction()),
                         api_keys=ApiKeys([KEY_A]), on_arrival=lambda e, t: arrivals.append((e, t)))

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                     base_url="http://t") as c:
            codes = [
                (await c.post("/v1/upper", json={"inputs": ["a"]}, headers=AUTH_A)).status_code,
                (await c.post("/v1/upper/jobs", json={"inputs": ["a"]},
                              headers=AUTH_A)).status_code,
                (await c.post("/v1/upper", json={"inputs": ["a"]})).status_code,
                (await c.post("/v1/nope", json={"inputs": ["a"]}, headers=AUTH_A)).status_code,
                (await c.post("/v1/upper", content=b"{", headers=AUTH_A)).status_code,
            ]
            for path in ("/healthz", "/readyz", "/metrics"):
                await c.get(path)
            return codes

    assert asyncio.run(go()) == [200, 202, 401, 404, 400]
    assert [e for e, _ in arrivals] == ["upper", "upper"]
    assert all(abs(t - arrivals[0][1]) < 60 for _, t in arrivals)
