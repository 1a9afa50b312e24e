"""The router's route handlers: one method per route on `Handlers`, which holds what they
need (the app, the backend, the job queue, admission, metrics, the deadline hand-off).

Handlers answer the happy path and raise for everything else (`floodway.http.errors` turns
the exception into its error answer). ``POST /v1/<endpoint>``: admission, then either the
job queue (``Prefer: respond-async``; an Idempotency-Key that already names a job), or
`decide()`: dispatch or queue on the backend, spill to a cold container or to the job
queue, or shed. The decision is noted for every answer (``X-Floodway-Decision``, for clients
and load tests, not a contract).

A streaming endpoint's request passes the same admission, then `decide_stream()` on the
backend's `stream_snapshot` (its sequences: slots, KV cache, tokens; the deadline bounds the
time to the first token; 413 for a sequence that cannot fit a container's KV cache at all),
then `open_stream` waits for its first event (the deadline hand-off applies only until
then) and the answer streams (`floodway.http.streaming`: SSE, NDJSON) or, for a client that
did not ask for a stream, is the chunks combined per input.

``/healthz`` always answers; with `private_detail`, ``/metrics`` needs a valid key and
``/readyz`` shows its detail only to one (its status to anyone).

`run_sync` and `open_stream(..., allow_async=False)` are the same paths for routes whose
clients cannot follow a job (the OpenAI-compatible ones): no async spill, no hand-off, no
``Prefer: respond-async``.

The response cache (`floodway.cache`, `floodway.http.cache`) is looked up after admission
and before `decide()` on the sync path of an endpoint that caches: only the items it does
not hold are decided on and run (a request it answers whole touches no backend), their
outputs merged in order and stored. A request that becomes a job (``Prefer:
respond-async``, the async spill, a hand-off that submits) runs all its inputs there; a
hand-off that adopts the work under way merges the cached outputs into the job's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from floodway.cache import Lookup, ResponseCache
from floodway.core.backend import Backend, StreamPending
from floodway.core.job_queue import Jobs
from floodway.core.stream_events import ItemFailed
from floodway.errors import RequestError, Unauthorized
from floodway.functions.app import App
from floodway.http.admit import Admission, Admitted
from floodway.http.cache import directives, noted
from floodway.http.errors import NoJobQueue, Overloaded
from floodway.http.handoff import DeadlineHandoff, HandOff, Way
from floodway.http.metrics import Metrics
from floodway.http.middleware import notes
from floodway.http.responses import JSONResponse, job_answer, outputs, prefers
from floodway.http.streaming import (
    FirstEvent,
    ItemStream,
    collect_unless_gone,
    disconnected,
    stream_mode,
    stream_response,
)
from floodway.routers.decide import Action, Decision, decide
from floodway.routers.decide import Request as DecideRequest
from floodway.routers.decide_stream import StreamRequest, decide_stream
from floodway.routers.lanes import lane_of, split_unit, unit_key
from floodway.routers.sequences import sequence_cost
from floodway.routers.tokens import row_tokens


def _no_lag() -> float:
    return 0.0


class Handlers:
    """The routes of one router. `jobs` None: no async job queue (its routes answer 501 and
    `decide()` is not offered the async spill). `cache`: the response cache. `lag()`: the
    router's recent event-loop lag in seconds (`floodway.http.looplag.LoopLag.recent_s`),
    which the decisions count against each request's time left."""

    def __init__(self, app: App, backend: Backend, jobs: Jobs | None, *,
                 admission: Admission, metrics: Metrics, handoff: DeadlineHandoff,
                 cache: ResponseCache, private_detail: bool = False,
                 lag: Callable[[], float] = _no_lag):
        self.app, self.backend, self.jobs = app, backend, jobs
        self.admission, self.metrics, self.handoff = admission, metrics, handoff
        self.cache, self.private_detail, self.lag = cache, private_detail, lag

    def _left_s(self, a: Admitted) -> float:
        """Seconds until `a`'s deadline now (its deadline runs from its arrival)."""
        return a.left_s(self.admission.clock.monotonic())

    def _keyed(self, request: Request) -> bool:
        """Whether `request` carries a valid key (any request, when no keys are set)."""
        try:
            self.admission.tenant(request)
        except Unauthorized:
            return False
        return True

    # ------------------------------------------------------------------ routes
    async def predict(self, request: Request) -> Response:
        """``POST /v1/<endpoint>``: 200 with one output per input, or 202 + a job."""
        name = request.path_params["endpoint"]
        a = await self.admission.admit(request, name)
        if self.app.endpoints[name].streaming:
            return await self._streamed(request, name, a)
        if "respond-async" in prefers(request):
            return await self._submit(request, name, a)
        if (known := await self._keyed_job(request, name, a)) is not None:
            return known
        look = await self._look_up(request, name, a)
        if look.complete:   # answered whole from the cache: no decision, no backend
            return JSONResponse({"outputs": outputs(name, a.inputs, look.merge([]))})
        unit = self._lane(request, name, look.run)
        return await self._decided(request, name, a, look,
                                   self._decide(request, unit, a, look.run), unit)

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
        """200 once ready, else 503; with the backend's detail, unless `private_detail` and
        the request carries no valid key (then only ``{"ready"}``: a probe needs no more)."""
        detail = self.backend.readiness()
        status = 200 if detail.get("ready") else 503
        if self.private_detail and not self._keyed(request):
            return JSONResponse({"ready": bool(detail.get("ready"))}, status_code=status)
        return JSONResponse(detail, status_code=status)

    async def metrics_page(self, request: Request) -> Response:
        """Prometheus text; with `private_detail`, only for a request with a valid key
        (401 otherwise, as any keyed route)."""
        if self.private_detail:
            self.admission.tenant(request)   # raises Unauthorized (401)
        if self.jobs is not None:
            await self.jobs.refresh()
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type)

    # ------------------------------------------------------------------ the sync path
    async def run_sync(self, request: Request, name: str, a: Admitted) -> list[Any]:
        """Admitted request `a` to endpoint `name` (not streaming) on the sync path without
        the job queue: `decide()` without the async spill, then shed (Overloaded, 503), or
        dispatch / queue / a cold container, and wait for one output per input
        (`floodway.http.responses.outputs`: raises for a failed one), the inputs withdrawn
        when the client leaves (ClientClosed). No deadline hand-off: past the deadline,
        TimeoutError (504). The response cache answers what it holds first."""
        look = await self._look_up(request, name, a)
        if look.complete:
            return outputs(name, a.inputs, look.merge([]))
        unit = self._lane(request, name, look.run)
        await self._spilled(request, name, a, self._decide(request, unit, a, look.run,
                                                           allow_async=False), unit)
        got = await self._wait(request, unit, a, look.run, may_hand_off=False)
        assert not isinstance(got, HandOff)   # never without may_hand_off
        return outputs(name, a.inputs, self._cached(look, got))

    async def _look_up(self, request: Request, name: str, a: Admitted) -> Lookup:
        """The response cache's answer for `a`'s inputs, as the request's ``Cache-Control``
        allows (`floodway.http.cache.directives`), noted on the answer. With API keys
        configured, only the caller's own entries (`ResponseCache.lookup`'s `tenant`)."""
        read, write = directives(request)
        tenant = a.tenant if self.admission.keys else None
        look = await self.cache.lookup(name, a.inputs, read=read, write=write, tenant=tenant)
        noted(request, look)
        return look

    def _cached(self, look: Lookup, results: list[Any]) -> list[Any]:
        """`results` of the items `look` left to run: stored, and merged with the cached
        outputs into one per input."""
        self.cache.store(look, results)
        return look.merge(results)

    def _cached_later(self, look: Lookup, work: Awaitable[list[Any]]) -> Awaitable[list[Any]]:
        """`work` (the results of `look.run`, under way) as the whole request's results,
        stored when they come. Cancelling it cancels `work`, even before it ran (a job
        queue that cannot adopt withdraws the work so)."""
        if look.build is None:
            return work
        inner = asyncio.ensure_future(work)
        outer = asyncio.get_running_loop().create_future()

        def finish(f: asyncio.Future) -> None:
            if outer.done():
                return
            if f.cancelled():
                outer.cancel()
            elif (e := f.exception()) is not None:
                outer.set_exception(e)
            else:
                outer.set_result(self._cached(look, f.result()))

        inner.add_done_callback(finish)
        outer.add_done_callback(lambda o: inner.cancel() if o.cancelled() else None)
        return outer

    def _lane(self, request: Request, name: str, inputs: list[Any]) -> str:
        """The unit `inputs` (of a request to `name`) are served by: `name`, or the key of
        the lane they take (`floodway.routers.lanes`), noted as ``X-Floodway-Lane``."""
        ep = self.app.endpoints[name]
        lane = lane_of(ep, inputs)
        if lane is None:
            return name
        notes(request.scope).headers["X-Floodway-Lane"] = lane.name
        return unit_key(name, lane.name)

    def _decide(self, request: Request, unit: str, a: Admitted, inputs: list[Any], *,
                allow_async: bool = True) -> Decision:
        """`decide()` for `inputs` (those of `a`'s the cache did not answer) on `unit` (the
        endpoint, or the lane they take)."""
        snap = replace(self.backend.snapshot(unit), loop_lag_s=self.lag())
        name = split_unit(unit)[0]
        return self._noted(request, unit, decide(snap, DecideRequest(
            rows=len(inputs), deadline_s=snap.now_s + self._left_s(a), priority=int(a.priority),
            tenant=a.tenant, allow_async=allow_async and self.jobs is not None,
            row_tokens=row_tokens(self.app.endpoints[name], inputs))))

    def _decide_stream(self, request: Request, name: str, a: Admitted, *,
                       allow_async: bool) -> Decision:
        """`decide_stream()` for a streaming endpoint's request: one sequence per input,
        its prompt tokens estimated from the items and its max_new_tokens each item's own
        (else the endpoint's `Generation.max_new_tokens`; the largest counts for all)."""
        gen = self.app.endpoints[name].generation
        assert gen is not None   # every streaming endpoint has one
        costs = [sequence_cost(item, gen.max_new_tokens) for item in a.inputs]
        snap = replace(self.backend.stream_snapshot(name), loop_lag_s=self.lag())
        return self._noted(request, name, decide_stream(snap, StreamRequest(
            prompt_tokens=sum(c.prompt_tokens for c in costs),
            max_new_tokens=max(c.max_new_tokens for c in costs),
            deadline_s=snap.now_s + self._left_s(a), priority=int(a.priority), tenant=a.tenant,
            allow_async=allow_async and self.jobs is not None, sequences=len(costs))))

    def _noted(self, request: Request, unit: str, decision: Decision) -> Decision:
        name, lane = split_unit(unit)
        self.metrics.decided(name, decision, lane)
        notes(request.scope).headers["X-Floodway-Decision"] = str(decision.action)
        return decision

    async def _spilled(self, request: Request, name: str, a: Admitted, decision: Decision,
                       unit: str | None = None) -> Response | None:
        """Carry out a shed (raised) or a spill: a job's 202 for the async spill, None to
        go on (a cold container started for the cold spill, in `unit`: the lane, if any)."""
        unit = unit or name
        if decision.start_cold:
            self.backend.start_cold(unit)
        if decision.action == Action.SHED and decision.status == 413:
            raise RequestError(f"endpoint {name!r} cannot serve this request: "
                               f"{decision.reason}", status=413, field="inputs")
        if decision.action == Action.SHED:
            raise Overloaded(f"endpoint {name!r} is over capacity: {decision.reason}",
                             retry_after_s=decision.retry_after_s, status=decision.status or 503)
        if decision.action == Action.SPILL_ASYNC:
            return await self._submit(request, name, a)
        if decision.action == Action.SPILL_COLD:
            self.backend.start_cold(unit)
        return None

    async def _decided(self, request: Request, name: str, a: Admitted, look: Lookup,
                       decision: Decision, unit: str) -> Response:
        """Carry out `decision` for the items `look` left to run (in `unit`); a job runs
        them all."""
        if (spilled := await self._spilled(request, name, a, decision, unit)) is not None:
            return spilled
        got = await self._wait(request, unit, a, look.run,
                               may_hand_off=self._can_spill_async(name))
        if isinstance(got, HandOff):
            # Near its deadline: the async queue takes it over rather than a 504.
            self.metrics.handed_off(name)
            notes(request.scope).headers["X-Floodway-Handoff"] = "deadline"
            work = got.work if got.work is None else self._cached_later(look, got.work)
            return await self._submit(request, name, a, work)
        return JSONResponse({"outputs": outputs(name, a.inputs, self._cached(look, got))})

    async def _wait(self, request: Request, unit: str, a: Admitted, inputs: list[Any], *,
                    may_hand_off: bool) -> list[Any] | HandOff:
        """Queue `inputs` (of request `a`) in `unit` and wait for their results (or the
        hand-off), until `a`'s deadline (from its arrival)."""
        name = split_unit(unit)[0]
        left_s = max(0.0, self._left_s(a))
        # Queued before this handler yields: a burst's next decisions must see it.
        pending = self.backend.enqueue(unit, inputs, timeout_s=left_s,
                                       priority=int(a.priority), tenant=a.tenant)
        try:
            return await self.handoff.wait(pending, disconnected(request), budget_s=left_s,
                                           may_hand_off=may_hand_off)
        except TimeoutError:
            raise TimeoutError(f"endpoint {name!r} did not answer within {a.budget_s:g} s") \
                from None

    # ------------------------------------------------------------------ streams
    async def _streamed(self, request: Request, name: str, a: Admitted) -> Response:
        """A streaming endpoint's answer: streamed when the client asked, else buffered."""
        mode = stream_mode(request)   # a 406 before any work
        stream = await self.open_stream(request, name, a)
        if isinstance(stream, Response):
            return stream
        if mode is not None:
            return stream_response(stream, mode)
        results = await collect_unless_gone(request, stream, len(a.inputs))
        return JSONResponse({"outputs": outputs(name, a.inputs, results)})

    async def open_stream(self, request: Request, name: str, a: Admitted, *,
                          t0_s: float | None = None,
                          allow_async: bool = True) -> ItemStream | Response:
        """Admitted request `a` to streaming endpoint `name`, through `decide_stream()`, as
        an `ItemStream` once its first event arrived (`t0_s`: its arrival on the clock, for
        the time to first chunk; default `a.arrival_s`). Returns a Response instead for a job (202:
        ``Prefer: respond-async``, the async spill, or the hand-off of a request with no
        chunk yet near its deadline; 200 for a known Idempotency-Key's job). With
        `allow_async` False none of these (a client that cannot follow a job): ``Prefer:
        respond-async`` and Idempotency-Key are ignored, and it always returns an
        ItemStream. Raises as `predict` does (Overloaded when shed, RequestError 413 for a
        sequence no container's KV cache can hold, ClientClosed, Unavailable); a one-input
        request that failed before its first chunk raises that error (TimeoutError: 504)."""
        t0_s = a.arrival_s if t0_s is None else t0_s
        if allow_async and "respond-async" in prefers(request):
            return await self._submit(request, name, a)
        if allow_async and (known := await self._keyed_job(request, name, a)) is not None:
            return known
        decision = self._decide_stream(request, name, a, allow_async=allow_async)
        if (spilled := await self._spilled(request, name, a, decision)) is not None:
            return spilled
        left_s = max(0.0, self._left_s(a))
        pending = cast(StreamPending, self.backend.enqueue(
            name, a.inputs, timeout_s=left_s, priority=int(a.priority), tenant=a.tenant))
        try:
            got = await self.handoff.wait(
                FirstEvent(pending), disconnected(request), budget_s=left_s,
                may_hand_off=allow_async and self._can_spill_async(name))
        except BaseException:
            self.metrics.cancelled(name, pending.cancel())
            raise
        if isinstance(got, HandOff):
            if got.way == Way.SUBMIT:
                pending.cancel()   # none of it reached a container: a job runs it anew
            self.metrics.handed_off(name)
            notes(request.scope).headers["X-Floodway-Handoff"] = "deadline"
            return await self._submit(request, name, a, got.work)
        first = got[0]
        if isinstance(first, ItemFailed) and len(a.inputs) == 1:
            raise first.error
        return ItemStream(pending, endpoint=name, metrics=self.metrics, t0_s=t0_s, first=first)

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
