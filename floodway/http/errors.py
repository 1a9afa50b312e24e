"""Exceptions -> error answers: the one place that builds the router's error responses.

Handlers raise; the handlers below, registered on the Starlette app (`EXCEPTION_HANDLERS`),
answer ``{"error": {"type", "message", "field"}}`` with the status each exception names:

    RequestError        its `status`; type by status (`REQUEST_ERROR_TYPES`), else
                        "invalid_request"
      Unauthorized      401 "unauthorized" + WWW-Authenticate
    Unavailable         503 "unavailable" + Retry-After
      Overloaded        its status (503 shed, 429 tenant rate) and type + Retry-After
    EndpointError       500 "endpoint_error" (+ "outputs" and "item_errors" when only some
                        items failed)
    TimeoutError        504 "deadline_exceeded"
    ClientClosed        499 "client_closed" (seen only by the metrics: the client left)
    NoJobQueue          501 "not_implemented"
    HTTPException       its status: 404 "not_found", 405 "method_not_allowed" (Starlette's
                        routing: unknown path, wrong method)
    anything else       500 "internal_error", the details only in the log (a bug: never a
                        plain-text answer)

Every error answer also records its type for the metrics middleware (`Notes.error_type`).
"""

from __future__ import annotations

import math
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from floodway.errors import EndpointError, FloodwayError, RequestError, Unauthorized, Unavailable
from floodway.http.middleware import notes
from floodway.http.responses import JSONResponse
from floodway.routers.schema import error_body

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


def error_response(request: Request, status: int, kind: str, message: str,
                   field: str | None = None, *, headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None) -> JSONResponse:
    """The JSON error answer; `extra` adds top-level members beside ``error``."""
    notes(request.scope).error_type = kind
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
    assert isinstance(exc, EndpointError)
    extra = None if exc.outputs is None else {"outputs": exc.outputs,
                                              "item_errors": exc.item_errors or []}
    return error_response(request, 500, "endpoint_error", str(exc), extra=extra)


async def deadline_exceeded(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 504, "deadline_exceeded", str(exc))


async def client_closed(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 499, "client_closed", str(exc))


async def no_job_queue(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, 501, "not_implemented", str(exc))


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
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

__all__ = ["EXCEPTION_HANDLERS", "REQUEST_ERROR_TYPES", "ClientClosed", "NoJobQueue",
           "Overloaded", "error_response", "retry_after"]
