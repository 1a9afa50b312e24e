"""`floodway serve`: the local router (uvicorn) in front of a Pool of containers.

It binds to loopback unless API keys are configured: beyond this machine, bearer-token auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import uvicorn

from floodway.build.store import ArtifactStore
from floodway.errors import FloodwayError
from floodway.functions.discover import load_app
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs, default_jobs_path
from floodway.jobs.quota import MAX_BYTES, MAX_TENANT_BYTES
from floodway.routers.admission import API_KEYS_ENV, ApiKeys
from floodway.routers.lanes import split_unit
from floodway.runtime.connections import (
    ConnectionLimits,
    ConnectionStats,
    limits_from_env,
    raise_fd_limit,
    uvicorn_options,
)
from floodway.runtime.example import show_example
from floodway.runtime.pool import Pool
from floodway.runtime.pool_lanes import lanes_of
from floodway.runtime.rollout import serving
from floodway.warmers.history import TrafficHistory

log = logging.getLogger("floodway.serve")
PRIVATE_DETAIL_ENV = "FLOODWAY_PRIVATE_DETAIL"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_server(app_spec: str, *, store: str | Path | None = None,
                 containers: int | None = None, api_keys: ApiKeys | None = None,
                 jobs_db: str | Path | None = None, job_ttl_s: float = 86400.0,
                 job_max_bytes: int = MAX_BYTES, job_tenant_max_bytes: int = MAX_TENANT_BYTES,
                 private_detail: bool | None = None):
    """The ASGI app and its Pool for `app_spec` (containers and the job runner start with
    the app's lifespan).

    `api_keys` (None: no authentication) are required as bearer tokens. Async jobs live in
    the SQLite file `jobs_db` (None: FLOODWAY_JOBS_DB, else beside the artifact store) and
    their results are kept `job_ttl_s` seconds after they finish; the file holds at most
    `job_max_bytes` of jobs, `job_tenant_max_bytes` per tenant (`floodway.jobs.quota`).
    `app_spec` ``FILE_OR_MODULE[:VAR][::ENDPOINT]``: with ``::ENDPOINT`` only that endpoint
    is served (its containers started, its routes answered); the app's other endpoints are
    not started and their routes answer 404 as unknown ones do.
    `private_detail` (None: ``FLOODWAY_PRIVATE_DETAIL`` set to 1): /metrics and the detail
    of /readyz need a key (`floodway.http.app.make_asgi_app`).
    Raises ArtifactError early when a served endpoint has no build.
    """
    app, eps = load_app(app_spec)
    app = app.only(ep.name for ep in eps)
    st = ArtifactStore(store)
    for ep in eps:
        st.latest(ep.name)   # fail now, with the command to run, not in every worker
    target = app_spec.split("::")[0]
    jobs_path = Path(jobs_db or default_jobs_path(st.root, app.name))
    jobs_path.parent.mkdir(parents=True, exist_ok=True)
    # Per-minute user arrivals, beside the jobs: the warm-pool policy learns from them.
    history = TrafficHistory(jobs_path.with_name("history.sqlite3"))
    pool = Pool(app, target, str(st.root), containers=containers, history=history)
    jobs = LocalJobs(app, pool, jobs_path, ttl_s=job_ttl_s, capacity=pool,
                     max_bytes=job_max_bytes, max_tenant_bytes=job_tenant_max_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(_app) -> AsyncIterator[None]:
        await pool.start()
        await jobs.start()
        try:
            yield
        finally:
            await jobs.stop()
            await pool.stop()
            history.close()

    return make_asgi_app(app, pool, lifespan=lifespan, api_keys=api_keys, jobs=jobs,
                         on_arrival=pool.record_arrival, build_key=build_keys(pool),
                         private_detail=os.environ.get(PRIVATE_DETAIL_ENV) == "1"
                         if private_detail is None else private_detail), pool


def build_keys(pool: Pool) -> Callable[[str], str | None]:
    """`build_key(endpoint)` for the response cache: the one build `pool` serves the
    endpoint with (`floodway.runtime.rollout.serving`), None during a rollout."""
    def key(endpoint: str) -> str | None:
        # Every lane of an endpoint runs its builds: one key only while all serve one.
        units = lanes_of(pool.endpoints, endpoint) or [pool.endpoints[endpoint]]
        keys = {serving(ep.latest, (c.build for c in ep.live())) for ep in units}
        return keys.pop() if len(keys) == 1 else None
    return key


async def _show_example(base: str, endpoint: str, pool: Pool, server: uvicorn.Server,
                        timeout_s: float) -> None:
    """Wait until the containers are ready and the server listens, then print a curl line
    with items of the endpoint's own type and the start of its real answer (streamed for a
    streaming endpoint; `floodway.runtime.example.show_example`)."""
    if not await pool.wait_ready(timeout_s):
        print(f"containers not ready after {timeout_s:g} s: {pool.readiness()}", flush=True)
        return
    while not server.started:   # uvicorn binds after the pool is up: no request before
        await asyncio.sleep(0.05)
    await show_example(base, pool.app[split_unit(endpoint)[0]])


def serve(app_spec: str, *, host: str = "127.0.0.1", port: int = 8000,
          store: str | Path | None = None, containers: int | None = None,
          show_example: bool = False, log_level: str = "info",
          api_keys: ApiKeys | None = None, jobs_db: str | Path | None = None,
          job_ttl_s: float = 86400.0, job_max_bytes: int = MAX_BYTES,
          job_tenant_max_bytes: int = MAX_TENANT_BYTES,
          limits: ConnectionLimits | None = None) -> None:
    """Run the router and containers until interrupted (Ctrl-C).

    `api_keys` None reads them from FLOODWAY_API_KEYS. Raises FloodwayError, before loading
    anything, for a non-loopback `host` without API keys. The job options: `build_server`.
    `limits`: the header timeout, keep-alive and connection cap (None: the defaults, each
    overridden by its FLOODWAY_* variable: `floodway.runtime.connections.limits_from_env`);
    the open-files limit is raised to fit the cap.
    """
    keys = ApiKeys.from_env() if api_keys is None else api_keys
    limits = limits_from_env() if limits is None else limits
    if not is_loopback(host) and not keys:
        # Anyone who can reach the port could otherwise run (and exhaust) the endpoints.
        raise FloodwayError(f"--host {host} is not a loopback address; serving beyond this "
                            f"machine needs bearer-token auth: set {API_KEYS_ENV} "
                            "(comma-separated keys) or pass --api-key")
    if keys:
        log.info("bearer-token auth on: %d API key(s)", len(keys))
    asgi, pool = build_server(app_spec, store=store, containers=containers, api_keys=keys,
                              jobs_db=jobs_db, job_ttl_s=job_ttl_s, job_max_bytes=job_max_bytes,
                              job_tenant_max_bytes=job_tenant_max_bytes)
    stats = ConnectionStats()
    asgi.state.metrics.watch_connections(stats.snapshot)
    raise_fd_limit(limits.max_connections)
    config = uvicorn.Config(asgi, host=host, port=port, log_level=log_level,
                            **uvicorn_options(limits, stats))
    server = uvicorn.Server(config)

    async def main() -> None:
        example = None
        if show_example:
            first = next(iter(pool.containers))
            example = asyncio.create_task(
                _show_example(f"http://{host}:{port}", first, pool, server, timeout_s=180))
        try:
            await server.serve()
        finally:
            if example:
                example.cancel()

    asyncio.run(main())
