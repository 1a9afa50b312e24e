"""The router's HTTP surface (Starlette), shared by the local runtime and the Modal router.

    POST /v1/<endpoint>   {"inputs": [...]} -> 200 {"outputs": [...]}, one output per input
    GET  /healthz         200 while the process is up
    GET  /readyz          200 once a container of every endpoint is warm, else 503; with detail
    GET  /metrics         Prometheus metrics (`floodway.runtime.metrics`)

Where the work runs is a `Backend`: the local pool of worker processes, or Modal classes.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from floodway.errors import RequestError, Unavailable
from floodway.functions.app import App
from floodway.routers.decide import Action, Decision, Snapshot, decide
from floodway.routers.decide import Request as DecideRequest
from floodway.routers.schema import error_body, parse_predict
from floodway.runtime.metrics import Metrics


class Backend(Protocol):
    """Where work runs: the local pool of worker processes, or Modal classes."""

    def snapshot(self, endpoint: str) -> Snapshot:
        """The endpoint's state for `decide()` (containers, queue, service and cold-start
        times, on the backend's own monotonic clock)."""
        ...

    def start_cold(self, endpoint: str) -> bool:
        """Start one more container (spill_cold); False when at max_containers."""
        ...

    async def run(self, endpoint: str, inputs: list[Any], *, timeout_s: float,
                  priority: int = 1, tenant: str = "anonymous") -> list[Any]:
        """Run `inputs` through the endpoint: one entry per input, in order, each its output
        or the exception that failed that item alone (EndpointError, Unavailable).

        Raises Unavailable (no capacity), TimeoutError (the deadline passed first).
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


def _retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def _shed(name: str, decision: Decision) -> JSONResponse:
    return _error(decision.status or 503, "overloaded",
                  f"endpoint {name!r} is over capacity: {decision.reason}",
                  headers={"Retry-After": _retry_after(decision.retry_after_s)})


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (ASGI http.disconnect after the body)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _outputs(name: str, inputs: list[Any], results: list[Any]) -> JSONResponse:
    """200 with every output, or the failed items named (a bad item fails alone)."""
    if len(results) != len(inputs):
        return _error(500, "endpoint_error", f"endpoint {name!r} returned {len(results)} "
                                             f"outputs for {len(inputs)} inputs")
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if not failed:
        return JSONResponse({"outputs": results})
    if all(isinstance(r, Unavailable) for _, r in failed):
        return _error(503, "unavailable", str(failed[0][1]),
                      headers={"Retry-After": _retry_after(failed[0][1].retry_after_s)})
    body = error_body("endpoint_error", f"{len(failed)} of {len(inputs)} inputs failed; "
                                        f"first: inputs[{failed[0][0]}]: {failed[0][1]}")
    body["outputs"] = [None if isinstance(r, BaseException) else r for r in results]
    body["item_errors"] = [{"index": i, "message": str(r)} for i, r in failed]
    return JSONResponse(body, status_code=500)


def make_asgi_app(app: App, backend: Backend, *, lifespan: Any = None) -> Starlette:
    """The router ASGI app for every endpoint of `app`, running work on `backend`.

    `lifespan` (a Starlette lifespan context) starts and stops the backend with the server.
    """

    metrics = Metrics(backend.readiness)
    if hasattr(backend, "on_batch_metrics"):
        backend.on_batch_metrics = metrics.batch

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
        budget_s = ep.route.timeout_s
        snap = backend.snapshot(name)
        decision = decide(snap, DecideRequest(rows=len(inputs), deadline_s=snap.now_s + budget_s,
                                              allow_async=False))
        metrics.decided(name, decision)
        if decision.action in (Action.SHED, Action.SPILL_ASYNC):
            return _shed(name, decision)
        if decision.action == Action.SPILL_COLD:
            backend.start_cold(name)
        work = asyncio.ensure_future(backend.run(name, inputs, timeout_s=budget_s))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not work.done():
                work.cancel()   # the client left: withdraw its queued items
        if work.cancelled():
            return _error(499, "client_closed", "the client closed the connection")
        try:
            results = work.result()
        except Unavailable as e:
            return _error(503, "unavailable", str(e),
                          headers={"Retry-After": _retry_after(e.retry_after_s)})
        except TimeoutError:
            return _error(504, "deadline_exceeded",
                          f"endpoint {name!r} did not answer within {budget_s:g} s")
        return _outputs(name, inputs, results)

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

    return Starlette(exception_handlers={HTTPException: http_error}, routes=[
        Route("/v1/{endpoint}", predict, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
    ], lifespan=lifespan)
