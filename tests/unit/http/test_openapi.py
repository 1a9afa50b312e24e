"""The router's OpenAPI document (`floodway.http.openapi.build_openapi`): valid OpenAPI 3.1
with every reference resolved, item and output schemas from the endpoint functions'
annotations that accept what the router accepts (checked against `parse_predict` on the
same items), and the statuses, media types, headers and security of each route as the
router was made (keys, a job queue, private detail)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import jsonschema_rs
import numpy as np
import PIL.Image
import pytest
import schemathesis

import floodway as fw
from floodway.errors import RequestError
from floodway.functions.arrays import to_wire
from floodway.http.openapi import build_openapi
from floodway.jobs.job import KEY_RE
from floodway.routers.admission import Priority, parse_deadline
from floodway.routers.schema import parse_predict

app = fw.App("doc")


@app.endpoint(route=fw.Route(max_inputs=16))
def embed(model, texts: list[str]) -> list[list[float]]:
    return [[1.0] for _ in texts]


@app.endpoint()
def rerank(model, pairs: list[tuple[str, str]]) -> list[float]:
    return [0.0 for _ in pairs]


@app.endpoint()
def picture(model, images: list[fw.Image]) -> np.ndarray:
    return np.zeros(len(images))


@app.endpoint()
def grid(model, arrays: list[fw.Array[np.uint8, (2, None)]]):
    return [0 for _ in arrays]


@app.endpoint()
def anything(model, items):
    return items


@app.endpoint(generation=fw.Generation(max_new_tokens=16))
async def talk(model, prompt: fw.Prompt):
    yield "x"


def doc(**kw: Any) -> dict[str, Any]:
    return build_openapi(app, **{"keyed": False, "jobs": True, **kw})


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [*([node["$ref"]] if "$ref" in node else []),
                *(r for v in node.values() for r in refs(v))]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def resolve(d: dict[str, Any], ref: str) -> Any:
    node: Any = d
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def item_schema(d: dict[str, Any], name: str) -> Any:
    body = d["paths"][f"/v1/{name}"]["post"]["requestBody"]["content"]["application/json"]
    return body["schema"]["properties"]["inputs"]


def validator(d: dict[str, Any], schema: Any) -> Any:
    return jsonschema_rs.validator_for({**schema, "components": d["components"]})


def png(size: tuple[int, int] = (3, 2)) -> str:
    buf = io.BytesIO()
    PIL.Image.new("RGB", size, (1, 2, 3)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("kw", [{}, {"keyed": True, "jobs": False, "private_detail": True}])
def test_the_document_is_valid_openapi_3_1_and_every_reference_resolves(kw):
    d = doc(**kw)
    schemathesis.openapi.from_dict(json.loads(json.dumps(d))).validate()   # 3.1's schema
    assert d["openapi"] == "3.1.0"
    for ref in refs(d):
        assert resolve(d, ref) is not None, ref
    ids = [op["operationId"] for item in d["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_every_route_is_described():
    paths = doc()["paths"]
    names = ["anything", "embed", "grid", "picture", "rerank", "talk"]
    assert set(paths) == {
        *(f"/v1/{n}" for n in names), *(f"/v1/{n}/jobs" for n in names), "/v1/jobs/{job_id}",
        "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/v1/models",
        "/v1/models/{model}", "/v1/embeddings", "/v1/completions", "/v1/chat/completions"}


def test_item_schemas_follow_the_annotations():
    d = doc()
    assert item_schema(d, "embed")["items"] == {"type": "string"}
    assert item_schema(d, "embed")["maxItems"] == 16 and item_schema(d, "embed")["minItems"] == 1
    assert item_schema(d, "rerank")["items"]["prefixItems"] == [{"type": "string"}] * 2
    assert item_schema(d, "picture")["items"]["contentEncoding"] == "base64"
    nested, b64 = item_schema(d, "grid")["items"]["anyOf"]
    assert (nested["minItems"], nested["maxItems"]) == (2, 2)
    assert nested["items"]["items"] == {"type": "integer", "minimum": 0, "maximum": 255}
    assert b64["properties"]["dtype"] == {"const": "uint8"}
    assert item_schema(d, "anything")["items"] == {}


@pytest.mark.parametrize("name, item", [
    ("embed", "text"), ("embed", 3), ("rerank", ["q", "p"]), ("rerank", ["q"]),
    ("picture", png()), ("picture", "data:image/png;base64," + png()), ("picture", 5),
    ("grid", [[1, 2], [3, 4]]), ("grid", [[1, 2, 3], [4, 5, 6]]), ("grid", [[1, 2]]),
    ("grid", [[256, 0], [0, 0]]), ("grid", to_wire(np.ones((2, 3), np.uint8))),
    ("grid", to_wire(np.ones((2, 3), np.int8))), ("grid", {**to_wire(np.ones((2, 1), np.uint8)),
                                                          "extra": 1}),
    ("talk", {"prompt": "hi"}), ("talk", {"messages": [{"role": "developer", "content": "x"}]}),
    ("talk", {"prompt": "hi", "messages": [{"role": "user", "content": "x"}]}),
    ("talk", {"temperature": 0.5}), ("talk", {"prompt": "hi", "max_new_tokens": 0}),
    ("talk", {"messages": [{"role": "robot", "content": "x"}]}),
    ("talk", {"prompt": None, "messages": [{"role": "user", "content": "x"}]}),
    ("talk", {"prompt": "hi", "max_new_tokens": 17}), ("talk", "hi"),
    ("anything", {"any": ["thing"]}),
])
def test_an_item_fits_the_schema_exactly_when_the_router_takes_it(name, item):
    """What the schema can say, it says as the router does: an item of the schema is
    taken, one outside it refused (a valid PNG's bytes are beyond any schema: both kinds
    of picture item here are real images or not strings at all)."""
    d = doc()
    fits = validator(d, item_schema(d, name)).is_valid([item])
    ep = app[name]
    try:
        parse_predict(json.dumps({"inputs": [item]}).encode(), ep.input_type)
        taken = not (ep.generation is not None and isinstance(item, dict)
                     and (item.get("max_new_tokens") or 0) > ep.generation.max_new_tokens)
    except RequestError:
        taken = False
    assert fits == taken


def test_outputs_follow_a_list_return_annotation_and_are_any_json_otherwise():
    d = doc()

    def outputs(name: str) -> Any:
        ok = d["paths"][f"/v1/{name}"]["post"]["responses"]["200"]["content"]
        return ok["application/json"]["schema"]["anyOf"][0]["properties"]["outputs"]["items"]

    assert outputs("embed") == {"type": "array", "items": {"type": "number"}}
    assert outputs("rerank") == {"type": "number"}
    for name in ("picture", "grid", "talk"):   # np.ndarray, none, a stream
        assert outputs(name) == {}


def test_answers_follow_how_the_router_was_made():
    queued, keyed = doc(), doc(keyed=True, jobs=False, private_detail=True)
    predict = queued["paths"]["/v1/embed"]["post"]
    assert {"202", "409"} <= set(predict["responses"]) and "501" not in predict["responses"]
    assert "401" not in predict["responses"] and {} in predict["security"]
    no_queue = keyed["paths"]["/v1/embed"]["post"]
    assert {"401", "501"} <= set(no_queue["responses"])
    assert not {"202", "409"} & set(no_queue["responses"])
    assert no_queue["security"] == [{"bearer": []}]
    assert keyed["paths"]["/v1/embed/jobs"]["post"]["responses"].keys() >= {"501"}
    for d, secured in ((queued, []), (keyed, [{"bearer": []}])):
        for path in ("/metrics", "/openapi.json"):
            assert d["paths"][path]["get"]["security"] == secured
            assert ("401" in d["paths"][path]["get"]["responses"]) == bool(secured)
    assert queued["paths"]["/healthz"]["get"]["security"] == []


def test_a_streaming_endpoint_answers_sse_ndjson_or_json_and_406():
    d = doc()
    talk_op, embed_op = (d["paths"][f"/v1/{n}"]["post"] for n in ("talk", "embed"))
    assert set(talk_op["responses"]["200"]["content"]) == {
        "application/json", "text/event-stream", "application/x-ndjson"}
    assert "406" in talk_op["responses"] and "406" not in embed_op["responses"]
    event = talk_op["responses"]["200"]["content"]["text/event-stream"]["schema"]
    done, payload = event["properties"]["data"]["anyOf"]
    assert done == {"const": "[DONE]"}
    check = validator(d, payload["contentSchema"])
    assert check.is_valid({"index": 0, "chunk": "x"})
    assert check.is_valid({"index": 1, "error": {"type": "input_error", "message": "m"}})
    assert not check.is_valid({"index": 0})


def test_error_answers_carry_their_shape_and_headers():
    d = doc()
    answers = d["components"]["responses"]
    for code in ("429", "503"):
        assert d["components"]["headers"]["Retry-After"]["required"]
        assert "Retry-After" in answers[f"Error{code}"]["headers"]
    error = validator(d, {"$ref": "#/components/schemas/floodway.Error"})
    assert error.is_valid({"error": {"type": "too_large", "message": "m", "field": "inputs"}})
    assert error.is_valid({"error": {"type": "endpoint_error", "message": "m"},
                           "outputs": [None, 1], "item_errors": [{"index": 0, "message": "m"}]})
    assert not error.is_valid({"error": {"message": "m"}})
    openai = d["paths"]["/v1/embeddings"]["post"]["responses"]
    assert openai["400"]["$ref"].endswith("OpenAIError400") and "422" not in openai
    accepted = d["paths"]["/v1/embed/jobs"]["post"]["responses"]["202"]
    assert accepted["headers"]["Location"] == {"$ref": "#/components/headers/Location"}
    assert d["components"]["headers"]["Location"]["required"]


def test_openai_bodies_name_the_models_each_route_serves():
    paths = doc()["paths"]

    def body(path: str) -> Any:
        return paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]

    assert body("/v1/embeddings")["properties"]["model"]["enum"] == ["embed"]
    for path in ("/v1/completions", "/v1/chat/completions"):
        assert body(path)["properties"]["model"]["enum"] == ["talk"]
        assert "user" in body(path)["properties"]   # accepted and ignored
    assert body("/v1/chat/completions")["additionalProperties"] is False
    empty = build_openapi(fw.App("none"), keyed=False, jobs=False)["paths"]
    model = empty["/v1/embeddings"]["post"]["requestBody"]["content"]["application/json"]
    assert model["schema"]["properties"]["model"] == {"type": "string", "title": "Model"}


def test_header_parameters_say_what_admission_takes():
    params = doc()["components"]["parameters"]
    top = params["X-Deadline-Ms"]["schema"]["maximum"]
    assert parse_deadline(str(top), default_s=1.0) == top / 1000
    with pytest.raises(RequestError):
        parse_deadline(str(top + 1), default_s=1.0)
    assert params["Idempotency-Key"]["schema"]["pattern"] == f"^{KEY_RE.pattern}$"
    priorities = params["X-Priority"]["schema"]["enum"]
    assert sorted(priorities) == sorted(p.name.lower() for p in Priority)
