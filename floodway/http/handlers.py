"""The router's route handlers: one method per route on `Handlers`, which holds what they
need (the app, the backend, the job queue, admission, metrics, the deadline hand-off).

Handlers answer the happy path and raise for everything else (`floodway.http.errors` turns
the exception into its error answer). ``POST /v1/<endpoint>``: admission, then either the
job queue (``Prefer: respond-async``; an Idempotency-Key that already names a job), or
`decide()`: dispatch or queue on the backend, spill to a cold container or to the job
queue, or shed. The decision is noted for every answer (``X-Floodway-Decision``, for clients
and load tests, not a contract).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from floodway.errors import RequestError
from floodway.functions.app import App
from floodway.http.admit import Admission, Admitted
from floodway.http.errors import NoJobQueue, Overloaded
from floodway.http.handoff import DeadlineHandoff, HandOff
from floodway.http.metrics import Metrics
from floodway.http.middleware import notes
from floodway.http.protocols import Backend, Jobs
from floodway.http.responses import JSONResponse, job_answer, outputs, prefers
from floodway.routers.decide import Action, Decision, decide
from floodway.routers.decide import Request as DecideRequest


async def disconnected(request: Request) -> None:
    """Return once the client has gone away (ASGI http.disconnect after the body)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Handlers:
    """The routes of one router. `jobs` None: no async job queue (its routes answer 501 and
    `decide()` is not offered the async spill)."""

    def __init__(self, app: App, backend: Backend, jobs: Jobs | None, *,
                 admission: Admission, metrics: Metrics, handoff: DeadlineHandoff):
        self.app, self.backend, self.jobs = app, backend, jobs
        self.admission, self.metrics, self.handoff = admission, metrics, handoff

    # ------------------------------------------------------------------ routes
    async def predict(self, request: Request) -> Response:
        """``POST /v1/<endpoint>``: 200 with one output per input, or 202 + a job."""
        name = request.path_params["endpoint"]
        a = await self.admission.admit(request, name)
        if "respond-async" in prefers(request):
            return await self._submit(request, name, a)
        if (known := await self._keyed_job(request, name, a)) is not None:
            return known
        snap = self.backend.snapshot(name)
        decision = decide(snap, DecideRequest(
            rows=len(a.inputs), deadline_s=snap.now_s + a.budget_s, priority=int(a.priority),
            tenant=a.tenant, allow_async=self.jobs is not None))
        self.metrics.decided(name, decision)
        notes(request.scope).headers["X-Floodway-Decision"] = str(decision.action)
        return await self._decided(request, name, a, decision)

    async def create_job(self, request: Request) -> Response:
        """``POST /v1/<endpoint>/jobs``: 202 + Location (200 for a repeated key)."""
        name = request.path_params["endpoint"]
        a = await self.admission.admit(request, name)
        return await self._submit(request, name, a)

    async def get_job(self, request: Request) -> Response:
        """``GET /v1/jobs/<id>``: the job's status and result; 404 unknown or another
        tenant's, 410 once its result expired."""
        jobs = self._jobs()
        tenant = self.admission.tenant(request)
        job_id = request.path_params["job_id"]
        wire = await jobs.get(job_id, tenant)
        if wire is None:
            shown = job_id if len(job_id) <= 40 else job_id[:40] + "..."
            raise RequestError(f"no job {shown!r} (unknown, purged after its TTL, or another "
                               "tenant's)", status=404)
        if wire.get("status") == "expired":
            raise RequestError(f"job {job_id!r} finished and its result expired", status=410)
        return JSONResponse(wire)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        detail = self.backend.readiness()
        return JSONResponse(detail, status_code=200 if detail.get("ready") else 503)

    async def metrics_page(self, request: Request) -> Response:
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type)

    # ------------------------------------------------------------------ the sync path
    async def _decided(self, request: Request, name: str, a: Admitted,
                       decision: Decision) -> Response:
        if decision.start_cold:
            self.backend.start_cold(name)
        if decision.action == Action.SHED:
            raise Overloaded(f"endpoint {name!r} is over capacity: {decision.reason}",
                             retry_after_s=decision.retry_after_s, status=decision.status or 503)
        if decision.action == Action.SPILL_ASYNC:
            return await self._submit(request, name, a)
        if decision.action == Action.SPILL_COLD:
            self.backend.start_cold(name)
        # Queued before this handler yields: a burst's next decisions must see it.
        pending = self.backend.enqueue(name, a.inputs, timeout_s=a.budget_s,
                                       priority=int(a.priority), tenant=a.tenant)
        try:
            got = await self.handoff.wait(pending, disconnected(request), budget_s=a.budget_s,
                                          may_hand_off=self._can_spill_async(name))
        except TimeoutError:
            raise TimeoutError(f"endpoint {name!r} did not answer within {a.budget_s:g} s") \
                from None
        if isinstance(got, HandOff):
            # Near its deadline: the async queue takes it over rather than a 504.
            self.metrics.handed_off(name)
            notes(request.scope).headers["X-Floodway-Handoff"] = "deadline"
            return await self._submit(request, name, a, got.work)
        return JSONResponse({"outputs": outputs(name, a.inputs, got)})

    def _can_spill_async(self, name: str) -> bool:
        return self.jobs is not None and "async" in self.app.endpoints[name].route.spill

    # ------------------------------------------------------------------ the job queue
    def _jobs(self) -> Jobs:
        if self.jobs is None:
            raise NoJobQueue("this router has no async job queue")
        return self.jobs

    async def _submit(self, request: Request, name: str, a: Admitted,
                      work: Awaitable[list[Any]] | None = None) -> Response:
        """202 + Location for a new job (200 for an Idempotency-Key's existing one). With
        `work` (the request's results, already under way), the job adopts it."""
        jobs = self._jobs()
        key = request.headers.get("idempotency-key")
        if work is None:
            wire, created = await jobs.submit(name, a.inputs, tenant=a.tenant,
                                              priority=a.priority, idempotency_key=key)
        else:
            wire, created = await jobs.adopt(name, a.inputs, work, tenant=a.tenant,
                                             priority=a.priority, idempotency_key=key)
        return job_answer(request, wire, created)

    async def _keyed_job(self, request: Request, name: str, a: Admitted) -> Response | None:
        """With an Idempotency-Key on the sync route: the job already stored under it (as
        ``/jobs`` answers a repeat), or None to go on. A request handed off to the job queue
        is stored under its key, so a retry finds it instead of running again."""
        key = request.headers.get("idempotency-key")
        if key is None or not self._can_spill_async(name):
            return None
        wire = await self._jobs().find(name, a.inputs, tenant=a.tenant, idempotency_key=key)
        return None if wire is None else job_answer(request, wire, False)


__all__ = ["Handlers", "disconnected"]
