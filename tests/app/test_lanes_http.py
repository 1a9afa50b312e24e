"""Request lanes over HTTP, in process, on the local pool (fake containers, a manual clock):
a short request is served by its own lane's container while a long one holds the other
(no head-of-line blocking); the lane shows in the answer, `/readyz` and `/metrics`, and
each lane's traffic is its own."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.runtime.pool import Pool
from tests.app.scripted import client, settle, until
from tests.unit.runtime.fakes import FakeContainer

LANES = (fw.Lane("short", max_tokens=16, min_containers=1, max_containers=1),
         fw.Lane("long", min_containers=1, max_containers=1))


def laned_app(route: fw.Route | None = None) -> fw.App:
    route = route or fw.Route(lanes=LANES)
    app = fw.App("lanes")

    @app.endpoint(route=route, batching=fw.Batching(max_batch_rows=8, wait_ms=0))
    def embed(model, texts: list[str]) -> list[str]:
        return [t.upper() for t in texts]

    return app


async def started(app: fw.App, tmp_path) -> tuple[Pool, ManualClock]:
    clock = ManualClock()
    pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                make_container=lambda unit: FakeContainer(unit, clock))
    pool.machine_cap = 8
    await pool.start()
    for cs in pool.containers.values():
        for c in cs:
            c.become_ready()
    await settle()
    return pool, clock


def answer_all(c: FakeContainer) -> None:
    c.answer(next(iter(c.inflight)), {i: v.upper() for i, v in c.items})


def test_a_short_request_passes_a_long_one_that_holds_its_own_lane(tmp_path):
    async def go():
        pool, clock = await started(laned_app(), tmp_path)
        (short_c,), (long_c,) = pool.containers["embed:short"], pool.containers["embed:long"]
        asgi = make_asgi_app(pool.app, pool, clock=clock,
                             on_arrival=pool.record_arrival)
        async with client(asgi) as cl:
            long_call = asyncio.ensure_future(cl.post("/v1/embed",
                                                      json={"inputs": ["word " * 40]}))
            await until(lambda: long_c.inflight)
            short_call = asyncio.ensure_future(cl.post("/v1/embed", json={"inputs": ["hi"]}))
            await until(lambda: short_c.inflight)
            answer_all(short_c)
            short = await short_call
            long_still_running = not long_call.done()
            answer_all(long_c)
            long = await long_call
            ready = (await cl.get("/readyz")).json()
            metrics = (await cl.get("/metrics")).text
        arrivals = {u: ep.traffic.last_arrival_s is not None
                    for u, ep in pool.endpoints.items()}
        await pool.stop()
        return short, long, long_still_running, ready, metrics, arrivals

    short, long, long_still_running, ready, metrics, arrivals = asyncio.run(
        asyncio.wait_for(go(), 20))
    assert short.status_code == 200 and short.json() == {"outputs": ["HI"]}
    assert short.headers["x-floodway-lane"] == "short" and long_still_running
    assert long.status_code == 200 and long.headers["x-floodway-lane"] == "long"
    assert ready["lanes"]["embed"]["short"]["unit"] == "embed:short"
    assert ready["lanes"]["embed"]["short"]["max_tokens"] == 16
    assert ready["lanes"]["embed"]["long"]["live_containers"] == 1
    assert set(ready["queues"]) == {"embed:short", "embed:long"}
    assert 'floodway_lane_decisions_total{action="dispatch",endpoint="embed",lane="short"} 1.0' \
        in metrics
    assert 'floodway_containers{endpoint="embed",lane="long",state="busy"}' in metrics or \
        'floodway_containers{endpoint="embed",lane="long",state="ready"} 1.0' in metrics
    assert arrivals == {"embed:short": True, "embed:long": True}


def test_each_lane_sheds_on_its_own_queue_share(tmp_path):
    """The long lane's queue is full: a long request is shed (503) while a short one is
    still served."""
    route = fw.Route(max_queue=2, spill=(), max_inflight_per_container=1, lanes=(
        fw.Lane("short", max_tokens=16, min_containers=1, max_containers=1, queue_share=0.5),
        fw.Lane("long", min_containers=1, max_containers=1, queue_share=0.5)))

    async def go():
        pool, clock = await started(laned_app(route), tmp_path)
        (short_c,), (long_c,) = pool.containers["embed:short"], pool.containers["embed:long"]
        asgi = make_asgi_app(pool.app, pool, clock=clock)
        async with client(asgi) as cl:
            longs = [asyncio.ensure_future(cl.post("/v1/embed", json={"inputs": [f"w{i} " * 40]}))
                     for i in range(4)]
            done, _ = await asyncio.wait(longs, timeout=5, return_when=asyncio.FIRST_COMPLETED)
            shed = [t.result().status_code for t in done]
            short_call = asyncio.ensure_future(cl.post("/v1/embed", json={"inputs": ["hi"]}))
            await until(lambda: short_c.inflight)
            answer_all(short_c)
            short = await short_call
            while long_c.inflight:
                answer_all(long_c)
                await settle()
            statuses = sorted(r.status_code for r in await asyncio.gather(*longs))
        await pool.stop()
        return shed, short, statuses

    shed, short, statuses = asyncio.run(asyncio.wait_for(go(), 20))
    assert shed and set(shed) == {503}
    assert short.status_code == 200 and short.headers["x-floodway-lane"] == "short"
    assert 503 in statuses and 200 in statuses


def test_work_named_by_its_endpoint_runs_in_the_lane_its_inputs_take(tmp_path):
    """The job queue names the endpoint, not the lane: the pool picks the lane by inputs."""
    async def go():
        pool, _ = await started(laned_app(), tmp_path)
        (short_c,), (long_c,) = pool.containers["embed:short"], pool.containers["embed:long"]
        short = pool.enqueue("embed", ["hi"], timeout_s=5, priority=0)
        long = pool.enqueue("embed", ["word " * 40], timeout_s=5, priority=0)
        await until(lambda: short_c.inflight and long_c.inflight)
        where = (list(short_c.items), list(long_c.items))
        answer_all(short_c)
        answer_all(long_c)
        out = (await short, await long)
        await pool.stop()
        return where, out

    (on_short, on_long), (short, long) = asyncio.run(asyncio.wait_for(go(), 20))
    assert [v for _, v in on_short] == ["hi"] and [v for _, v in on_long] == ["word " * 40]
    assert short == ["HI"] and long == [("word " * 40).upper()]
