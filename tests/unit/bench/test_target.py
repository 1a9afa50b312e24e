"""What bench replays against: item types named as an app writes them, and a URL's endpoint
read from its router's /openapi.json before anything is sent (text to a text endpoint,
prompts to a prompt endpoint, a one-line refusal for an endpoint that takes neither)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import httpx
import numpy as np
import pytest

import floodway as fw
from floodway.bench import target
from floodway.bench.target import describe_schema, item_name, target_of
from floodway.deploy import NO_MODAL_ENV
from floodway.errors import FloodwayError
from floodway.http.openapi import build_openapi

app = fw.App("served")


@app.endpoint()
def embed(model, texts: list[str]) -> list[int]:
    return [len(t) for t in texts]


@app.endpoint()
def classify(model, xs: list[fw.Array[np.float32, (3, 224, 224)]]) -> list[int]:
    return [0 for _ in xs]


@app.endpoint()
def rerank(model, pairs: list[tuple[str, str]]) -> list[float]:
    return [0.0 for _ in pairs]


@app.endpoint(generation=fw.Generation(max_new_tokens=12))
async def talk(model, prompt: fw.Prompt):
    yield "x"


URL = "http://router.test"


@pytest.fixture
def router(monkeypatch):
    """httpx.get answers /openapi.json as a router serving `app` does; the requests seen."""
    seen: list[tuple[str, dict]] = []
    doc = build_openapi(app, keyed=False, jobs=True)

    def get(url: str, headers=None, timeout=None):
        seen.append((url, dict(headers or {})))
        return httpx.Response(200, json=doc, request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    return seen


def test_item_types_are_named_as_an_app_writes_them():
    assert item_name(fw.Array[np.float32, (3, 224, 224)]) == "fw.Array[np.float32, (3, 224, 224)]"
    assert item_name(fw.Array[np.uint8, (None,)]) == "fw.Array[np.uint8, (None,)]"
    assert item_name(fw.Image) == "fw.Image"
    assert item_name(fw.Prompt) == "fw.Prompt"
    assert item_name(str) == "str"
    assert item_name(tuple[str, str]) == "tuple[str, str] (text pairs)"
    assert item_name(tuple[fw.Image, str]) == "tuple[fw.Image, str]"
    assert item_name(dict[str, int | None]) == "dict[str, int | None]"
    assert item_name(Literal["a", "b"]) == "Literal['a', 'b']"
    assert item_name(Annotated[int, "meta"]) == "int"
    assert item_name(Any) == "Any"


def test_an_app_endpoint_that_takes_no_text_is_refused_naming_its_item_type(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv(NO_MODAL_ENV, "1")
    f = tmp_path / "arrays_app.py"
    f.write_text("import numpy as np\nimport floodway as fw\napp = fw.App('a')\n\n"
                 "@app.endpoint()\n"
                 "def score(model, xs: list[fw.Array[np.float32, (3, 224, 224)]]):\n"
                 "    return [0 for _ in xs]\n")
    with pytest.raises(FloodwayError) as e:
        target_of(str(f), None, None, None, 200)
    msg = str(e.value)
    assert "takes fw.Array[np.float32, (3, 224, 224)] items, not text" in msg
    assert "Annotated" not in msg and "--input-json" in msg


def test_a_url_endpoint_taking_arrays_is_refused_before_anything_is_sent(router):
    with pytest.raises(FloodwayError) as e:
        target_of(URL, "classify", None, None, 200, {"Authorization": "Bearer k"})
    msg = str(e.value)
    assert "endpoint classify at http://router.test takes a float32 array of shape " \
           "(3, 224, 224)" in msg and "not text" in msg and "--input-json" in msg
    assert router == [(f"{URL}/openapi.json", {"Authorization": "Bearer k"})]


def test_a_url_endpoint_says_what_it_takes(router):
    assert target_of(URL, "embed", None, None, 200).inputs.kind == "text"
    talk_ = target_of(URL + "/", "talk", None, None, 200)
    assert talk_.inputs.kind == "prompt" and talk_.inputs.max_new_tokens == 12
    assert talk_.url == URL
    with pytest.raises(FloodwayError, match=r"takes \[str, str\] \(text pairs\) items"):
        target_of(URL, "rerank", None, None, 200)
    with pytest.raises(FloodwayError, match="no endpoint 'embedd' .*its endpoints: classify, "
                                            "embed, rerank, talk"):
        target_of(URL, "embedd", None, None, 200)
    # an item of one's own is sent as given, whatever the endpoint takes
    own = target_of(URL, "classify", "[[0.5]]", None, 200)
    assert own.inputs.kind == "json" and own.inputs.json_item == [[0.5]]


def test_a_url_without_a_readable_document_is_sent_text(monkeypatch):
    def get(url: str, headers=None, timeout=None):
        return httpx.Response(401, json={"error": {"message": "no key"}},
                              request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    assert target_of(URL, "classify", None, None, 200).inputs.kind == "text"

    def refuse(url: str, headers=None, timeout=None):
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(httpx, "get", refuse)
    assert target.item_schema(URL, "classify", {}) is None


def test_schemas_are_described_in_a_few_words():
    assert describe_schema({"type": "string"}) == "str"
    assert describe_schema({"$ref": "#/components/schemas/Point"}) == "Point"
    assert describe_schema({"type": "integer"}) == '{"type":"integer"}'
    assert describe_schema({}) == "any JSON"
    assert len(describe_schema({"description": "x" * 500})) == 160
