"""The JSON Schemas of the router's OpenAPI document (`floodway.http.openapi`): items and
outputs derived from the endpoint functions' annotations, and the fixed shapes of the wire.

    type_schemas(types)   {key: (T, mode)} -> ({key: schema}, {name: shared definition})
    image_schema(spec), array_schema(spec)   an fw.Image / fw.Array item on the wire
    COMPONENTS            the fixed schemas (errors, jobs, readiness, stream events,
                          OpenAI's answers), under `ref(name)`
    HEADERS, PARAMETERS   the response headers and request header parameters

An item type's schema is pydantic's (``TypeAdapter(T).json_schema()``, JSON Schema 2020-12,
which OpenAPI 3.1 takes as it is), except for what pydantic cannot describe: an image item
(`ImageSpec`) and an array item (`ArraySpec`) are described from their spec, anywhere they
are nested; anything else pydantic cannot describe is ``{}`` (any JSON value), as is a type
pydantic cannot build a validator for. Shared definitions (pydantic models) are named as
pydantic names them; the fixed ones here carry a ``floodway.`` prefix, so the two never
clash.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue

from floodway.functions.items import ArraySpec, ImageSpec
from floodway.functions.prompts import ROLE_ALIASES, ROLES, Message, Prompt
from floodway.http.openai_wire import Message as WireMessage
from floodway.routers.decide import Action

REF_PREFIX = "#/components/schemas/"


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema `name`."""
    return {"$ref": REF_PREFIX + name}


def image_schema(spec: ImageSpec) -> JsonSchemaValue:
    """An image item: base64 text of an image file, or a data URL (`floodway.functions.
    images`); which bytes make a valid image no schema can say (the router checks the
    header: 422, 413 over a limit)."""
    return {"type": "string", "minLength": 1, "contentEncoding": "base64",
            "description": f"base64 text of a PNG, JPEG or WebP file, or a data URL "
                           f"data:image/<png|jpeg|webp>;base64,<text>; at most "
                           f"{spec.max_encoded_bytes:,} bytes decoded and {spec.max_pixels:,} "
                           f"pixels (413 beyond)"}


def _number(dtype: str) -> JsonSchemaValue:
    """One element of an array of `dtype`, as JSON: its kind and range."""
    t = np.dtype(dtype)
    if t.kind == "b":
        return {"type": "boolean"}
    if t.kind in "iu":
        info = np.iinfo(t)
        return {"type": "integer", "minimum": int(info.min), "maximum": int(info.max)}
    top = float(np.finfo(t).max)
    return {"type": "number", "minimum": -top, "maximum": top}


def array_schema(spec: ArraySpec) -> JsonSchemaValue:
    """An array item (`floodway.functions.arrays`): a nested list of `spec.shape` (an int
    axis fixed, None any length) of `spec.dtype`'s numbers, or ``{"b64", "dtype", "shape"}``
    (the little-endian C-order bytes, base64)."""
    nested = _number(spec.dtype)
    for d in reversed(spec.shape):
        nested = {"type": "array", "items": nested,
                  **({} if d is None else {"minItems": d, "maxItems": d})}
    dims = [{"type": "integer", "minimum": 0} if d is None else {"const": d}
            for d in spec.shape]
    shape: JsonSchemaValue = {"type": "array", "minItems": len(dims), "maxItems": len(dims)}
    if dims:
        shape["prefixItems"] = dims
    b64 = {"type": "object", "required": ["b64", "dtype", "shape"],
           "additionalProperties": False,
           "properties": {"b64": {"type": "string", "contentEncoding": "base64"},
                          "dtype": {"const": spec.dtype}, "shape": shape}}
    return {"anyOf": [nested, b64], "description": spec.describe() + ": a nested list, or "
            '{"b64", "dtype", "shape"} (little-endian, C order)'}


class ItemSchemaGenerator(GenerateJsonSchema):
    """pydantic's JSON Schema, with image and array items described from their spec, and
    what pydantic cannot describe as any JSON value rather than an error."""

    def function_plain_schema(self, schema: Any) -> JsonSchemaValue:
        validator = schema.get("function", {}).get("function")
        spec = getattr(validator, "__self__", None)
        if isinstance(spec, ImageSpec):
            return image_schema(spec)
        if isinstance(spec, ArraySpec):
            return array_schema(spec)
        return super().function_plain_schema(schema)

    def handle_invalid_for_json_schema(self, schema: Any, error_info: str) -> JsonSchemaValue:
        return {}

    def model_schema(self, schema: Any) -> JsonSchemaValue:
        """A model's schema, with what floodway's own models check in validators told
        too: a chat role is one of ROLES (or an alias), a Prompt has exactly one of
        ``prompt`` and ``messages``."""
        out = super().model_schema(schema)
        cls = schema.get("cls")
        props = out.get("properties", {})
        if cls in (Message, WireMessage) and "role" in props:
            props["role"] = {"enum": [*ROLES, *ROLE_ALIASES],
                             "description": "'developer' is taken as 'system'"}
        if cls is Prompt:
            out["oneOf"] = [_one_of(field, props) for field in ("prompt", "messages")]
        return out


def _one_of(field: str, props: dict[str, Any]) -> JsonSchemaValue:
    """The branch of a Prompt's schema where `field` (not null) is the one given: the
    other absent or null."""
    other = "messages" if field == "prompt" else "prompt"
    given = [s for s in props.get(field, {}).get("anyOf", []) if s.get("type") != "null"]
    return {"required": [field],
            "properties": {field: given[0] if given else {}, other: {"type": "null"}}}


def type_schemas(types: dict[str, tuple[Any, JsonSchemaMode]]
                 ) -> tuple[dict[str, JsonSchemaValue], dict[str, JsonSchemaValue]]:
    """{key: (T, "validation" | "serialization")} -> ({key: T's schema}, the definitions
    they share, by name; referenced as ``#/components/schemas/<name>``). A T pydantic
    cannot build (np.ndarray, an arbitrary class) is ``{}``."""
    built: list[tuple[str, JsonSchemaMode, TypeAdapter[Any]]] = []
    out: dict[str, JsonSchemaValue] = {}
    for key, (t, mode) in types.items():
        try:
            built.append((key, mode, TypeAdapter(t)))
        except Exception:  # noqa: BLE001 - any type pydantic cannot handle is described as {}
            out[key] = {}
    if built:
        found, defs = TypeAdapter.json_schemas(
            built, ref_template=REF_PREFIX + "{model}", schema_generator=ItemSchemaGenerator)
        out.update({key: schema for (key, _), schema in found.items()})
        return out, defs.get("$defs", {})
    return out, {}


def _obj(required: list[str], props: dict[str, Any], *, closed: bool = True,
         **extra: Any) -> JsonSchemaValue:
    return {"type": "object", "required": required, "properties": props,
            **({"additionalProperties": False} if closed else {}), **extra}


_STR, _INT0 = {"type": "string"}, {"type": "integer", "minimum": 0}
_NULLABLE_STR = {"type": ["string", "null"]}
_ITEM_ERRORS = {"type": "array", "items": _obj(["index", "message"],
                                               {"index": _INT0, "message": _STR},
                                               closed=False)}
_USAGE = _obj(["prompt_tokens", "total_tokens"],
              {"prompt_tokens": _INT0, "completion_tokens": _INT0, "total_tokens": _INT0})
_CHOICE_BASE = {"index": _INT0, "logprobs": {"type": "null"},
                "finish_reason": {"type": ["string", "null"]}}
_ANSWER_HEAD = {"id": _STR, "created": _INT0, "model": _STR}
_STREAM_ERROR = _obj(["type", "message"], {"type": _STR, "message": _STR, "field": _STR})

COMPONENTS: dict[str, JsonSchemaValue] = {
    "floodway.Error": _obj(["error"], {
        "error": _obj(["type", "message"], {
            "type": {**_STR, "description": "invalid_request, unauthorized, not_found, "
                     "request_timeout, conflict, expired, too_large, input_error, "
                     "rate_limited, overloaded, unavailable, deadline_exceeded, "
                     "endpoint_error, not_implemented, internal_error, ..."},
            "message": _STR,
            "field": {**_STR, "description": "the field, header or input to blame "
                      "(inputs[3], X-Deadline-Ms, ...)"}}),
        "outputs": {"type": "array", "description": "when only some inputs failed: one "
                    "per input, null for a failed one"},
        "item_errors": _ITEM_ERRORS}),
    "floodway.OpenAIError": _obj(["error"], {"error": _obj(
        ["message", "type", "param", "code"],
        {"message": _STR, "type": _STR, "param": _NULLABLE_STR, "code": _NULLABLE_STR})}),
    "floodway.Job": _obj(["id", "status"], {
        "id": _STR, "endpoint": _NULLABLE_STR,
        "status": {"enum": ["queued", "running", "succeeded", "failed", "expired"]},
        "attempts": _INT0, "created_at": {"type": ["string", "null"], "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "outputs": {"type": ["array", "null"], "description": "once succeeded (and on a "
                    "job failed on some inputs only: null per failed input)"},
        "error": _NULLABLE_STR, "item_errors": _ITEM_ERRORS,
        "location": {**_STR, "description": "the job's URL path (on a submit's answer)"}},
        closed=False),
    "floodway.Readiness": _obj(["ready"], {"ready": {"type": "boolean"}}, closed=False,
                               description="the backend's detail (containers, queues, "
                               "lanes, ...) unless it is private and the request has no key"),
    # One event of a native stream (SSE `data:` / an NDJSON line): a chunk of input
    # `index`, its combined output, its error; then the end ([DONE] / {"done": true}).
    "floodway.StreamEvent": {"anyOf": [
        _obj(["index", "chunk"], {"index": _INT0, "chunk": {}}),
        _obj(["index", "output"], {"index": _INT0, "output": {}}),
        _obj(["index", "error"], {"index": _INT0, "error": _STREAM_ERROR}),
        _obj(["done"], {"done": {"const": True}})]},
    "floodway.Model": _obj(["id", "object", "created", "owned_by"], {
        "id": _STR, "object": {"const": "model"}, "created": _INT0, "owned_by": _STR}),
    "floodway.ModelList": _obj(["object", "data"], {
        "object": {"const": "list"},
        "data": {"type": "array", "items": ref("floodway.Model")}}),
    "floodway.Embeddings": _obj(["object", "data", "model", "usage"], {
        "object": {"const": "list"}, "model": _STR, "usage": _USAGE,
        "data": {"type": "array", "items": _obj(["object", "index", "embedding"], {
            "object": {"const": "embedding"}, "index": _INT0,
            "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}},
                                    {**_STR, "contentEncoding": "base64"}]}})}}),
    "floodway.Completion": _obj(["id", "object", "created", "model", "choices", "usage"], {
        **_ANSWER_HEAD, "object": {"enum": ["text_completion", "chat.completion"]},
        "usage": _USAGE,
        "choices": {"type": "array", "items": {"anyOf": [
            _obj(["index", "text", "finish_reason"], {**_CHOICE_BASE, "text": _STR}),
            _obj(["index", "message", "finish_reason"], {**_CHOICE_BASE, "message": _obj(
                ["role", "content"], {"role": {"const": "assistant"}, "content": _STR,
                                      "refusal": {"type": "null"}})})]}}}),
}
# One event of an OpenAI stream: a completion chunk, the usage chunk, or an error.
COMPONENTS["floodway.CompletionChunk"] = {"anyOf": [
    _obj(["id", "object", "created", "model", "choices"], {
        **_ANSWER_HEAD, "object": {"enum": ["text_completion", "chat.completion.chunk"]},
        "choices": {"type": "array"}, "usage": {"anyOf": [_USAGE, {"type": "null"}]}}),
    ref("floodway.OpenAIError")]}


SSE_DONE = "[DONE]"


def sse_event(data: JsonSchemaValue) -> JsonSchemaValue:
    """One Server-Sent Event whose ``data`` is JSON of schema `data` (``contentSchema``,
    as OpenAPI 3.2 describes a stream's events), or the closing ``[DONE]``."""
    payload = {"contentMediaType": "application/json", "contentSchema": data}
    return _obj(["data"], {"data": {"type": "string",
                                    "anyOf": [{"const": SSE_DONE}, payload]},
                           "event": _STR, "id": _STR, "retry": _INT0}, closed=False)


def _header(description: str, schema: JsonSchemaValue, *,
            required: bool = False) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": schema}


_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}

HEADERS: dict[str, dict[str, Any]] = {
    "Retry-After": _header("whole seconds to wait before a retry (RFC 9110 10.2.3)",
                           {"type": "string", "pattern": "^[1-9][0-9]*$"}, required=True),
    "Location": _header("the job's URL path, /v1/jobs/<id>",
                        {"type": "string", "pattern": "^/v1/jobs/"}, required=True),
    "WWW-Authenticate": _header("the bearer challenge (RFC 6750)", _STR),
    "X-Floodway-Decision": _header("what the router decided for the request (for clients "
                                   "and load tests, not a contract)",
                                   {"enum": [str(a) for a in Action]}),
    "X-Floodway-Lane": _header("the lane (Route.lanes) the request took", _STR),
    "X-Floodway-Cache-Hits": _header("inputs answered from the response cache", _DIGITS),
    "X-Floodway-Handoff": _header("deadline: handed to the job queue near its deadline",
                                  {"const": "deadline"}),
    "Preference-Applied": _header("respond-async, when the client asked for it (RFC 7240)",
                                  {"const": "respond-async"}),
    "Server-Timing": _header("router;dur=<ms>: from the request's arrival at the router to "
                             "its answer", {"type": "string", "pattern": "^router;dur="}),
}
DEADLINE_MAX_MS = 3_600_000   # `floodway.routers.admission.parse_deadline`'s max_s

PARAMETERS: dict[str, dict[str, Any]] = {
    "X-Deadline-Ms": {"description": "the request's deadline in milliseconds from its "
                      "arrival (default: the endpoint's Route.timeout_s); 400 otherwise",
                      "schema": {"type": "integer", "minimum": 1,
                                 "maximum": DEADLINE_MAX_MS}},
    "X-Priority": {"description": "low sheds and spills first (default normal); 400 "
                   "otherwise", "schema": {"enum": ["high", "normal", "low"]}},
    "Idempotency-Key": {"description": "names the job this request may become: a retry "
                        "under the same key gets that job (200), other inputs under it a "
                        "409", "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"}},
    "Prefer": {"description": "respond-async: answer 202 with a job at once (RFC 7240)",
               "schema": {"type": "string"}},
    "Cache-Control": {"description": "no-cache: not answered from the response cache; "
                      "no-store: the outputs not stored (RFC 9111)",
                      "schema": {"type": "string"}},
}

__all__ = ["COMPONENTS", "DEADLINE_MAX_MS", "HEADERS", "PARAMETERS", "REF_PREFIX",
           "SSE_DONE", "ItemSchemaGenerator", "array_schema", "image_schema", "ref", "sse_event",
           "type_schemas"]
