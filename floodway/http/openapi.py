"""``GET /openapi.json``: the router's OpenAPI 3.1 document, built once per app when the
ASGI app is made (`OpenAPIPage`); ``GET /docs``: Swagger UI over it.

    build_openapi(app, keyed=, jobs=, private_detail=) -> dict

It describes every route of `floodway.http.app`: per endpoint ``POST /v1/<endpoint>`` (its
body ``{"inputs": [T, ...]}``, T's schema from the function's item annotation; its
``{"outputs": [R, ...]}`` from a ``-> list[R]`` return annotation, else any JSON; a
streaming endpoint's SSE and NDJSON answers) and ``POST /v1/<endpoint>/jobs``; ``GET
/v1/jobs/{job_id}``; the probes and ``/metrics``; the OpenAI-compatible routes (their
bodies as floodway accepts them, ``model`` one of the endpoints that route serves); each
route's error answers with the statuses it can answer (`floodway.http.errors`), and the
headers a client sends and reads. Schemas: `floodway.http.openapi_schemas`.

The document names the endpoints and their schemas, nothing more: it is open as
``/healthz`` is, except with `private_detail`, where it needs a valid key as ``/metrics``
does (401 otherwise). What it says depends on how the router was made: `keyed` (API keys
configured: the bearer key is required), `jobs` (a job queue: 202 answers, Idempotency-Key;
without one, 501 for what needs it).

``/docs`` is an HTML page that loads Swagger UI (https://github.com/swagger-api/swagger-ui)
from the jsDelivr CDN (`SWAGGER_UI`: ``swagger-ui-dist`` 5, as FastAPI's ``/docs`` does),
so the browser that opens it needs to reach the CDN; the router serves only the page,
which points it at ``/openapi.json``. It is open, or behind a key, as the document is.
"""

from __future__ import annotations

import html
from typing import Any

from pydantic.json_schema import JsonSchemaMode
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

import floodway
from floodway.codec import dumps
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.functions.prompts import Prompt
from floodway.http.handlers import Handlers
from floodway.http.openai import accept_embeddings, accept_generation
from floodway.http.openai_answers import output_type
from floodway.http.openai_wire import IGNORED, ChatRequest, CompletionRequest, EmbeddingsRequest
from floodway.http.openapi_schemas import (
    COMPONENTS,
    HEADERS,
    PARAMETERS,
    ref,
    sse_event,
    type_schemas,
)
from floodway.http.streaming import NDJSON, SSE

OPENAPI_VERSION = "3.1.0"
REASONS = {200: "OK", 202: "accepted: a job (Location: its URL)", 400: "a body that is not "
           "JSON, or a bad header or parameter", 401: "no valid API key",
           404: "not found", 406: "an Accept this streaming endpoint cannot answer",
           408: "the body did not arrive within 30 s", 409: "the Idempotency-Key was used "
           "for another request", 410: "the job's result expired", 413: "too large: the "
           "body, the count of inputs or sequences, an input (an image's bytes or pixels)",
           422: "a missing, unknown or bad field, or a bad input (inputs[i] named)",
           429: "the tenant is over its rate", 500: "the endpoint failed (some inputs only: "
           "outputs and item_errors)", 501: "this router has no job queue",
           503: "over capacity, or unavailable", 504: "past the deadline"}
_FLOODWAY_HEADERS = ("X-Floodway-Decision", "X-Floodway-Lane", "X-Floodway-Cache-Hits",
                     "X-Floodway-Handoff", "Server-Timing")


def _headers(*names: str) -> dict[str, Any]:
    return {n: {"$ref": f"#/components/headers/{n}"} for n in names}


def _json(schema: Any) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error_answer(code: int, *, openai: bool) -> dict[str, Any]:
    """The error answer `code`: floodway's shape, or OpenAI's on the OpenAI-compatible
    routes (a component: `_errors` refers to it)."""
    shape = ref("floodway.OpenAIError" if openai else "floodway.Error")
    r: dict[str, Any] = {"description": REASONS[code], "content": _json(shape)}
    if code in (429, 503):
        r["headers"] = _headers("Retry-After")
    elif code == 401:
        r["headers"] = _headers("WWW-Authenticate")
    return r


def _errors(codes: list[int], *, openai: bool = False) -> dict[str, Any]:
    """{status: a reference to its error answer}."""
    kind = "OpenAIError" if openai else "Error"
    return {str(c): {"$ref": f"#/components/responses/{kind}{c}"} for c in codes}


def _params(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{n}"} for n in names]


class _Builder:
    """One document's paths, from the app and how the router was made."""

    def __init__(self, app: App, *, keyed: bool, jobs: bool, private_detail: bool):
        self.app, self.keyed, self.jobs, self.private = app, keyed, jobs, private_detail
        # Without keys a bearer token is optional (it names the request's tenant).
        self.security: list[dict[str, list[str]]] = \
            [{"bearer": []}] if keyed else [{}, {"bearer": []}]
        self.auth = [401] if keyed else []
        types: dict[str, tuple[Any, JsonSchemaMode]] = {
            "openai.embeddings": (EmbeddingsRequest, "validation"),
            "openai.completions": (CompletionRequest, "validation"),
            "openai.chat": (ChatRequest, "validation")}
        for ep in app:
            types[f"{ep.name}.item"] = (ep.input_type, "validation")
            if (out := output_type(ep)) is not None:
                types[f"{ep.name}.output"] = (out, "serialization")
        self.schemas, self.defs = type_schemas(types)

    def _job_answers(self) -> dict[str, Any]:
        job = ref("floodway.Job")
        return {"200": {"description": "the job already made under this Idempotency-Key",
                        "headers": {"Location": {**HEADERS["Location"], "required": False}},
                        "content": _json(job)},
                "202": {"description": REASONS[202], "content": _json(job),
                        "headers": _headers("Location", "Preference-Applied",
                                            *_FLOODWAY_HEADERS)}}

    def predict(self, ep: Endpoint) -> dict[str, Any]:
        """``POST /v1/<endpoint>``."""
        outputs = {"type": "object", "required": ["outputs"], "additionalProperties": False,
                   "properties": {"outputs": {"type": "array",
                                              "items": self.schemas.get(f"{ep.name}.output", {})}}}
        ok = {"anyOf": [outputs, ref("floodway.Job")]} if self.jobs else outputs
        content = _json(ok)
        if ep.streaming:
            content[SSE] = {"schema": {**sse_event(ref("floodway.StreamEvent")),
                                       "description": "one event per chunk, output or "
                                       "error of an input, then data: [DONE]"}}
            content[NDJSON] = {"schema": {"type": "string", "description": "one "
                                          "floodway.StreamEvent per line, then {\"done\": true}"}}
        answers = {"200": {"description": "one output per input, in order" + (
            "; streamed with Accept: text/event-stream or application/x-ndjson"
            if ep.streaming else ""), "content": content,
            "headers": _headers(*_FLOODWAY_HEADERS)}}
        if self.jobs:
            answers["202"] = self._job_answers()["202"]
        codes = [400, *self.auth, *([406] if ep.streaming else []), 408,
                 *([409] if self.jobs else []), 413, 422, 429, 500,
                 *([] if self.jobs else [501]), 503, 504]
        headers = ["X-Deadline-Ms", "X-Priority", "Prefer",
                   *(["Idempotency-Key"] if self.jobs else []),
                   *([] if ep.streaming else ["Cache-Control"])]
        return self._op(f"predict_{ep.name}", ["endpoints"], ep, headers,
                        {**answers, **_errors(codes)},
                        summary=f"run endpoint {ep.name!r} on its inputs" +
                        (" (streamed)" if ep.streaming else ""))

    def create_job(self, ep: Endpoint) -> dict[str, Any]:
        """``POST /v1/<endpoint>/jobs``."""
        codes = [400, *self.auth, 408, 409, 413, 422, 429, 503] if self.jobs else \
            [400, *self.auth, 408, 413, 422, 429, 501]
        answers = self._job_answers() if self.jobs else {}
        headers = ["X-Deadline-Ms", "X-Priority", *(["Idempotency-Key"] if self.jobs else [])]
        return self._op(f"create_job_{ep.name}", ["jobs"], ep, headers,
                        {**answers, **_errors(codes)},
                        summary=f"a job of endpoint {ep.name!r}: 202 + Location at once")

    def _op(self, op_id: str, tags: list[str], ep: Endpoint, headers: list[str],
            responses: dict[str, Any], *, summary: str) -> dict[str, Any]:
        item = self.schemas.get(f"{ep.name}.item", {})
        if ep.generation is not None and ep.input_type is Prompt:
            # The endpoint's own cap (fw.Prompt cannot know it): 422 above.
            item = {"allOf": [item, {"properties": {"max_new_tokens": {
                "maximum": ep.generation.max_new_tokens}}}]}
        inputs: dict[str, Any] = {"type": "array", "minItems": 1, "items": item}
        if ep.route.max_inputs is not None:
            inputs["maxItems"] = ep.route.max_inputs
        body = {"type": "object", "required": ["inputs"], "additionalProperties": False,
                "properties": {"inputs": inputs}}
        return {"operationId": op_id, "tags": tags, "summary": summary,
                "security": self.security, "parameters": _params(*headers),
                "requestBody": {"required": True, "content": _json(body)},
                "responses": responses}

    def native_routes(self) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        for ep in sorted(self.app, key=lambda e: e.name):
            paths[f"/v1/{ep.name}"] = {"post": self.predict(ep)}
            paths[f"/v1/{ep.name}/jobs"] = {"post": self.create_job(ep)}
        codes = [*self.auth, 404, 410, 503] if self.jobs else [*self.auth, 501]
        paths["/v1/jobs/{job_id}"] = {"get": {
            "operationId": "get_job", "tags": ["jobs"], "summary": "a job's status and result",
            "security": self.security,
            "parameters": [{"name": "job_id", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the job (404: unknown, purged or another "
                                  "tenant's)", "content": _json(ref("floodway.Job")),
                                  "headers": _headers("Server-Timing")},
                          **_errors(codes)}}}
        return paths

    def ops_routes(self) -> dict[str, Any]:
        private = self.private and self.keyed
        keyed_page: dict[str, list[dict[str, list[str]]]] = \
            {"security": [{"bearer": []}]} if private else {"security": []}
        refused = _errors([401]) if private else {}
        readiness = _json(ref("floodway.Readiness"))
        return {
            "/healthz": {"get": {"operationId": "healthz", "tags": ["ops"], "security": [],
                                 "summary": "200 while the process is up",
                                 "responses": {"200": {"description": "up", "content": _json(
                                     {"type": "object", "required": ["status"],
                                      "properties": {"status": {"const": "ok"}}})}}}},
            "/readyz": {"get": {"operationId": "readyz", "tags": ["ops"],
                                "security": [{}, {"bearer": []}] if private else [],
                                "summary": "200 once every endpoint is ready",
                                "responses": {"200": {"description": "ready",
                                                      "content": readiness},
                                              "503": {"description": "not ready yet",
                                                      "content": readiness}}}},
            "/metrics": {"get": {"operationId": "metrics", "tags": ["ops"], **keyed_page,
                                 "summary": "Prometheus metrics", "responses": {
                                     "200": {"description": "the text exposition format",
                                             "content": {"text/plain": {"schema": {
                                                 "type": "string"}}}}, **refused}}},
            "/openapi.json": {"get": {"operationId": "openapi", "tags": ["ops"],
                                      **keyed_page, "summary": "this document",
                                      "responses": {"200": {"description": "OpenAPI 3.1",
                                                            "content": _json({"type": "object"})},
                                                    **refused}}},
            "/docs": {"get": {"operationId": "docs", "tags": ["ops"], **keyed_page,
                              "summary": "Swagger UI over this document (its scripts from a "
                              "CDN)", "responses": {"200": {
                                  "description": "an HTML page",
                                  "content": {"text/html": {"schema": {"type": "string"}}}},
                                  **refused}}}}

    def _openai_body(self, key: str, models: list[str]) -> dict[str, Any]:
        """An OpenAI request body as floodway takes it: `model` one of `models` (any
        string when none: every one is refused), the ignored fields allowed."""
        schema = dict(self.defs.get(_def_name(self.schemas[key]) or "", self.schemas[key]))
        props = dict(schema.get("properties", {}))
        if models:
            props["model"] = {"enum": models, "description": "the endpoint"}
        props.update({name: {"description": "accepted and ignored"} for name in sorted(IGNORED)})
        schema["properties"] = props
        return {"required": True, "content": _json(schema)}

    def openai_routes(self) -> dict[str, Any]:
        embed = sorted(ep.name for ep in self.app if _accepts(accept_embeddings, ep))
        gen = sorted(ep.name for ep in self.app if _accepts(accept_generation, ep))
        codes = [400, *self.auth, 404, 408, 413, 429, 500, 503, 504]
        params = _params("X-Deadline-Ms", "X-Priority")
        headers = _headers("X-Floodway-Decision", "Server-Timing")

        def post(op_id: str, key: str, models: list[str], ok: dict[str, Any],
                 extra: list[dict[str, str]]) -> dict[str, Any]:
            return {"post": {"operationId": op_id, "tags": ["openai"],
                             "security": self.security, "parameters": params + extra,
                             "requestBody": self._openai_body(key, models),
                             "responses": {"200": {"description": "OK", "content": ok,
                                                   "headers": headers},
                                           **_errors(codes, openai=True)}}}
        completion = {**_json(ref("floodway.Completion")),
                      SSE: {"schema": {**sse_event(ref("floodway.CompletionChunk")),
                                       "description": "with stream: true; then data: [DONE]"}}}
        model_param = {"name": "model", "in": "path", "required": True,
                       "schema": {"type": "string"}}
        get = {"tags": ["openai"], "security": self.security}
        return {
            "/v1/models": {"get": {**get, "operationId": "list_models", "responses": {
                "200": {"description": "every endpoint, as a model",
                        "content": _json(ref("floodway.ModelList"))},
                **_errors(self.auth, openai=True)}}},
            "/v1/models/{model}": {"get": {**get, "operationId": "get_model",
                                           "parameters": [model_param], "responses": {
                "200": {"description": "the model", "content": _json(ref("floodway.Model"))},
                **_errors([*self.auth, 404], openai=True)}}},
            "/v1/embeddings": post("create_embeddings", "openai.embeddings", embed,
                                   _json(ref("floodway.Embeddings")),
                                   _params("Cache-Control")),
            "/v1/completions": post("create_completion", "openai.completions", gen,
                                    completion, []),
            "/v1/chat/completions": post("create_chat_completion", "openai.chat", gen,
                                         completion, []),
        }


def _def_name(schema: dict[str, Any]) -> str | None:
    """The definition `schema` refers to, for a bare reference (a pydantic model)."""
    target = schema.get("$ref", "")
    return target.rsplit("/", 1)[-1] if target else None


def _accepts(check: Any, ep: Endpoint) -> bool:
    try:
        check(ep)
    except Exception:  # noqa: BLE001 - the check's refusal: this route does not serve it
        return False
    return True


def build_openapi(app: App, *, keyed: bool, jobs: bool,
                  private_detail: bool = False) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the router serving `app` (see the module): `keyed`,
    API keys configured; `jobs`, a job queue; `private_detail` as `make_asgi_app`'s."""
    b = _Builder(app, keyed=keyed, jobs=jobs, private_detail=private_detail)
    paths = {**b.native_routes(), **b.ops_routes(), **b.openai_routes()}
    parameters = {name: {"name": name, "in": "header", "required": False, **p}
                  for name, p in PARAMETERS.items()}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": f"floodway router: {app.name}", "version": floodway.__version__,
                 "description": "POST /v1/<endpoint> {\"inputs\": [...]} -> {\"outputs\": "
                 "[...]}; errors {\"error\": {\"type\", \"message\", \"field\"}} (OpenAI's "
                 "shape on the OpenAI-compatible routes). A streaming endpoint answers "
                 "SSE or NDJSON by the request's Accept (q-values count)."},
        "tags": [{"name": "endpoints"}, {"name": "jobs"}, {"name": "openai"},
                 {"name": "ops"}],
        "paths": paths,
        "components": {
            "schemas": {**b.defs, **COMPONENTS},
            "responses": {f"{kind}{code}": _error_answer(code, openai=kind != "Error")
                          for kind in ("Error", "OpenAIError") for code in REASONS
                          if code >= 400},
            "headers": HEADERS,
            "parameters": parameters,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "an API key; it names the "
                                           "tenant (rate limits, jobs)"}},
        },
    }


# Swagger UI's distribution on the jsDelivr CDN, its major version pinned.
SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5"

DOCS_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{cdn}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{cdn}/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({{url: "/openapi.json", dom_id: "#swagger-ui"}});
</script>
</body>
</html>
"""


class OpenAPIPage:
    """The ``GET /openapi.json`` and ``GET /docs`` routes of the router made with handlers
    `h`: its document built (and encoded) once, here, and the docs page."""

    def __init__(self, h: Handlers):
        self.h = h
        self.document = build_openapi(h.app, keyed=bool(h.admission.keys),
                                      jobs=h.jobs is not None, private_detail=h.private_detail)
        self.body = dumps(self.document)
        self.docs_body = DOCS_HTML.format(
            title=html.escape(self.document["info"]["title"]), cdn=SWAGGER_UI)

    def _check(self, request: Request) -> None:
        """With `private_detail`, only a request with a valid key passes (raises
        Unauthorized, 401, as ``/metrics``)."""
        if self.h.private_detail:
            self.h.admission.tenant(request)

    async def page(self, request: Request) -> Response:
        """The document (with `private_detail`, for a valid key only)."""
        self._check(request)
        return Response(self.body, media_type="application/json")

    async def docs(self, request: Request) -> Response:
        """Swagger UI's page over ``/openapi.json`` (with `private_detail`, for a valid key
        only, as the document)."""
        self._check(request)
        return HTMLResponse(self.docs_body)


__all__ = ["OPENAPI_VERSION", "SWAGGER_UI", "OpenAPIPage", "build_openapi"]
