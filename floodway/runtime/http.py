"""The router's HTTP surface (Starlette), shared by the local runtime and the Modal router.

    POST /v1/<endpoint>   {"inputs": [...]} -> 200 {"outputs": [...]}, one output per input
    GET  /healthz         200 while the process is up
    GET  /readyz          200 once a container of every endpoint is warm, else 503; with detail
    GET  /metrics         Prometheus metrics (`floodway.runtime.metrics`)

Where the work runs is a `Backend`: the local pool of worker processes, or Modal classes.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from floodway.errors import EndpointError, RequestError, Unavailable
from floodway.functions.app import App
from floodway.routers.admission import ApiKeys
from floodway.routers.schema import error_body, parse_predict
from floodway.runtime.metrics import Metrics


class Backend(Protocol):
    async def predict(self, endpoint: str, inputs: list[Any], *, timeout_s: float) -> list[Any]:
        """Run `inputs` through the endpoint; one output per input, in order.

        Raises Unavailable (no capacity now), EndpointError (the function failed),
        TimeoutError (the deadline passed).
        """
        ...

    def readiness(self) -> dict[str, Any]:
        """``{"ready": bool, ...detail}``; ready once each endpoint has a warm container."""
        ...


def _error(status: int, kind: str, message: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(kind, message, field), status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit` bytes:
    from Content-Length before reading anything, else while streaming (never buffered whole)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body is {int(declared)} bytes; the limit is {limit}",
                           status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"request body exceeds the limit of {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def make_asgi_app(app: App, backend: Backend, *, lifespan: Any = None,
                  api_keys: ApiKeys | None = None) -> Starlette:
    """The router ASGI app for every endpoint of `app`, running work on `backend`.

    `lifespan` (a Starlette lifespan context) starts and stops the backend with the server.
    `api_keys` (None: no authentication) is kept as ``state.api_keys`` of the returned app.
    """

    metrics = Metrics(backend.readiness)

    async def predict(request: Request) -> JSONResponse:
        t0 = time.perf_counter()
        name = request.path_params["endpoint"]
        response = await _predict(request, name)
        outcome = "ok" if response.status_code == 200 else json.loads(response.body)["error"][
            "type"]
        # Unknown names share one label: a client must not be able to grow the label set.
        metrics.observe(name if name in app.endpoints else "(unknown)", outcome,
                        time.perf_counter() - t0)
        return response

    async def _predict(request: Request, name: str) -> JSONResponse:
        eps = app.endpoints
        if name not in eps:
            return _error(404, "not_found", f"no endpoint {name!r}; endpoints: "
                                            f"{', '.join(sorted(eps)) or '(none)'}")
        ep = eps[name]
        try:
            body = await read_body(request, ep.route.max_body_bytes)
            inputs = parse_predict(body, ep.input_type, max_inputs=ep.route.max_inputs)
        except RequestError as e:
            kind = "too_large" if e.status == 413 else "invalid_request"
            return _error(e.status, kind, str(e), e.field)
        try:
            outputs = await backend.predict(name, inputs, timeout_s=ep.route.timeout_s)
        except Unavailable as e:
            retry = str(max(1, math.ceil(e.retry_after_s)))
            return _error(503, "unavailable", str(e), headers={"Retry-After": retry})
        except TimeoutError:
            return _error(504, "deadline_exceeded",
                          f"endpoint {name!r} did not answer within {ep.route.timeout_s:g} s")
        except EndpointError as e:
            return _error(500, "endpoint_error", str(e))
        if len(outputs) != len(inputs):
            return _error(500, "endpoint_error", f"endpoint {name!r} returned {len(outputs)} "
                                                 f"outputs for {len(inputs)} inputs")
        return JSONResponse({"outputs": outputs})

    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        detail = backend.readiness()
        return JSONResponse(detail, status_code=200 if detail.get("ready") else 503)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, kind, f"{request.method} {request.url.path}: {exc.detail}",
                      headers=dict(exc.headers or {}))

    asgi = Starlette(exception_handlers={HTTPException: http_error}, routes=[
        Route("/v1/{endpoint}", predict, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
    ], lifespan=lifespan)
    # Stored only: not yet enforced. The admission step of `predict` (routers.admission:
    # tenant_of, then a TenantLimiter per route) is to check it, answering 401 with
    # WWW-Authenticate from Unauthorized.challenge.
    asgi.state.api_keys = api_keys or ApiKeys()
    return asgi
