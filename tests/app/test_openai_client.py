"""The official `openai` client against the router in process (ASGI): what it sends is
understood, what the router answers parses into its types, and errors are raised as its
own exception classes."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.http.app import make_asgi_app
from floodway.routers.admission import ApiKeys
from tests.app.scripted import ScriptedBackend

app = fw.App("oac")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              route=fw.Route(tenant_rate_per_s=1, tenant_burst=2))
def embed(model, texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 0.25, -1.5] for t in texts]


def openai_client(asgi, key: str = "s3cret") -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")
    # max_retries=0: a 429 must reach the test, not be retried by the client
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key=key, http_client=http,
                              max_retries=0)


@pytest.fixture
def asgi():
    clock = ManualClock()
    return make_asgi_app(app, ScriptedBackend(app, clock), clock=clock,
                         api_keys=ApiKeys(frozenset({"s3cret"})))


def test_models_list(asgi):
    async def go():
        async with openai_client(asgi) as c:
            return [m async for m in c.models.list()]

    models = asyncio.run(go())
    assert [m.id for m in models] == ["embed"] and models[0].owned_by == "floodway"


def test_models_retrieve(asgi):
    async def go():
        async with openai_client(asgi) as c:
            found = await c.models.retrieve("embed")
            try:
                await c.models.retrieve("nope")
            except openai.NotFoundError as e:
                return found, e
        raise AssertionError("an unknown model was found")

    found, missing = asyncio.run(go())
    assert (found.id, found.object, found.owned_by) == ("embed", "model", "floodway")
    assert missing.code == "model_not_found" and missing.param == "model"


def test_embeddings_create_in_base64_and_floats(asgi):
    """The client asks for base64 unless told otherwise, and decodes it itself."""
    async def go():
        async with openai_client(asgi) as c:
            return (await c.embeddings.create(model="embed", input=["ab", "c"]),
                    await c.embeddings.create(model="embed", input="abcd",
                                              encoding_format="float"))

    packed, floats = asyncio.run(go())
    assert [d.embedding for d in packed.data] == [[2.0, 0.25, -1.5], [1.0, 0.25, -1.5]]
    assert [d.index for d in packed.data] == [0, 1] and packed.model == "embed"
    assert floats.data[0].embedding == [4.0, 0.25, -1.5]
    assert floats.usage.prompt_tokens == 0 and floats.usage.total_tokens == 0


def test_errors_are_the_clients_exception_classes(asgi):
    async def go():
        out = []
        async with openai_client(asgi) as c:
            for call in (lambda: c.embeddings.create(model="nope", input="a"),
                         lambda: c.embeddings.create(model="embed", input=[[1, 2]]),
                         lambda: c.embeddings.create(model="embed", input="a",
                                                     dimensions=2),
                         lambda: c.embeddings.create(model="embed", input="a"),
                         lambda: c.embeddings.create(model="embed", input="a")):
                try:
                    await call()
                    out.append(None)
                except openai.APIStatusError as e:
                    out.append(e)
        async with openai_client(asgi, key="wrong") as c:
            try:
                await c.models.list()
            except openai.APIStatusError as e:
                out.append(e)
        return out

    missing, tokens, dims, ok, limited, denied = asyncio.run(go())
    assert isinstance(missing, openai.NotFoundError) and missing.code == "model_not_found"
    assert isinstance(tokens, openai.BadRequestError) and tokens.param == "input"
    assert isinstance(dims, openai.BadRequestError) and dims.param == "dimensions"
    assert ok is None   # the burst's second request
    assert isinstance(limited, openai.RateLimitError)
    assert limited.response.headers["retry-after"] == "1"
    assert isinstance(denied, openai.AuthenticationError)
    assert "not an accepted API key" in denied.message


rows_app = fw.App("rows")


@rows_app.endpoint(model=fw.HFModel("org/m", revision="b" * 40))
def tags(model, texts: list[str]) -> list[dict[str, str]]:
    return [{"label": t} for t in texts]


@rows_app.endpoint(model=fw.HFModel("org/m", revision="b" * 40))
def untold(model, texts: list[str]) -> list:
    return [{"label": t} for t in texts]


def test_embeddings_of_a_model_that_returns_no_vectors_are_a_400_the_client_does_not_retry():
    """`-> list[dict[str, str]]` is refused before anything runs; an endpoint whose
    annotation cannot tell runs once, and its non-vector answer is a 400 too (the client
    retries a 5xx: the model would run three times)."""
    clock = ManualClock()
    backend = ScriptedBackend(rows_app, clock)
    asgi = make_asgi_app(rows_app, backend, clock=clock)

    async def go():
        out = []
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")
        async with openai.AsyncOpenAI(base_url="http://t/v1", api_key="k", http_client=http,
                                      max_retries=2) as c:
            for model in ("tags", "untold"):
                try:
                    await c.embeddings.create(model=model, input="a", encoding_format="float")
                except openai.APIStatusError as e:
                    out.append((e, len(backend.calls)))
        return out

    (up_front, calls_before), (after, calls_after) = asyncio.run(go())
    assert isinstance(up_front, openai.BadRequestError) and up_front.param == "model"
    assert "returns list[dict[str, str]]" in up_front.message and calls_before == 0
    assert isinstance(after, openai.BadRequestError) and after.param == "model"
    assert calls_after == 1   # ran once, not retried
