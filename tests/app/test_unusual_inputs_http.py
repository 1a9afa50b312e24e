"""Inputs the worker pipe or a job row cannot carry, over HTTP (in process): a lone surrogate
anywhere in a body (an item, a key, as an escape or as the bytes that encode one) is a 4xx
naming where, on every route, before any work, and the endpoint goes on serving; an
unexpected error inside the router is still a JSON answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import floodway as fw
from floodway.codec import dumps
from floodway.core.clock import ManualClock
from floodway.functions.prompts import Prompt
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from tests.app.scripted import ScriptedBackend, client
from tests.app.streamed import Streamed

app = fw.App("unusual")
MODEL = fw.HFModel("org/m", revision="c" * 40)


@app.endpoint(model=MODEL, route=fw.Route(timeout_s=0.5))
def pair(model, pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{a}|{b}" for a, b in pairs]


@app.endpoint(model=MODEL, route=fw.Route(timeout_s=0.5))
def anyin(model, items: list[Any]) -> list[Any]:
    return [len(x) for x in items]


@app.endpoint(model=MODEL, route=fw.Route(timeout_s=0.5))
def vec(model, texts: list[str]) -> list[list[float]]:
    return [[1.0] for _ in texts]


@app.endpoint(generation=fw.Generation(max_new_tokens=8))
async def talk(model, prompt: Prompt):
    yield {"text": "x", "tokens": 1}


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


class Piped(ScriptedBackend):
    """Sends each request's inputs through the worker pipe's encoding first, as the local
    pool does (a string that is not valid Unicode cannot be encoded); streams play in the
    event loop."""

    def enqueue(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
        dumps(inputs)
        if self.app.endpoints[endpoint].streaming:
            self.calls.append((endpoint, inputs, timeout_s))
            return Streamed(endpoint, self.app.endpoints[endpoint].fn, inputs, self.clock)
        return super().enqueue(endpoint, inputs, timeout_s=timeout_s, priority=priority,
                               tenant=tenant)


ENCODED = b"\xed\xa0\x80"   # U+D800 as UTF-8 would encode it: not UTF-8 at all
SSE = {"accept": "text/event-stream"}
ASYNC = {"prefer": "respond-async"}
# (path, extra headers, body, the field named, the status)
EVERY_ROUTE = [
    ("/v1/anyin", {}, b'{"inputs": ["a"], "\\ud800": 1}', "\\ud800", 422),
    ("/v1/anyin", {}, b'{"\\udbff": ["a"]}', "\\udbff", 422),
    ("/v1/anyin", {}, b'{"inputs": ["ok", "a' + ENCODED + b'"]}', "inputs[1]", 422),
    ("/v1/anyin", {}, b'{"inputs": [{"k' + ENCODED + b'": 1}]}', "inputs[0]", 422),
    ("/v1/anyin/jobs", {}, b'{"inputs": ["a' + ENCODED + b'"]}', "inputs[0]", 422),
    ("/v1/anyin/jobs", {}, b'{"inputs": ["a"], "\\ud800": 1}', "\\ud800", 422),
    ("/v1/anyin", ASYNC, b'{"inputs": ["a' + ENCODED + b'"]}', "inputs[0]", 422),
    ("/v1/talk", SSE, b'{"inputs": [{"prompt": "a' + ENCODED + b'"}]}', "inputs[0].prompt",
     422),
    ("/v1/talk", {}, b'{"inputs": [{"prompt": "a"}], "\\ud800": 1}', "\\ud800", 422),
    ("/v1/embeddings", {}, b'{"model": "vec", "input": ["ok", "' + ENCODED + b'"]}',
     "input[1]", 400),
    ("/v1/embeddings", {}, b'{"model": "vec", "input": "a", "\\ud800": 1}', "\\ud800", 400),
    ("/v1/completions", {}, b'{"model": "talk", "prompt": "a", "\\udfff": 1}', "\\udfff",
     400),
    ("/v1/chat/completions", {}, b'{"model": "talk", "stream": true, "messages": [{"role": '
     b'"user", "content": "a' + ENCODED + b'"}]}', "messages[0].content", 400),
    ("/v1/chat/completions", {}, b'{"model": "talk", "messages": [{"role": "user", '
     b'"content": "a", "\\ud800": 1}]}', "messages[0]", 400),
]


@pytest.mark.parametrize("path, headers, body, field, status", EVERY_ROUTE)
def test_a_lone_surrogate_anywhere_is_a_4xx_naming_it_on_every_route(tmp_path, path, headers,
                                                                      body, field, status):
    clock = ManualClock()
    backend = Piped(app, clock)
    jobs = LocalJobs(app, backend, tmp_path / "jobs.sqlite3", clock=clock)
    asgi = make_asgi_app(app, backend, jobs=jobs, clock=clock)
    transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=False)

    async def go():
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(path, content=body,
                                headers={"content-type": "application/json", **headers})

    r = asyncio.run(go())
    assert r.status_code == status and r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err.get("field", err.get("param")) == field
    assert "not valid Unicode" in err["message"]
    assert backend.calls == []   # refused before any work
