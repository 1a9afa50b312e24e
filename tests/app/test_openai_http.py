"""The OpenAI-compatible routes in process (ASGI) over a scripted backend and a manual
clock: models, embeddings through admission and decide(), and OpenAI's error shape (the
native routes keep theirs)."""

from __future__ import annotations

import asyncio
import base64
import struct
from dataclasses import replace

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.functions.prompts import Prompt
from floodway.http.app import make_asgi_app
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend, advance_when, client

app = fw.App("oa")
KEY = {"Authorization": "Bearer s3cret"}


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.2, max_inputs=3, tenant_rate_per_s=1,
                             tenant_burst=3))
def embed(model, texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), -0.5] for t in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(timeout_s=0.2, spill=("async",)))
def busy(model, texts: list[str]) -> list[list[float]]:
    return [[1.0] for _ in texts]


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(max_body_bytes=1024))
def shout(model, texts: list[str]) -> list:   # what it returns cannot be told up front
    return [t.upper() for t in texts]


@app.endpoint()
async def gen(model, prompt: Prompt):
    yield {"text": "hi", "tokens": 1}


class SpillingBackend(ScriptedBackend):
    """The scripted backend, its snapshot carrying the route's spill targets."""

    def snapshot(self, endpoint):
        return replace(super().snapshot(endpoint), spill=app.endpoints[endpoint].route.spill)


def setup(**kw):
    clock = ManualClock()
    backend = SpillingBackend(app, clock)
    return clock, backend, make_asgi_app(app, backend, clock=clock, **kw)


# A lone surrogate (not valid Unicode), as only a JSON escape can carry it.
SURROGATE = b'{"model": "embed", "input": ["ok", "\\ud800"]}'


def run(asgi, *requests):
    """Each (method, path, json, headers) in turn (json None on a POST: SURROGATE); their
    answers."""
    async def go():
        async with client(asgi) as c:
            return [await c.request(m, p, json=j, headers=h or {}) if j is not None or m == "GET"
                    else await c.request(m, p, content=SURROGATE,
                                         headers={"Content-Type": "application/json"})
                    for m, p, j, h in requests]
    return asyncio.run(go())


def post(path, json, headers=None):
    return ("POST", path, json, headers)


def error_of(r, status, kind, param, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["param"], err["code"]) == (kind, param, code), err
    return err["message"]


def test_models_lists_every_endpoint():
    _, _, asgi = setup()
    [r] = run(asgi, ("GET", "/v1/models", None, None))
    assert r.status_code == 200
    data = r.json()["data"]
    assert [m["id"] for m in data] == ["busy", "embed", "gen", "shout"]
    assert all(m["object"] == "model" and m["owned_by"] == "floodway"
               and isinstance(m["created"], int) for m in data)


def test_one_model_by_its_id_and_an_unknown_one_is_model_not_found():
    _, _, asgi = setup(api_keys=ApiKeys(frozenset({"s3cret"})))
    one, unknown, denied = run(asgi, ("GET", "/v1/models/gen", None, KEY),
                               ("GET", "/v1/models/nope", None, KEY),
                               ("GET", "/v1/models/gen", None, None))
    assert one.status_code == 200
    body = one.json()
    assert (body["id"], body["object"], body["owned_by"]) == ("gen", "model", "floodway")
    assert isinstance(body["created"], int)
    assert "no endpoint 'nope'; endpoints: busy, embed, gen, shout" in error_of(
        unknown, 404, "invalid_request_error", "model", "model_not_found")
    error_of(denied, 401, "authentication_error", "Authorization", "invalid_api_key")


def test_a_missing_model_lists_the_endpoints_as_an_unknown_one_does():
    _, backend, asgi = setup()
    chat, embeddings = run(
        asgi, post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
        post("/v1/embeddings", {"input": "a"}))
    for r in (chat, embeddings):
        assert "one of busy, embed, gen, shout" in error_of(r, 400, "invalid_request_error",
                                                            "model", None)
    assert backend.calls == []


def test_embeddings_run_through_the_backend_in_order():
    _, backend, asgi = setup()
    floats, packed = run(asgi, post("/v1/embeddings", {"model": "embed", "input": ["ab", "c"]}),
                         post("/v1/embeddings", {"model": "embed", "input": "abc",
                                                 "encoding_format": "base64"}))
    assert floats.status_code == 200 and floats.headers["x-floodway-decision"] == "dispatch"
    body = floats.json()
    assert body["object"] == "list" and body["model"] == "embed"
    assert [d["embedding"] for d in body["data"]] == [[2.0, -0.5], [1.0, -0.5]]
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert body["usage"] == {"prompt_tokens": 0, "total_tokens": 0}
    raw = base64.b64decode(packed.json()["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (3.0, -0.5)
    # the same enqueue as the native route: the inputs and the route's deadline
    assert backend.calls == [("embed", ["ab", "c"], 0.2), ("embed", ["abc"], 0.2)]


def test_embeddings_are_counted_under_their_endpoint():
    _, _, asgi = setup()
    _, _, metrics = run(asgi, post("/v1/embeddings", {"model": "embed", "input": "a"}),
                        post("/v1/embeddings", {"model": "nope", "input": "a"}),
                        ("GET", "/metrics", None, None))
    assert 'floodway_requests_total{endpoint="embed",outcome="ok"} 1.0' in metrics.text
    assert 'floodway_requests_total{endpoint="(unknown)",outcome="not_found"} 1.0' \
        in metrics.text


def test_unknown_and_wrong_kind_models():
    _, backend, asgi = setup()
    unknown, gen_model, strings, chat_on_embed = run(
        asgi, post("/v1/embeddings", {"model": "nope", "input": "a"}),
        post("/v1/embeddings", {"model": "gen", "input": "a"}),
        post("/v1/embeddings", {"model": "shout", "input": "a"}),
        post("/v1/chat/completions", {"model": "embed",
                                      "messages": [{"role": "user", "content": "x"}]}))
    assert "no endpoint 'nope'" in error_of(unknown, 404, "invalid_request_error", "model",
                                            "model_not_found")
    assert "not an embedding model" in error_of(gen_model, 400, "invalid_request_error",
                                                "model", None)
    assert "/v1/gen" in gen_model.json()["error"]["message"]
    # a str endpoint whose outputs are not vectors, found out only from its answer: a 400
    # (an openai client retries a 5xx), naming the model
    assert "answered input[0] with str" in error_of(strings, 400, "invalid_request_error",
                                                    "model", None)
    assert "not a text-generation model" in error_of(chat_on_embed, 400,
                                                     "invalid_request_error", "model", None)
    assert [c[0] for c in backend.calls] == ["shout"]   # refusals never reach the backend


def test_bad_bodies_and_headers_are_openai_400s():
    _, backend, asgi = setup()
    tokens, too_many, priority, item = run(
        asgi, post("/v1/embeddings", {"model": "embed", "input": [[1, 2]]}),
        post("/v1/embeddings", {"model": "embed", "input": ["a", "b", "c", "d"]}),
        post("/v1/embeddings", {"model": "embed", "input": "a"}, {"X-Priority": "urgent"}),
        ("POST", "/v1/embeddings", None, None))
    error_of(tokens, 400, "invalid_request_error", "input", None)
    assert "at most 3" in error_of(too_many, 413, "invalid_request_error", "input",
                                   "too_large")
    error_of(priority, 400, "invalid_request_error", "X-Priority", None)
    # the per-item validation of the native route (a lone surrogate), named input[1]
    assert "not valid Unicode" in error_of(item, 400, "invalid_request_error", "input[1]",
                                           None)
    assert backend.calls == []


def test_auth_is_the_native_routes_bearer_key():
    _, _, asgi = setup(api_keys=ApiKeys(frozenset({"s3cret"})))
    none, wrong, models, ok = run(
        asgi, post("/v1/embeddings", {"model": "embed", "input": "a"}),
        post("/v1/embeddings", {"model": "embed", "input": "a"}, {"Authorization": "Bearer x"}),
        ("GET", "/v1/models", None, None),
        post("/v1/embeddings", {"model": "embed", "input": "a"}, KEY))
    error_of(none, 401, "authentication_error", "Authorization", "invalid_api_key")
    error_of(wrong, 401, "authentication_error", "Authorization", "invalid_api_key")
    assert wrong.headers["www-authenticate"].startswith("Bearer")
    error_of(models, 401, "authentication_error", "Authorization", "invalid_api_key")
    assert ok.status_code == 200


def test_a_tenant_over_its_rate_gets_429_with_retry_after():
    _, _, asgi = setup()
    *fine, over = run(asgi, *[post("/v1/embeddings", {"model": "embed", "input": "a"})] * 4)
    assert [r.status_code for r in fine] == [200, 200, 200]
    error_of(over, 429, "rate_limit_error", None, "rate_limit_exceeded")
    assert over.headers["retry-after"] == "1"


@pytest.mark.parametrize("mode,status,code,retry", [
    ("unavailable", 503, "unavailable", "3"),
    ("raises", 500, "endpoint_error", None),
    ("slow", 504, "deadline_exceeded", None),
])
def test_backend_failures_in_openai_shape(mode, status, code, retry):
    clock, backend, asgi = setup()
    backend.mode = mode

    async def go():
        async with client(asgi) as c:
            answer = asyncio.ensure_future(
                c.post("/v1/embeddings", json={"model": "embed", "input": "a"}))
            if mode == "slow":
                await advance_when(clock, lambda: backend.calls, 0.25)
            return await answer

    r = asyncio.run(go())
    error_of(r, status, "server_error", None, code)
    assert r.headers.get("retry-after") == retry


def test_no_async_spill_a_request_that_cannot_be_served_in_time_is_shed():
    """An OpenAI client cannot follow a 202 job: where the native route would spill to the
    job queue, the OpenAI route sheds (503 + Retry-After)."""
    _, backend, asgi = setup()
    backend.free = 0   # every slot busy for 10 s; the deadline is 0.2 s
    [r] = run(asgi, post("/v1/embeddings", {"model": "busy", "input": "a"}))
    assert "over capacity" in error_of(r, 503, "server_error", None, "overloaded")
    assert r.headers["retry-after"] and r.headers["x-floodway-decision"] == "shed"
    assert backend.calls == []


def test_native_routes_keep_their_error_shape():
    _, _, asgi = setup()
    native, unknown_native = run(asgi, post("/v1/embed", {"input": [1]}),
                                 post("/v1/models", {"inputs": ["a"]}))
    assert native.status_code == 422
    assert native.json()["error"]["type"] == "invalid_request"
    assert "param" not in native.json()["error"]
    assert unknown_native.status_code == 404   # /v1/models is GET; no endpoint "models"
    assert unknown_native.json()["error"]["type"] == "not_found"


@pytest.mark.parametrize("name", ["models", "embeddings", "completions", "chat", "jobs"])
def test_route_names_are_reserved(name):
    other = fw.App("x")
    with pytest.raises(fw.ConfigError, match="router's own paths"):
        other.endpoint(name=name, model=fw.HFModel("org/m", revision="b" * 40))(
            lambda model, texts: texts)


def test_each_models_own_body_limit():
    """The body is read within the largest route's limit (the model is named inside it),
    then held to the named model's own."""
    _, backend, asgi = setup()
    text = "x" * 2000
    small, large = run(asgi, post("/v1/embeddings", {"model": "shout", "input": text}),
                       post("/v1/embeddings", {"model": "embed", "input": text}))
    assert "limit of model 'shout' is 1024" in error_of(small, 413, "invalid_request_error",
                                                        None, "too_large")
    assert large.status_code == 200 and [c[0] for c in backend.calls] == ["embed"]
