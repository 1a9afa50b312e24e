"""Inputs the worker pipe or a job row cannot carry, over HTTP (in process): a lone surrogate
anywhere in an item is a 422 naming the item, on the sync and the job path, and the endpoint
goes on serving; an unexpected error inside the router is still a JSON answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import floodway as fw
from floodway.http.app import make_asgi_app
from floodway.http.clock import ManualClock
from floodway.jobs.local import LocalJobs
from tests.app.scripted import ScriptedBackend, client

app = fw.App("unusual")
MODEL = fw.HFModel("org/m", revision="c" * 40)


@app.endpoint(model=MODEL, route=fw.Route(timeout_s=0.5))
def pair(model, pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{a}|{b}" for a, b in pairs]


@app.endpoint(model=MODEL, route=fw.Route(timeout_s=0.5))
def anyin(model, items: list[Any]) -> list[Any]:
    return [len(x) for x in items]


# (path, body, the field named: the bad string's path, or the object whose key it is)
BAD = [("/v1/pair", b'{"inputs": [["a", "b"], ["\\ud800", "b"]]}', "inputs[1][0]"),
       ("/v1/pair/jobs", b'{"inputs": [["a", "b"], ["\\ud800", "b"]]}', "inputs[1][0]"),
       ("/v1/anyin", b'{"inputs": ["ok", {"\\udc00": 1}]}', "inputs[1]"),
       ("/v1/anyin/jobs", b'{"inputs": ["ok", {"\\udc00": 1}]}', "inputs[1]"),
       ("/v1/anyin/jobs", b'{"inputs": ["ok", {"k": ["\\udfff"]}]}', "inputs[1].k[0]")]


@pytest.mark.parametrize("path, body, field", BAD)
def test_a_lone_surrogate_in_an_item_is_422_and_the_endpoint_goes_on(tmp_path, path, body,
                                                                    field):
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock)
    asgi = make_asgi_app(app, backend, jobs=jobs, clock=clock)

    async def go():
        await jobs.start()
        try:
            async with client(asgi) as c:
                bad = await c.post(path, content=body,
                                   headers={"content-type": "application/json"})
                good_path = path.replace("/jobs", "")
                item = ["x", "y"] if "pair" in path else "xy"
                good = await c.post(good_path, json={"inputs": [item]})
                job = await c.post(good_path + "/jobs", json={"inputs": [item]})
                url = job.headers["location"]
                done: dict = {}

                async def finished() -> bool:
                    done.update((await c.get(url)).json())
                    return done["status"] in ("succeeded", "failed")

                async with asyncio.timeout(20):   # a guard against a hang, not a wait
                    while not await finished():
                        await asyncio.sleep(0)
                return bad, good, job, done
        finally:
            await jobs.stop()

    bad, good, job, done = asyncio.run(go())
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/json"
    assert bad.json()["error"]["field"] == field
    assert "not valid Unicode" in bad.json()["error"]["message"]
    assert good.status_code == 200 and job.status_code == 202
    assert done["status"] == "succeeded" and done["outputs"] == good.json()["outputs"]
    assert len(backend.calls) == 2   # the refused request did no work


def test_an_unexpected_error_in_the_router_is_a_json_500():
    clock = ManualClock()
    backend = ScriptedBackend(app, clock)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the router")

    backend.enqueue = broken
    asgi = make_asgi_app(app, backend, clock=clock)
    transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=False)

    async def go():
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post("/v1/anyin", json={"inputs": ["a"]})

    r = asyncio.run(go())
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["type"] == "internal_error"
    assert "a bug in the router" not in r.text   # internals stay in the log
