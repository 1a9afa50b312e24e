"""`floodway serve`: the local router (uvicorn) in front of a Pool of containers.

It binds to loopback unless API keys are configured: beyond this machine, bearer-token auth.
The port is bound before anything loads or starts, and that socket is handed to uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from floodway.build.stale import check_builds
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
from floodway.runtime.pool import Pool, lanes_of
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
                 private_detail: bool | None = None, allow_stale: bool = False):
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
    Raises ArtifactError early when a served endpoint has no build, or one made from another
    definition of it (`floodway.build.stale`; with `allow_stale`, a warning instead).
    """
    app, eps = load_app(app_spec)
    app = app.only(ep.name for ep in eps)
    st = ArtifactStore(store)
    target = app_spec.split("::")[0]
    # Fail now, with the command to run, not in every worker.
    check_builds(eps, st, target, allow_stale=allow_stale)
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


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (not listening yet: uvicorn starts that). Raises
    FloodwayError in one line when the port is in use or cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn does: a restart is not held up by the last run's TIME_WAIT sockets (a
    # port another socket listens on still refuses).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise FloodwayError(f"port {port} on {host} is in use: stop the other server or "
                                "pass --port N") from None
        raise FloodwayError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, for `pool`'s containers: on SIGTERM or Ctrl-C they are marked as
    stopping before the shutdown starts (a SIGTERM to the process group, as service managers
    send, ends the workers as it reaches the router: that exit is a stop, not a failure)."""

    def __init__(self, config: uvicorn.Config, pool: Pool):
        super().__init__(config)
        self.pool = pool

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for containers in self.pool.containers.values():
            for c in containers:
                c.expect_stop()
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets:   # uvicorn says where only for a socket it bound
            host, port = sockets[0].getsockname()[:2]
            log.info("serving on http://%s:%d (Ctrl-C to stop)",
                     f"[{host}]" if ":" in host else host, port)


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
          limits: ConnectionLimits | None = None, allow_stale: bool = False) -> None:
    """Run the router and containers until interrupted (Ctrl-C).

    `api_keys` None reads them from FLOODWAY_API_KEYS. Raises FloodwayError, before loading
    anything, for a non-loopback `host` without API keys. The job options and `allow_stale`:
    `build_server`.
    `limits`: each phase's deadline, the keep-alive and the connection cap (None: the
    defaults, each overridden by its FLOODWAY_* variable:
    `floodway.runtime.connections.limits_from_env`); the open-files limit is raised to fit
    the cap. The port is bound first: one in use raises FloodwayError before anything starts.
    """
    keys = ApiKeys.from_env() if api_keys is None else api_keys
    limits = limits_from_env() if limits is None else limits
    if not is_loopback(host) and not keys:
        # Anyone who can reach the port could otherwise run (and exhaust) the endpoints.
        raise FloodwayError(f"--host {host} is not a loopback address; serving beyond this "
                            f"machine needs bearer-token auth: set {API_KEYS_ENV} "
                            "(comma-separated keys) or pass --api-key")
    sock = listen_socket(host, port)
    try:
        _serve_on(sock, app_spec, host=host, port=port, keys=keys, limits=limits,
                  show_example=show_example, log_level=log_level,
                  build=dict(store=store, containers=containers, jobs_db=jobs_db,
                             job_ttl_s=job_ttl_s, job_max_bytes=job_max_bytes,
                             job_tenant_max_bytes=job_tenant_max_bytes,
                             allow_stale=allow_stale))
    finally:
        sock.close()


def _serve_on(sock: socket.socket, app_spec: str, *, host: str, port: int, keys: ApiKeys,
              limits: ConnectionLimits, show_example: bool, log_level: str,
              build: dict[str, Any]) -> None:
    """`serve` on the bound `sock`; `build`: `build_server`'s options."""
    if keys:
        log.info("bearer-token auth on: %d API key(s)", len(keys))
    asgi, pool = build_server(app_spec, api_keys=keys, **build)
    stats = ConnectionStats()
    asgi.state.metrics.watch_connections(stats.snapshot)
    raise_fd_limit(limits.max_connections)
    config = uvicorn.Config(asgi, host=host, port=port, log_level=log_level,
                            **uvicorn_options(limits, stats))
    server = _Server(config, pool)

    async def main() -> None:
        example = None
        if show_example:
            first = next(iter(pool.containers))
            example = asyncio.create_task(
                _show_example(f"http://{host}:{port}", first, pool, server, timeout_s=180))
        try:
            await server.serve(sockets=[sock])
        finally:
            if example:
                example.cancel()

    asyncio.run(main())
