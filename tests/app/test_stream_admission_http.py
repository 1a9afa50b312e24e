"""Admission of a streaming endpoint over HTTP, in process, on the local pool's own stream
snapshot (`Pool` with fake streaming containers, a manual clock): 503 + Retry-After when its
one container is full and the queue has no room, the async spill (202) of a request whose
first token cannot come before its X-Deadline-Ms, and 413 for a sequence no container's KV
cache can hold."""

from __future__ import annotations

import asyncio
import json

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from floodway.runtime.pool import Pool
from tests.app.scripted import client, settle, until
from tests.app.test_streaming_http import Call
from tests.unit.runtime.fakes import StreamFake

ONE = fw.WarmPool(min_containers=1, max_containers=1)


def app_of(route: fw.Route, generation: fw.Generation, warm: fw.WarmPool = ONE) -> fw.App:
    app = fw.App("adm")

    @app.endpoint(route=route, warm=warm, generation=generation)
    async def gen(model, text: str):
        yield text

    return app


async def started(app: fw.App, tmp_path, machine_cap: int = 8
                  ) -> tuple[Pool, StreamFake, ManualClock]:
    clock = ManualClock()
    slots = app["gen"].generation.max_sequences
    pool = Pool(app, "app.py", str(tmp_path), clock=clock, tick_s=None,
                make_container=lambda ep: StreamFake(ep, clock, slots=slots))
    pool.machine_cap = machine_cap
    await pool.start()
    (c,) = pool.containers["gen"]
    c.become_ready()
    await settle()
    return pool, c, clock


def body(*inputs) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()


async def streaming_one(asgi, c: StreamFake) -> Call:
    """A first request, streaming on the container (its first chunk sent)."""
    call = Call(asgi, "/v1/gen", body("hello"), {"accept": "text/event-stream"})
    await until(lambda: c.sequences)
    c.chunk(next(iter(c.sequences)), {"text": "a", "tokens": 1})
    status, _ = await call.start()
    assert status == 200
    return call


async def finish(call: Call, c: StreamFake) -> bytes:
    for item_id in list(c.sequences):
        c.end(item_id)
    rest = await call.rest()
    await call.task
    return rest


def test_a_full_container_and_no_queue_room_sheds_503_with_retry_after(tmp_path):
    app = app_of(fw.Route(timeout_s=30.0, max_queue=1, spill=()),
                 fw.Generation(max_sequences=1))

    async def go():
        pool, c, _ = await started(app, tmp_path)
        asgi = make_asgi_app(app, pool, clock=pool.clock)
        call = await streaming_one(asgi, c)
        async with client(asgi) as http:
            shed = await http.post("/v1/gen", content=body("again"))
        rest = await finish(call, c)
        await pool.stop()
        return shed, rest

    shed, rest = asyncio.run(asyncio.wait_for(go(), 20))
    assert shed.status_code == 503 and shed.headers["x-floodway-decision"] == "shed"
    assert 1 <= int(shed.headers["retry-after"]) <= 60
    assert "queue full" in shed.json()["error"]["message"]
    assert rest.endswith(b"data: [DONE]\n\n")       # the first one was not disturbed


def test_no_first_token_before_the_deadline_spills_async_and_a_later_deadline_queues(
        tmp_path):
    app = app_of(fw.Route(timeout_s=30.0, spill=("async",)),
                 fw.Generation(max_sequences=1, max_new_tokens=256))

    async def go():
        pool, c, _ = await started(app, tmp_path)
        jobs = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=pool.clock)
        asgi = make_asgi_app(app, pool, jobs=jobs, clock=pool.clock)
        call = await streaming_one(asgi, c)
        async with client(asgi) as http:
            # The running sequence has 255 tokens to go (about 5.6 s at the prior's step):
            # a first token within 200 ms cannot be had.
            spilled = await http.post("/v1/gen", content=body("soon"),
                                      headers={"X-Deadline-Ms": "200"})
            queued = asyncio.ensure_future(http.post(
                "/v1/gen", content=body("later"), headers={"X-Deadline-Ms": "20000"}))
            await until(lambda: pool.endpoints["gen"].batcher.queued_rows == 1)
            await finish(call, c)
            await until(lambda: c.sequences)
            (item_id,) = c.sequences
            c.chunk(item_id, "later")
            c.end(item_id)
            later = await queued
        jobs.store.close()
        await pool.stop()
        return spilled, later

    spilled, later = asyncio.run(asyncio.wait_for(go(), 20))
    assert spilled.status_code == 202 and spilled.headers["x-floodway-decision"] == \
        "spill_async"
    assert spilled.headers["location"].startswith("/v1/jobs/")
    assert later.status_code == 200 and later.headers["x-floodway-decision"] == "queue"
    assert later.json() == {"outputs": ["later"]}


@pytest.mark.parametrize("accept", ["text/event-stream", "application/json"])
def test_a_sequence_over_a_containers_kv_cache_is_413_before_any_work(tmp_path, accept):
    app = app_of(fw.Route(timeout_s=5.0), fw.Generation(kv_cache_tokens=300))

    async def go():
        pool, c, _ = await started(app, tmp_path)
        asgi = make_asgi_app(app, pool, clock=pool.clock)
        async with client(asgi) as http:
            # 800 characters: about 200 prompt tokens, + 256 new ones > 300
            r = await http.post("/v1/gen", content=body("x" * 800),
                                headers={"Accept": accept})
        sent = dict(c.sequences)
        await pool.stop()
        return r, sent

    r, sent = asyncio.run(asyncio.wait_for(go(), 20))
    assert r.status_code == 413 and sent == {}
    error = r.json()["error"]
    assert error["field"] == "inputs" and "KV cache" in error["message"]
    assert "200 + max_new_tokens 256 = 456" in error["message"]


def test_what_the_pools_real_cap_can_never_run_is_413_and_never_a_job_that_never_starts(
        tmp_path):
    # Up to 4 containers of 2 sequences by its definition, but the cores take one: a
    # request runs on 1 x 2 slots or waits in the queue's share for its priority (0.9 x 8
    # = 7 at normal, 0.5 x 8 = 4 for a job, which runs at low priority).
    app = app_of(fw.Route(timeout_s=30.0, max_queue=8, spill=("async",)),
                 fw.Generation(max_sequences=2, max_new_tokens=256),
                 warm=fw.WarmPool(min_containers=1, max_containers=4))

    async def go():
        pool, c, _ = await started(app, tmp_path, machine_cap=1)
        jobs = LocalJobs(app, pool, tmp_path / "jobs.sqlite3", clock=pool.clock)
        asgi = make_asgi_app(app, pool, jobs=jobs, clock=pool.clock)
        call = await streaming_one(asgi, c)
        async with client(asgi) as http:
            sync_over = await http.post("/v1/gen", content=body(*"abcdefgh"))
            job_over = await http.post("/v1/gen/jobs", content=body(*"abcde"))
            # 5 sequences fit the sync queue's share, not a job's: no first token within
            # 200 ms, and no async spill to a job that could never start either.
            not_spilled = await http.post("/v1/gen", content=body(*"abcde"),
                                          headers={"X-Deadline-Ms": "200"})
            job_ok = await http.post("/v1/gen/jobs", content=body(*"abcd"))
        await finish(call, c)
        counts = jobs.store.counts()
        jobs.store.close()
        await pool.stop()
        return sync_over, job_over, not_spilled, job_ok, counts

    sync_over, job_over, not_spilled, job_ok, counts = asyncio.run(asyncio.wait_for(go(), 20))
    assert sync_over.status_code == 413 and "retry-after" not in sync_over.headers
    message = sync_over.json()["error"]["message"]
    assert "makes 8 sequences" in message and "at most 7 can ever be admitted" in message
    assert "1 containers x 2 sequences" in message
    assert job_over.status_code == 413 and job_over.json()["error"]["field"] == "inputs"
    assert "as a job" in job_over.json()["error"]["message"]
    assert "at most 4 can ever be admitted" in job_over.json()["error"]["message"]
    assert not_spilled.status_code == 503 and "retry-after" in not_spilled.headers
    assert job_ok.status_code == 202 and counts["queued"] == 1   # only the one that fits
