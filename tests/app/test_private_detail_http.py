"""/metrics and the detail of /readyz behind a key (`make_asgi_app(private_detail=True)`);
/healthz and /readyz's status stay open, as a load balancer's probe needs."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.http.app import make_asgi_app
from floodway.http.clock import ManualClock
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
