"""Exceptions -> error answers: the one place that builds the router's error responses.

Handlers raise; the handlers below, registered on the Starlette app (`EXCEPTION_HANDLERS`),
answer ``{"error": {"type", "message", "field"}}`` with the status each exception names:

    RequestError        its `status`; type by status (`REQUEST_ERROR_TYPES`), else
                        "invalid_request"
      Unauthorized      401 "unauthorized" + WWW-Authenticate
    Unavailable         503 "unavailable" + Retry-After
      Overloaded        its status (503 shed, 429 tenant rate) and type + Retry-After
    EndpointError       its `status` (500) and `kind` ("endpoint_error"; 422 "input_error"
                        when every failed item failed on its input) (+ "outputs" and
                        "item_errors" when only some items failed)
    TimeoutError        504 "deadline_exceeded"
    ClientClosed        499 "client_closed" (seen only by the metrics: the client left)
    NoJobQueue          501 "not_implemented"
    HTTPException       its status: 404 "not_found", 405 "method_not_allowed" (Starlette's
                        routing: unknown path, wrong method; in OpenAI's shape on the
                        OpenAI-compatible paths)
    anything else       500 "internal_error", the details only in the log (a bug: never a
                        plain-text answer)

Every error answer also records its type for the metrics middleware (`Notes.error_type`).

The OpenAI-compatible routes (`floodway.http.openai`) mark their requests
(`use_openai_errors`): the same exceptions are then answered in OpenAI's error shape,
``{"error": {"message", "type", "param", "code"}}`` (`openai_shaped`), with the same status
and headers, except that a 422 is a 400 there (OpenAI answers bad parameters with 400).
"""

from __future__ import annotations

import math
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from floodway.errors import EndpointError, FloodwayError, RequestError, Unauthorized, Unavailable
from floodway.http.middleware import notes
from floodway.http.openai_answers import openai_error
from floodway.http.responses import JSONResponse
from floodway.routers.schema import error_body, printable

# Error types of RequestError by status; any other 4xx is "invalid_request".
REQUEST_ERROR_TYPES = {401: "unauthorized", 404: "not_found", 408: "request_timeout",
                       409: "conflict", 410: "expired", 413: "too_large"}


class Overloaded(Unavailable):
    """Shed before any work: `status` 503 (over capacity, `decide()`) or 429 (the tenant
    over its rate), error type `kind` ("overloaded", "rate_limited"); retry after
    `retry_after_s` seconds."""

    def __init__(self, message: str, *, retry_after_s: float, status: int = 503,
                 kind: str = "overloaded"):
        super().__init__(message, retry_after_s=retry_after_s)
        self.status, self.kind = status, kind


class ClientClosed(FloodwayError):
    """The client went away before its answer (499, as nginx logs it)."""


class NoJobQueue(FloodwayError):
    """This router has no async job queue (501)."""


def retry_after(seconds: float) -> str:
    """A Retry-After value: whole seconds, rounded up, at least 1 (RFC 9110 section 10.2.3)."""
    return str(max(1, math.ceil(seconds)))


# The request's scope holds this key (True) on the OpenAI-compatible routes.
OPENAI_ERRORS_KEY = "floodway.openai_errors"


def use_openai_errors(scope: Any) -> None:
    """Answer this request's errors in OpenAI's shape (`openai_shaped`)."""
    scope[OPENAI_ERRORS_KEY] = True


def openai_shaped(status: int, kind: str, message: str,
                  field: str | None) -> tuple[int, dict[str, Any]]:
    """(status, body) of an error answer in OpenAI's shape: ``type`` by status
    (invalid_request_error, authentication_error 401, rate_limit_error 429, server_error
    5xx), ``param`` the field, ``code`` model_not_found (404 for the model),
    invalid_api_key (401), rate_limit_exceeded (a tenant over its rate), else floodway's
    own error type (overloaded, deadline_exceeded, ...), None for a plain bad parameter."""
    status = 400 if status == 422 else status
    code: str | None = None if kind == "invalid_request" else kind
    if status >= 500:
        kind_openai = "server_error"
    elif status == 401:
        kind_openai, code = "authentication_error", "invalid_api_key"
    elif status == 429:
        kind_openai = "rate_limit_error"
        code = "rate_limit_exceeded" if kind == "rate_limited" else kind
    else:
        kind_openai = "invalid_request_error"
        if status == 404 and field == "model":
            code = "model_not_found"
    return status, openai_error(message, kind_openai, field, code)


def error_response(request: Request, status: int, kind: str, message: str,
                   field: str | None = None, *, headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None) -> JSONResponse:
    """The JSON error answer; `extra` adds top-level members beside ``error`` (not in
    OpenAI's shape, `use_openai_errors`). A lone surrogate a client sent into `message` or
    `field` is escaped (`floodway.routers.schema.printable`): it could not be encoded."""
    notes(request.scope).error_type = kind
    message = printable(message)
    field = None if field is None else printable(field)
    if request.scope.get(OPENAI_ERRORS_KEY):
        status, body = openai_shaped(status, kind, message, field)
        return JSONResponse(body, status_code=status, headers=headers)
    body = error_body(kind, message, field)
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status, headers=headers)


async def request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    kind = REQUEST_ERROR_TYPES.get(exc.status, "invalid_request")
    headers = {"WWW-Authenticate": exc.challenge} if isinstance(exc, Unauthorized) else None
    return error_response(request, exc.status, kind, str(exc), exc.field, headers=headers)


async def unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The one place that answers "retry later": 503 (or an Overloaded's 429) with
    Retry-After."""
    assert isinstance(exc, Unavailable)
    status, kind = (exc.status, exc.kind) if isinstance(exc, Overloaded) else \
        (503, "unavailable")
    return error_response(request, status, kind, str(exc),
                          headers={"Retry-After": retry_after(exc.retry_after_s)})


async def endpoint_error(request: Request, exc: Exception) -> JSONResponse:
    """500 "endpoint_error", or the error's own status and type where the input was to
    blame (422 "input_error", naming the field; 413 "too_large")."""
    assert isinstance(exc, EndpointError)
    extra = None if exc.outputs is None else {"outputs": exc.outputs,
                                              "item_errors": exc.item_errors or []}
    status = getattr(exc, "status", 500)   # one unpickled from before it had one: 500
    kind = getattr(exc, "kind", None) or "endpoint_error"
    return error_response(request, status, kind, str(exc), getattr(exc, "field", None),
                          extra=extra)


async def deadline_exceeded(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 504, "deadline_exceeded", str(exc))


async def client_closed(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 499, "client_closed", str(exc))


async def no_job_queue(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 501, "not_implemented", str(exc))


# The OpenAI-compatible routes' paths: Starlette's own refusals of them (a wrong method)
# are answered in OpenAI's shape too, as the routes' handlers never ran to say so.
OPENAI_PATHS = frozenset({"/v1/models", "/v1/embeddings", "/v1/completions",
                          "/v1/chat/completions"})


def is_openai_path(path: str) -> bool:
    """Whether `path` is one of the OpenAI-compatible routes (``/v1/models/<id>`` too, and
    an id with a "/" in it, ``/v1/models/org%2Fname``: no route, but an OpenAI client's)."""
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's routing refusals: 404 for an unknown path, 405 for a wrong method (in
    OpenAI's shape on the OpenAI-compatible paths, `is_openai_path`)."""
    assert isinstance(exc, HTTPException)
    if is_openai_path(request.url.path):
        use_openai_errors(request.scope)
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(request, exc.status_code, kind,
                          f"{request.method} {request.url.path}: {exc.detail}",
                          headers=dict(exc.headers or {}))


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """An exception no handler above knows: Starlette's ServerErrorMiddleware calls this
    (registered for Exception) and re-raises it afterwards, for the server's log."""
    return error_response(request, 500, "internal_error",
                          "the router failed on this request (an internal error; see its log)")


# Looked up along each exception's MRO, so a subclass finds its base's handler.
EXCEPTION_HANDLERS = {
    RequestError: request_error,
    Unavailable: unavailable,
    EndpointError: endpoint_error,
    TimeoutError: deadline_exceeded,
    ClientClosed: client_closed,
    NoJobQueue: no_job_queue,
    HTTPException: http_error,
    Exception: internal_error,
}

__all__ = ["EXCEPTION_HANDLERS", "OPENAI_ERRORS_KEY", "OPENAI_PATHS", "REQUEST_ERROR_TYPES",
           "ClientClosed", "NoJobQueue", "Overloaded", "error_response", "is_openai_path",
           "openai_shaped", "retry_after", "use_openai_errors"]
