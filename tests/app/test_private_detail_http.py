"""/metrics and the detail of /readyz behind a key (`make_asgi_app(private_detail=True)`);
/healthz and /readyz's status stay open, as a load balancer's probe needs."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend, client

KEY = "k-123"


def app() -> fw.App:
    a = fw.App("t")
    a.endpoint(name="upper")(lambda model, texts: [t.upper() for t in texts])
    return a


def answers(private: bool, keys: tuple[str, ...] = (KEY,)) -> dict[str, tuple[int, object]]:
    async def go():
        a, clock = app(), ManualClock()
        asgi = make_asgi_app(a, ScriptedBackend(a, clock), api_keys=ApiKeys(list(keys)),
                             clock=clock, private_detail=private)
        out = {}
        async with client(asgi) as cl:
            for name, path, headers in (
                    ("health", "/healthz", {}), ("ready", "/readyz", {}),
                    ("ready_keyed", "/readyz", {"authorization": f"Bearer {KEY}"}),
                    ("metrics", "/metrics", {}),
                    ("metrics_keyed", "/metrics", {"authorization": f"Bearer {KEY}"}),
                    ("metrics_bad", "/metrics", {"authorization": "Bearer nope"})):
                r = await cl.get(path, headers=headers)
                body = r.json() if "json" in r.headers.get("content-type", "") else r.text
                out[name] = (r.status_code, body)
        return out

    return asyncio.run(go())


def test_private_detail_needs_a_key_for_metrics_and_readiness_detail():
    out = answers(private=True)
    assert out["health"][0] == 200
    assert out["ready"][1] == {"ready": out["ready_keyed"][1]["ready"]}
    assert "endpoints" in out["ready_keyed"][1]
    assert out["metrics"][0] == 401 and out["metrics_bad"][0] == 401
    assert out["metrics_keyed"][0] == 200 and "# HELP floodway_" in out["metrics_keyed"][1]


def test_without_the_option_detail_stays_open():
    out = answers(private=False)
    assert out["metrics"][0] == 200 and "endpoints" in out["ready"][1]


def test_an_unknown_endpoint_without_a_key_is_401_and_names_no_endpoint():
    async def go():
        a, clock = app(), ManualClock()
        asgi = make_asgi_app(a, ScriptedBackend(a, clock), api_keys=ApiKeys([KEY]),
                             clock=clock, private_detail=True)
        async with client(asgi) as cl:
            bare = await cl.post("/v1/nope", json={"inputs": ["a"]})
            keyed = await cl.post("/v1/nope", json={"inputs": ["a"]},
                                  headers={"authorization": f"Bearer {KEY}"})
            return bare, keyed

    bare, keyed = asyncio.run(go())
    assert bare.status_code == 401 and "upper" not in bare.text
    assert keyed.status_code == 404 and "upper" in keyed.json()["error"]["message"]


def test_another_tenants_job_is_404_expired_or_not(tmp_path):
    other = {"authorization": "Bearer k-other"}
    mine = {"authorization": f"Bearer {KEY}"}

    async def go():
        a, clock = app(), ManualClock()
        backend = ScriptedBackend(a, clock)
        jobs = LocalJobs(a, backend, tmp_path / "jobs.sqlite3", clock=clock, ttl_s=60)
        asgi = make_asgi_app(a, backend, api_keys=ApiKeys([KEY, "k-other"]), jobs=jobs,
                             clock=clock, private_detail=True)
        await jobs.start()
        try:
            async with client(asgi) as cl:
                loc = (await cl.post("/v1/upper/jobs", json={"inputs": ["a"]},
                                     headers=mine)).headers["location"]
                async with asyncio.timeout(20):   # a guard against a hang, not a wait
                    while (await cl.get(loc, headers=mine)).json()["status"] != "succeeded":
                        await asyncio.sleep(0)
                done_other = await cl.get(loc, headers=other)
                clock.advance(61)   # past the job's TTL
                return done_other, await cl.get(loc, headers=other), \
                    await cl.get(loc, headers=mine)
        finally:
            await jobs.stop()

    done_other, expired_other, expired_mine = asyncio.run(go())
    assert done_other.status_code == 404 and expired_other.status_code == 404
    assert expired_other.json() == done_other.json()   # the same answer: nothing told
    assert expired_mine.status_code == 410
