"""The router's ASGI app (Starlette), shared by the local runtime and the Modal router.

    POST /v1/<endpoint>       {"inputs": [...]} -> 200 {"outputs": [...]}, one per input;
                              `Prefer: respond-async` -> 202 + Location, as /jobs below
    POST /v1/<endpoint>/jobs  -> 202 {"id", "status", ...} + Location: /v1/jobs/<id>
                              (200 with the same job for a repeated Idempotency-Key)
    GET  /v1/jobs/<id>        -> status and, once done, outputs or error; 404 / 410 expired
    GET  /healthz         200 while the process is up
    GET  /readyz          200 once a container of every endpoint is warm, else 503; with detail
    GET  /metrics         Prometheus metrics (`floodway.http.metrics`)
    GET  /openapi.json    the OpenAPI document (`floodway.http.openapi`); /docs: Swagger UI

    GET  /v1/models, /v1/models/{model}, POST /v1/embeddings, /v1/completions,
         /v1/chat/completions
                          the OpenAI-compatible routes (`floodway.http.openai`), matched
                          before /v1/<endpoint>: those names are reserved
                          (`floodway.functions.endpoint.RESERVED_NAMES`)

The pieces: `admit` (auth, headers, tenant rate, body), `handlers` (one method per route),
`handoff` (a sync request near its deadline becomes a job), `errors` (exception -> error
answer), `middleware` (metrics and Server-Timing per API route), `responses`, `cache` (the
response cache's headers; the cache is `floodway.cache`). Where the work runs is a
`Backend`, the job queue a `Jobs` (`floodway.core.backend`, `floodway.core.job_queue`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from floodway.cache import ResponseCache, SharedKV
from floodway.core.backend import Backend
from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.core.job_queue import Jobs
from floodway.functions.app import App
from floodway.http.admit import Admission
from floodway.http.errors import EXCEPTION_HANDLERS
from floodway.http.handlers import Handlers
from floodway.http.handoff import DeadlineHandoff
from floodway.http.looplag import LoopLag
from floodway.http.metrics import Metrics
from floodway.http.middleware import UNKNOWN_LABEL, Observe
from floodway.http.openai import OpenAIRoutes
from floodway.http.openapi import OpenAPIPage
from floodway.routers.admission import ApiKeys


def make_asgi_app(app: App, backend: Backend, *, lifespan: Any = None,
                  api_keys: ApiKeys | None = None, jobs: Jobs | None = None,
                  on_arrival: Callable[[str, float], None] | None = None,
                  clock: Clock = SYSTEM_CLOCK,
                  build_key: Callable[[str], str | None] | None = None,
                  shared_cache: SharedKV | None = None,
                  private_detail: bool = False) -> Starlette:
    """The router ASGI app for every endpoint of `app`, running work on `backend`.

    `lifespan` (a Starlette lifespan context) starts and stops the backend with the server.
    `api_keys` (empty: no authentication) are required as bearer tokens; `jobs` (None: no
    async jobs, and "async" spills are not offered) backs the job routes. `on_arrival(unit,
    unix_s)` (`unit`: the endpoint, or the key of the lane the request takes, "embed:short")
    is called once per user request (``POST /v1/<endpoint>`` and its ``/jobs``) that
    passed admission, before the decision: the warm policies' traffic history. Probes and
    other routes never call it. It runs on the event loop, so it must be cheap and not raise.
    `clock`: token buckets, arrivals, the hand-off and body timeouts, Server-Timing, the
    response cache's time to live.
    `build_key(endpoint)`: the key of the build serving `endpoint` now (None: unknown, or
    two builds during a rollout); the response cache (`floodway.cache`) keys outputs by it
    and is off without it. `shared_cache`: the store of the cache's shared tier (a
    `modal.Dict` on Modal), for endpoints with ``fw.Cache(shared=True)``.
    `private_detail`: ``/metrics`` and the detail of ``/readyz`` (process ids, build ids,
    queues, job counts) need a valid key (`floodway.http.handlers.Handlers`); ``/healthz``
    stays open. With no keys configured nothing is refused.
    The keys are kept as ``state.api_keys``, the response cache as ``state.cache``, the
    metrics as ``state.metrics``.
    """
    keys = api_keys or ApiKeys()
    cache = ResponseCache(app, build_key or _no_build, monotonic=clock.monotonic,
                          wall=clock.wall, shared=shared_cache)
    metrics = Metrics(backend.readiness, jobs.counts if jobs is not None else None,
                      cache_stats=cache.stats)
    backend.add_batch_listener(metrics.batch)
    lag = LoopLag(observe=metrics.loop_lag.observe,
                  gc_pause=lambda gen, s: metrics.gc_pause.labels(str(gen)).observe(s))
    metrics.lag_source(lag.recent_s)
    admission = Admission(app, keys, metrics=metrics, clock=clock, on_arrival=on_arrival)
    h = Handlers(app, backend, jobs, admission=admission, metrics=metrics,
                 handoff=DeadlineHandoff(clock, lag=lag.recent_s), cache=cache,
                 private_detail=private_detail, lag=lag.recent_s)
    observed = [Middleware(Observe, metrics=metrics, endpoints=frozenset(app.endpoints),
                           clock=clock)]
    # Named by the body's "model", not the path: "(unknown)" until the handler knows it.
    by_model = [Middleware(Observe, metrics=metrics, endpoints=frozenset(app.endpoints),
                           clock=clock, pathless=UNKNOWN_LABEL)]
    oa = OpenAIRoutes(h, clock)
    page = OpenAPIPage(h)
    routes = [
        Route("/v1/models", oa.models, methods=["GET"]),
        Route("/v1/models/{model}", oa.model, methods=["GET"]),
        Route("/v1/embeddings", oa.embeddings, methods=["POST"], middleware=by_model),
        Route("/v1/completions", oa.completions, methods=["POST"], middleware=by_model),
        Route("/v1/chat/completions", oa.chat_completions, methods=["POST"],
              middleware=by_model),
        Route("/v1/jobs/{job_id}", h.get_job, methods=["GET"], middleware=observed),
        Route("/v1/{endpoint}/jobs", h.create_job, methods=["POST"], middleware=observed),
        Route("/v1/{endpoint}", h.predict, methods=["POST"], middleware=observed),
        Route("/healthz", h.healthz, methods=["GET"]),
        Route("/readyz", h.readyz, methods=["GET"]),
        Route("/metrics", h.metrics_page, methods=["GET"]),
        Route("/openapi.json", page.page, methods=["GET"]),
        Route("/docs", page.docs, methods=["GET"]),
    ]
    asgi = Starlette(exception_handlers=EXCEPTION_HANDLERS, lifespan=_lagged(lag, lifespan),
                     routes=routes)
    asgi.state.api_keys = keys
    asgi.state.cache = cache
    asgi.state.metrics = metrics
    asgi.state.loop_lag = lag
    return asgi


def _lagged(lag: LoopLag, inner: Any) -> Any:
    """`inner` (a Starlette lifespan, or None) with the event-loop lag sampled while the
    server runs, and what the router holds once started (the app, its modules, the
    backend) moved out of the garbage collector's view (`gc.freeze`): a full collection then
    walks only what requests made since, not the whole process (full collections of the
    unfrozen router took 80-130 ms of the loop under a burst)."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        lag.start()
        try:
            if inner is None:
                gc.freeze()
                yield
            else:
                async with inner(app):
                    gc.freeze()
                    yield
        finally:
            gc.unfreeze()
            await lag.stop()
    return lifespan


def _no_build(endpoint: str) -> None:
    """No build known: the response cache stays off."""
    return None


__all__ = ["make_asgi_app"]
