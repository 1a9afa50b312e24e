"""``GET /openapi.json`` in process: the document of the app the router serves, open as
/healthz is (keys or not), behind a key with `private_detail` as /metrics is; and a model id
with a "/" in it answered in OpenAI's error shape, as the document says of that route."""

from __future__ import annotations

import asyncio

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.http.openapi import build_openapi
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend, client

KEY = "k-123"
app = fw.App("t")


@app.endpoint()
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def get(path: str, *, private: bool = False, keys: tuple[str, ...] = (KEY,),
        headers: dict[str, str] | None = None):
    clock = ManualClock()
    asgi = make_asgi_app(app, ScriptedBackend(app, clock), api_keys=ApiKeys(list(keys)),
                         clock=clock, private_detail=private)

    async def go():
        async with client(asgi) as c:
            return await c.get(path, headers=headers or {})
    return asyncio.run(go())


def test_the_document_is_open_and_describes_this_router():
    for keys in ((), (KEY,)):
        r = get("/openapi.json", keys=keys)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == build_openapi(app, keyed=bool(keys), jobs=False)
        assert r.json()["info"]["title"] == "floodway router: t"


def test_with_private_detail_the_document_needs_a_key():
    refused = get("/openapi.json", private=True)
    assert refused.status_code == 401 and refused.headers["www-authenticate"]
    assert refused.json()["error"]["type"] == "unauthorized"
    wrong = get("/openapi.json", private=True, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = get("/openapi.json", private=True, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and "/v1/upper" in ok.json()["paths"]
    # No keys configured: nothing to show a key for, nothing refused (as /metrics).
    assert get("/openapi.json", private=True, keys=()).status_code == 200


def test_a_model_id_with_a_slash_is_answered_in_openais_shape():
    r = get("/v1/models/org%2Fname", keys=())
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_docs_is_swagger_ui_over_the_document_behind_a_key_as_the_document():
    page = get("/docs", keys=())
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'url: "/openapi.json"' in page.text and "swagger-ui-bundle.js" in page.text
    assert "<title>floodway router: t</title>" in page.text
    assert get("/docs").status_code == 200           # keys alone: open, as the document
    assert get("/docs", private=True).status_code == 401
    keyed = get("/docs", private=True, headers={"Authorization": f"Bearer {KEY}"})
    assert keyed.status_code == 200 and "/openapi.json" in keyed.text
