"""Admission over HTTP: what a request must pass before any work, in order.

    Authorization (bearer API key)        401 unauthorized          (`tenant_of`)
    unknown endpoint                      404 not_found (after the key: a caller without
                                          one never learns the endpoints)
    X-Priority, X-Deadline-Ms             400 invalid_request       (`parse_priority`, ...)
    the tenant's token bucket             429 rate_limited + Retry-After (`TenantLimiter`)
    the body: size, arrival, payload      413 too_large, 408 request_timeout, 400/422
    a streaming endpoint's sequences      413 too_large (more than its priority can
                                          ever be admitted with, `check_sequences`; the
                                          backend's own cap: `decide_stream`), 422
                                          (max_new_tokens)

The body is read last, and never buffered beyond the route's limit: a refused request costs
no upload. Every refusal is raised (`floodway.http.errors` answers it).

`Admission.admit_foreign` admits a body of another shape (the OpenAI-compatible routes),
which names its endpoint inside the body: the same checks, in the order the body allows
(Authorization, X-Priority, X-Deadline-Ms, the body read within the largest route's limit
and parsed, then the endpoint named (404), its own body limit (413), the tenant's rate
(429) and the per-item validation of the inputs the body made).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from floodway.core.clock import Clock, within
from floodway.errors import RequestError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.functions.items import decodes_images, pixel_tally
from floodway.http.errors import ClientClosed, Overloaded
from floodway.http.metrics import Metrics
from floodway.http.middleware import notes
from floodway.routers.admission import (
    ApiKeys,
    Priority,
    TenantLimiter,
    parse_deadline,
    parse_priority,
    tenant_of,
)
from floodway.routers.decide import QUEUE_SHARE
from floodway.routers.decide_stream import PRIORITY_NAMES
from floodway.routers.lanes import unit_of
from floodway.routers.schema import parse_predict, validate_items

# A client that trickles its body must not hold a connection for ever.
BODY_TIMEOUT_S = 30.0
# Bodies larger than this are parsed on a thread (a 64 KiB body parses in well under a
# millisecond; a 4 MiB one of many small items took about a second on the event loop).
PARSE_IN_THREAD_BYTES = 64 * 1024


# Threads verifying image requests (their headers, and base64 of up to 10 MiB each).
IMAGE_THREADS = min(4, os.cpu_count() or 1)
_image_executor: ThreadPoolExecutor | None = None
_image_executor_lock = threading.Lock()


def image_executor() -> ThreadPoolExecutor:
    """The executor that parses the requests of endpoints taking images: IMAGE_THREADS
    threads of its own, apart from asyncio's default pool (other endpoints' parsing)."""
    global _image_executor
    with _image_executor_lock:
        if _image_executor is None:
            _image_executor = ThreadPoolExecutor(IMAGE_THREADS,
                                                 thread_name_prefix="floodway-images")
        return _image_executor


def parse_images(body: bytes, ep: Endpoint) -> list[Any]:
    """`parse_predict` for an endpoint taking images, their pixels summed over the request
    (`floodway.functions.items.pixel_tally`; 413 naming the item past
    ImageSpec.max_request_pixels)."""
    with pixel_tally():
        return parse_predict(body, ep.input_type, max_inputs=ep.route.max_inputs)


@dataclass(frozen=True)
class Admitted:
    """A request that passed admission: who sent it, how urgent, its deadline in seconds
    from arrival, its validated inputs, and when it arrived (`arrival_s`, on the router's
    monotonic clock: when its route was first called, before its body was read). Its
    deadline runs from its arrival: reading the body and admission spend it too."""

    tenant: str
    priority: Priority
    budget_s: float
    inputs: list[Any]
    arrival_s: float

    @property
    def deadline_s(self) -> float:
        """Its deadline on the router's monotonic clock."""
        return self.arrival_s + self.budget_s

    def left_s(self, now_s: float) -> float:
        """Seconds left until its deadline at `now_s` (negative: past it)."""
        return self.deadline_s - now_s


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit` bytes:
    from Content-Length before reading anything, else while streaming (never buffered whole)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body is {int(declared)} bytes; the limit is {limit}",
                           status=413)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(f"request body exceeds the limit of {limit} bytes",
                                   status=413)
            chunks.append(chunk)
    except ClientDisconnect:
        # The client left mid-upload: its answer (499) reaches no one, but it is no
        # server error either.
        raise ClientClosed("the client closed the connection before its body arrived") \
            from None
    return b"".join(chunks)


class Admission:
    """Admission for every endpoint of `app`: `keys` (empty: no authentication), one
    token-bucket limiter per route, `clock` for the buckets and the body's arrival.
    `on_arrival(unit, unix_s)` is called once per admitted request (the warm policies'
    traffic history; `unit`: the endpoint, or the key of the lane it takes); it runs on
    the event loop, so it must be cheap and not raise."""

    def __init__(self, app: App, keys: ApiKeys, *, metrics: Metrics, clock: Clock,
                 on_arrival: Callable[[str, float], None] | None = None):
        self.app, self.keys, self.metrics, self.clock = app, keys, metrics, clock
        self.on_arrival = on_arrival
        self.limiters = {ep.name: TenantLimiter.for_route(ep.route) for ep in app}

    def endpoint(self, name: str, *, field: str | None = None) -> Endpoint:
        """The endpoint `name`; RequestError 404 (naming `field`, where the name came from)
        naming the known ones otherwise."""
        if name not in self.app.endpoints:
            known = ", ".join(sorted(self.app.endpoints)) or "(none)"
            shown = name if len(name) <= 40 else name[:40] + "..."
            raise RequestError(f"no endpoint {shown!r}; endpoints: {known}", status=404,
                               field=field)
        return self.app.endpoints[name]

    def arrival(self, request: Request) -> float:
        """When `request` arrived on the clock: as `Observe` noted it (its route was
        called), else now."""
        noted = notes(request.scope).arrival_s
        return self.clock.monotonic() if noted is None else noted

    def tenant(self, request: Request) -> str:
        """The request's tenant (`tenant_of`); raises Unauthorized (401)."""
        return tenant_of(request.headers.get("authorization"), self.keys)

    async def admit(self, request: Request, name: str) -> Admitted:
        """Everything above, in order; raises the first refusal."""
        arrival_s = self.arrival(request)
        tenant = self.tenant(request)
        ep = self.endpoint(name)
        priority = parse_priority(request.headers.get("x-priority"))
        budget_s = parse_deadline(request.headers.get("x-deadline-ms"),
                                  default_s=ep.route.timeout_s)
        self._check_rate(ep, tenant)
        body = await self._read(request, ep.route.max_body_bytes)
        if decodes_images(ep.input_type):
            # Images on their own threads (`image_executor`): many image requests at once
            # never hold up other endpoints' parsing in the default thread pool.
            inputs = await asyncio.get_running_loop().run_in_executor(
                image_executor(), parse_images, body, ep)
        elif len(body) > PARSE_IN_THREAD_BYTES:
            # Parsing and validating a large body takes milliseconds to a second of CPU: off
            # the event loop, so that other requests' deadlines keep being served.
            inputs = await asyncio.to_thread(parse_predict, body, ep.input_type,
                                             max_inputs=ep.route.max_inputs)
        else:
            inputs = parse_predict(body, ep.input_type, max_inputs=ep.route.max_inputs)
        check_sequences(ep, len(inputs), "inputs", int(priority))
        check_generation(ep, inputs)
        if self.on_arrival is not None:
            # admitted user traffic only, in its lane (each lane has its own warm pool)
            self.on_arrival(unit_of(ep, inputs), self.clock.wall())
        return Admitted(tenant, priority, budget_s, inputs, arrival_s)

    def _check_rate(self, ep: Endpoint, tenant: str) -> None:
        wait_s = self.limiters[ep.name].check(tenant, self.clock.monotonic())
        if wait_s > 0:
            self.metrics.shed(ep.name, 429)
            raise Overloaded(f"tenant over its rate of {ep.route.tenant_rate_per_s:g} "
                             f"requests/s for endpoint {ep.name!r}", retry_after_s=wait_s,
                             status=429, kind="rate_limited")

    async def _read(self, request: Request, limit: int) -> bytes:
        try:
            return await within(self.clock, read_body(request, limit), BODY_TIMEOUT_S)
        except TimeoutError:
            raise RequestError(f"the request body did not arrive within {BODY_TIMEOUT_S:g} s",
                               status=408) from None

    async def admit_foreign(self, request: Request, parse: ForeignParse, *,
                            accept: Callable[[Endpoint], None] | None = None,
                            items_field: str = "input") -> tuple[Endpoint, Admitted]:
        """Admit a body of another shape: `parse(body)` -> (the endpoint it names, its
        inputs as plain JSON items), raising RequestError for a bad body; `accept(endpoint)`
        raises RequestError when that endpoint cannot serve this kind of request. The
        endpoint's 404 names the field "model". The inputs are validated as the native
        route validates them (errors name ``inputs[i]``, as `parse_predict`); more than
        the route's max_inputs is a 413 naming `items_field`, as are more sequences than a
        streaming endpoint can ever hold (`check_sequences`). Returns the endpoint and the
        admitted request."""
        arrival_s = self.arrival(request)
        tenant = self.tenant(request)
        priority = parse_priority(request.headers.get("x-priority"))
        deadline = request.headers.get("x-deadline-ms")
        parse_deadline(deadline, default_s=0.0)   # a bad header is refused before the body
        limit = max((ep.route.max_body_bytes for ep in self.app), default=0)
        body = await self._read(request, limit)
        name, raw = await self._off_loop(len(body), parse, body)
        ep = self.endpoint(name, field="model")
        if accept is not None:
            accept(ep)
        if len(body) > ep.route.max_body_bytes:
            raise RequestError(f"request body is {len(body)} bytes; the limit of model "
                               f"{name!r} is {ep.route.max_body_bytes}", status=413)
        self._check_rate(ep, tenant)
        max_inputs = ep.route.max_inputs
        if max_inputs is not None and len(raw) > max_inputs:
            raise RequestError(f"{items_field}: the request makes {len(raw)} inputs; model "
                               f"{name!r} takes at most {max_inputs} per request (split it)",
                               status=413, field=items_field)
        check_sequences(ep, len(raw), items_field, int(priority))
        if decodes_images(ep.input_type):
            inputs = await asyncio.get_running_loop().run_in_executor(
                image_executor(), _validate_images, raw, ep.input_type)
        else:
            inputs = await self._off_loop(len(body), validate_items, raw, ep.input_type,
                                          check_unicode=True)
        check_generation(ep, inputs)
        if self.on_arrival is not None:
            self.on_arrival(unit_of(ep, inputs), self.clock.wall())
        budget_s = parse_deadline(deadline, default_s=ep.route.timeout_s)
        return ep, Admitted(tenant, priority, budget_s, inputs, arrival_s)

    @staticmethod
    async def _off_loop(size: int, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """`fn(*args, **kw)`, on a thread for a body over PARSE_IN_THREAD_BYTES."""
        if size > PARSE_IN_THREAD_BYTES:
            return await asyncio.to_thread(fn, *args, **kw)
        return fn(*args, **kw)


def most_sequences(ep: Endpoint, priority: int = int(Priority.HIGH)) -> int | None:
    """The most sequences one request at `priority` to streaming endpoint `ep` can ever be
    admitted with by its definition (None: not a streaming endpoint): dispatched whole onto
    every container it may run (`WarmPool.max_containers` x `Generation.max_sequences`),
    or queued whole within its priority's share of the queue (`QUEUE_SHARE` of
    `Route.max_queue`), as `decide_stream` admits it. A backend that runs fewer containers
    (the local pool: as many as the cores take) refuses more in `decide_stream`."""
    if ep.generation is None:
        return None
    share = QUEUE_SHARE[max(0, min(2, priority))]
    return max(ep.warm.container_cap * ep.generation.max_sequences,
               math.floor(ep.route.max_queue * share))


def check_sequences(ep: Endpoint, count: int, field: str,
                    priority: int = int(Priority.HIGH)) -> None:
    """A request at `priority` of `count` sequences (one per input) to `ep` within
    `most_sequences`, else RequestError 413 naming `field` (``inputs``; OpenAI's ``n``),
    the count and the limit: a request no wait would admit is not told to retry."""
    most = most_sequences(ep, priority)
    if most is None or count <= most:
        return
    gen, warm = ep.generation, ep.warm
    assert gen is not None
    cap = "" if warm.max_containers is not None else " (its default)"
    p = max(0, min(2, priority))
    raise RequestError(f"{field}: the request makes {count} sequences; endpoint {ep.name!r} "
                       f"admits at most {most} at {PRIORITY_NAMES[p]} priority: "
                       f"WarmPool.max_containers {warm.container_cap}{cap} x "
                       f"Generation.max_sequences {gen.max_sequences} running, or "
                       f"{QUEUE_SHARE[p]:g} of Route.max_queue {ep.route.max_queue} queued "
                       "(split the request)", status=413, field=field)


def check_generation(ep: Endpoint, inputs: list[Any]) -> None:
    """A streaming endpoint's items within its fw.Generation: an item's ``max_new_tokens``
    at most `Generation.max_new_tokens` (the cap fw.Prompt cannot know), else a 422 naming
    the item's field, the value and the cap."""
    if ep.generation is None:
        return
    cap = ep.generation.max_new_tokens
    for i, item in enumerate(inputs):
        asked = item.get("max_new_tokens") if isinstance(item, dict) else None
        if isinstance(asked, int) and asked > cap:
            raise RequestError(f"inputs[{i}].max_new_tokens: {asked} is over the cap of "
                               f"endpoint {ep.name!r}; allowed: 1 to {cap}", status=422,
                               field=f"inputs[{i}].max_new_tokens")


# A foreign body's parser: body -> (the endpoint it names, its inputs as JSON items).
ForeignParse = Callable[[bytes], tuple[str, list[Any]]]


def _validate_images(raw: list[Any], item_type: Any) -> list[Any]:
    with pixel_tally():
        return validate_items(raw, item_type, check_unicode=True)


__all__ = ["BODY_TIMEOUT_S", "IMAGE_THREADS", "Admission", "Admitted", "ForeignParse",
           "check_generation", "check_sequences", "image_executor", "most_sequences",
           "parse_images", "read_body"]
