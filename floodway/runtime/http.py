"""The router's HTTP surface (Starlette), shared by the local runtime and the Modal router.

    POST /v1/<endpoint>       {"inputs": [...]} -> 200 {"outputs": [...]}, one per input;
                              `Prefer: respond-async` -> 202 + Location, as /jobs below
    POST /v1/<endpoint>/jobs  -> 202 {"id", "status", ...} + Location: /v1/jobs/<id>
                              (200 with the same job for a repeated Idempotency-Key)
    GET  /v1/jobs/<id>        -> status and, once done, outputs or error; 404 / 410 expired
    GET  /healthz         200 while the process is up
    GET  /readyz          200 once a container of every endpoint is warm, else 503; with detail
    GET  /metrics         Prometheus metrics (`floodway.runtime.metrics`)

Admission, in order, before any work: bearer-token auth (401), `X-Priority` and
`X-Deadline-Ms` (400), the tenant's token bucket (429 + Retry-After), the body size (413,
never buffered beyond the limit) and payload (4xx). Then `decide()` dispatches, queues,
spills (cold container, async job) or sheds (503 + Retry-After). A client that disconnects
withdraws its queued items before they reach a model. A sync request unfinished shortly
before its deadline is handed to the async queue when its route spills to async (202 +
Location and ``X-Floodway-Handoff: deadline``, instead of a 504), as a Modal web endpoint
redirects a long call to its result: still queued, its items are withdrawn and a new job
runs them; already on a container (the backend's ``dispatched()``), the job adopts the work
under way (the jobs' ``adopt``), so it never runs twice. A backend that cannot tell hands
off whatever has not finished as a new job.

Where the work runs is a `Backend`: the local pool of worker processes, or Modal classes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response
from starlette.routing import Route

from floodway.codec import dumps
from floodway.errors import RequestError, Unauthorized, Unavailable
from floodway.functions.app import App
from floodway.routers.admission import (
    ApiKeys,
    Priority,
    TenantLimiter,
    parse_deadline,
    parse_priority,
    tenant_of,
)
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


BODY_TIMEOUT_S = 30.0


class JSONResponse(StarletteJSONResponse):
    """Rendered with `floodway.codec.dumps` (orjson): outputs are long lists of floats."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


# A commit with synchronous=NORMAL in WAL takes well under a millisecond unloaded and a few
# tens of milliseconds on a thread under a burst (measured with benchmarks/burst.py).
HANDOFF_MARGIN_S = 0.1


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


def _handoff_s(budget_s: float) -> float:
    """When a sync request still waiting is handed to the async queue: early enough that
    the job's durable commit and the 202 fit before the deadline (HANDOFF_MARGIN_S, at most
    a tenth of a short budget)."""
    return max(0.0, budget_s - min(HANDOFF_MARGIN_S, budget_s / 10))


def _key_error(e: RequestError) -> JSONResponse:
    return _error(e.status, "conflict" if e.status == 409 else "invalid_request", str(e),
                  e.field)


def _job_answer(request: Request, wire: dict[str, Any], created: bool) -> JSONResponse:
    """202 + Location for a new job, 200 for one that already existed (Idempotency-Key)."""
    location = f"/v1/jobs/{wire['id']}"
    headers = {"Location": location}
    if "respond-async" in _prefer(request):   # RFC 7240: only what the client asked for
        headers["Preference-Applied"] = "respond-async"
    return JSONResponse({**wire, "location": location}, status_code=202 if created else 200,
                        headers=headers)


def _prefer(request: Request) -> set[str]:
    """The request's `Prefer` tokens (RFC 7240), lower-case."""
    return {t.strip().lower() for t in request.headers.get("prefer", "").split(",")}


def _handoff_kind(pending: Any, jobs: Any) -> str:
    """How an unfinished sync request near its deadline becomes a job: "submit" (a new job
    runs its inputs: none has reached a container, or the backend cannot tell) or "adopt"
    (the job takes over the work under way: it never runs twice)."""
    started = getattr(pending, "dispatched", None)
    if started is None or not started():
        return "submit"
    if hasattr(pending, "adopt") and hasattr(jobs, "adopt"):
        return "adopt"
    return "submit"


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


class Jobs(Protocol):
    """The async job queue behind ``/v1/<endpoint>/jobs`` and ``/v1/jobs/<id>``.

    `submit` and `get` may also be coroutines (the Modal jobs are): the router awaits what
    they return when it is awaitable.
    """

    def submit(self, endpoint: str, inputs: list[Any], *, tenant: str, priority: Priority,
               idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
        """Persist a job before returning (wire form, created). Raises RequestError."""
        ...

    def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form (``status`` "expired" answers 410), None when unknown.
        Raises Unavailable (503) when the queue cannot be asked now."""
        ...

    def counts(self) -> dict[str, int]: ...


async def _resolved(value: Any) -> Any:
    """`value`, awaited first when it is awaitable (sync or async `Jobs`)."""
    return await value if inspect.isawaitable(value) else value


@dataclass(frozen=True)
class Admitted:
    """A request that passed admission: who sent it, how urgent, what it holds."""

    tenant: str
    priority: Priority
    budget_s: float
    inputs: list[Any]


def make_asgi_app(app: App, backend: Backend, *, lifespan: Any = None,
                  api_keys: ApiKeys | None = None, jobs: Jobs | None = None,
                  on_arrival: Callable[[str, float], None] | None = None) -> Starlette:
    """The router ASGI app for every endpoint of `app`, running work on `backend`.

    `lifespan` (a Starlette lifespan context) starts and stops the backend with the server.
    `api_keys` (empty: no authentication) are required as bearer tokens; `jobs` (None: no
    async jobs, and "async" spills are not offered) backs the job routes. `on_arrival(endpoint,
    unix_s)` is called once per user request (``POST /v1/<endpoint>`` and its ``/jobs``) that
    passed admission, before the decision: the warm policies' traffic history. Probes and
    other routes never call it. It runs on the event loop, so it must be cheap and not raise.
    """
    keys = api_keys or ApiKeys()
    metrics = Metrics(backend.readiness, jobs.counts if jobs else None)
    if hasattr(backend, "on_batch_metrics"):
        backend.on_batch_metrics = metrics.batch
    limiters = {ep.name: TenantLimiter.for_route(ep.route) for ep in app}

    def observed(handler):
        async def wrapper(request: Request) -> JSONResponse:
            t0 = time.perf_counter()
            name = request.path_params.get("endpoint", "(jobs)")
            response = await handler(request)
            code = response.status_code
            # Only error bodies are parsed: a 200 can hold megabytes of outputs.
            outcome = "ok" if code < 300 else json.loads(response.body).get(
                "error", {}).get("type", str(code))
            if code == 202:
                outcome = "accepted"
            # Unknown names share one label: a client must not be able to grow the label set.
            known = name in app.endpoints or name == "(jobs)"
            took_s = time.perf_counter() - t0
            metrics.observe(name if known else "(unknown)", outcome, took_s)
            # W3C Server-Timing: arrival to answer in this process (queue and model
            # included), apart from the network and the client.
            response.headers["Server-Timing"] = f"router;dur={took_s * 1000:.1f}"
            return response
        return wrapper

    async def admit(request: Request, name: str) -> Admitted | JSONResponse:
        """Auth, headers and the tenant's rate before the body is read; then the body."""
        if name not in app.endpoints:
            return _error(404, "not_found", f"no endpoint {name!r}; endpoints: "
                                            f"{', '.join(sorted(app.endpoints)) or '(none)'}")
        ep = app.endpoints[name]
        try:
            tenant = tenant_of(request.headers.get("authorization"), keys)
        except Unauthorized as e:
            return _error(401, "unauthorized", str(e), e.field,
                          headers={"WWW-Authenticate": e.challenge})
        try:
            priority = parse_priority(request.headers.get("x-priority"))
            budget_s = parse_deadline(request.headers.get("x-deadline-ms"),
                                      default_s=ep.route.timeout_s)
        except RequestError as e:
            return _error(e.status, "invalid_request", str(e), e.field)
        wait_s = limiters[name].check(tenant, time.monotonic())
        if wait_s > 0:
            metrics.shed(name, 429)
            return _error(429, "rate_limited", f"tenant over its rate of "
                          f"{ep.route.tenant_rate_per_s:g} requests/s for endpoint {name!r}",
                          headers={"Retry-After": _retry_after(wait_s)})
        try:
            # A client that trickles its body must not hold a connection for ever.
            body = await asyncio.wait_for(read_body(request, ep.route.max_body_bytes),
                                          BODY_TIMEOUT_S)
            inputs = parse_predict(body, ep.input_type, max_inputs=ep.route.max_inputs)
        except TimeoutError:
            return _error(408, "request_timeout", f"the request body did not arrive within "
                                                  f"{BODY_TIMEOUT_S:g} s")
        except RequestError as e:
            kind = "too_large" if e.status == 413 else "invalid_request"
            return _error(e.status, kind, str(e), e.field)
        if on_arrival is not None:
            on_arrival(name, time.time())   # admitted user traffic only
        return Admitted(tenant, priority, budget_s, inputs)

    async def submit_job(request: Request, name: str, a: Admitted,
                         adopted: Awaitable[list[Any]] | None = None) -> JSONResponse:
        """202 + Location for a new job (200 for an Idempotency-Key's existing one). With
        `adopted` (the request's results, already under way), the job takes them over."""
        if jobs is None:
            return _error(501, "not_implemented", "this router has no async job queue")
        key = request.headers.get("idempotency-key")
        try:
            wire, created = await _resolved(
                jobs.submit(name, a.inputs, tenant=a.tenant, priority=a.priority,
                            idempotency_key=key) if adopted is None else
                jobs.adopt(name, a.inputs, adopted, tenant=a.tenant, priority=a.priority,
                           idempotency_key=key))
        except RequestError as e:
            return _key_error(e)
        return _job_answer(request, wire, created)

    async def keyed_job(request: Request, name: str, a: Admitted) -> JSONResponse | None:
        """With an Idempotency-Key on the sync route: the job already stored under it (as
        ``/jobs`` answers a repeat), or None to go on. A request handed off to the async
        queue is stored under its key, so a retry finds it instead of running again."""
        key = request.headers.get("idempotency-key")
        if key is None or not hasattr(jobs, "find") or not can_spill_async(name):
            return None
        try:
            wire = await _resolved(jobs.find(name, a.inputs, tenant=a.tenant,
                                             idempotency_key=key))
        except RequestError as e:
            return _key_error(e)
        return None if wire is None else _job_answer(request, wire, False)

    async def predict(request: Request) -> JSONResponse:
        name = request.path_params["endpoint"]
        a = await admit(request, name)
        if isinstance(a, JSONResponse):
            return a
        if "respond-async" in _prefer(request):
            return await submit_job(request, name, a)
        if (known := await keyed_job(request, name, a)) is not None:
            return known
        snap = backend.snapshot(name)
        decision = decide(snap, DecideRequest(
            rows=len(a.inputs), deadline_s=snap.now_s + a.budget_s, priority=int(a.priority),
            tenant=a.tenant, allow_async=jobs is not None))
        metrics.decided(name, decision)
        response = await _decided(request, name, a, decision)
        # Which way the request went, for clients and load tests (not a contract).
        response.headers["X-Floodway-Decision"] = str(decision.action)
        return response

    async def _decided(request: Request, name: str, a: Admitted,
                       decision: Decision) -> JSONResponse:
        if decision.start_cold:
            backend.start_cold(name)
        if decision.action == Action.SHED:
            return _shed(name, decision)
        if decision.action == Action.SPILL_ASYNC:
            return await submit_job(request, name, a)
        if decision.action == Action.SPILL_COLD:
            backend.start_cold(name)
        # Enqueue before yielding to the loop when the backend can (Pool.enqueue): a burst's
        # next decisions must see this request in the queue, not an empty one.
        start = getattr(backend, "enqueue", None) or backend.run
        try:
            pending = start(name, a.inputs, timeout_s=a.budget_s, priority=int(a.priority),
                            tenant=a.tenant)
        except Unavailable as e:
            return _error(503, "unavailable", str(e),
                          headers={"Retry-After": _retry_after(e.retry_after_s)})
        work = asyncio.ensure_future(pending)
        gone = asyncio.ensure_future(_disconnected(request))
        handoff: str | None = None
        try:
            if can_spill_async(name):
                await asyncio.wait({work, gone}, timeout=_handoff_s(a.budget_s),
                                   return_when=asyncio.FIRST_COMPLETED)
                if not (work.done() or gone.done()):
                    handoff = _handoff_kind(pending, jobs)
            if handoff is None:
                await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            elif handoff == "adopt":
                adopted = pending.adopt()   # before the cancel below: its inputs stay
        finally:
            gone.cancel()
            unfinished = not work.done()
            if unfinished:
                work.cancel()   # the client left or the hand-off: withdraw queued items
        if handoff is None and not unfinished and can_spill_async(name) \
                and not work.cancelled() and isinstance(work.exception(), TimeoutError):
            # The queue's own deadline fired first (a busy event loop woke the hand-off
            # late): its items are withdrawn, so a new job runs them.
            handoff = "submit"
        if handoff is not None:
            # Near its deadline: the async queue takes it over rather than a 504.
            metrics.handed_off(name)
            response = await (submit_job(request, name, a) if handoff == "submit" else
                              submit_job(request, name, a, adopted))
            response.headers["X-Floodway-Handoff"] = "deadline"
            return response
        if unfinished:
            return _error(499, "client_closed", "the client closed the connection")
        try:
            results = work.result()
        except Unavailable as e:
            return _error(503, "unavailable", str(e),
                          headers={"Retry-After": _retry_after(e.retry_after_s)})
        except TimeoutError:
            return _error(504, "deadline_exceeded",
                          f"endpoint {name!r} did not answer within {a.budget_s:g} s")
        return _outputs(name, a.inputs, results)

    def can_spill_async(name: str) -> bool:
        return jobs is not None and "async" in app.endpoints[name].route.spill

    async def create_job(request: Request) -> JSONResponse:
        name = request.path_params["endpoint"]
        a = await admit(request, name)
        return a if isinstance(a, JSONResponse) else await submit_job(request, name, a)

    async def get_job(request: Request) -> JSONResponse:
        if jobs is None:
            return _error(501, "not_implemented", "this router has no async job queue")
        try:
            tenant = tenant_of(request.headers.get("authorization"), keys)
        except Unauthorized as e:
            return _error(401, "unauthorized", str(e), e.field,
                          headers={"WWW-Authenticate": e.challenge})
        job_id = request.path_params["job_id"]
        try:
            wire = await _resolved(jobs.get(job_id, tenant))
        except Unavailable as e:
            return _error(503, "unavailable", str(e),
                          headers={"Retry-After": _retry_after(e.retry_after_s)})
        if wire is None:
            shown = job_id if len(job_id) <= 40 else job_id[:40] + "..."
            return _error(404, "not_found", f"no job {shown!r} (unknown, purged after its "
                                            "TTL, or another tenant's)")
        if wire.get("status") == "expired":
            return _error(410, "expired", f"job {job_id!r} finished and its result expired")
        return JSONResponse(wire)

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
        Route("/v1/jobs/{job_id}", observed(get_job), methods=["GET"]),
        Route("/v1/{endpoint}/jobs", observed(create_job), methods=["POST"]),
        Route("/v1/{endpoint}", observed(predict), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
    ], lifespan=lifespan)
    asgi.state.api_keys = keys
    return asgi
