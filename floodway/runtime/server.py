"""`floodway serve`: the local router (uvicorn) in front of a Pool of containers.

It binds to loopback unless API keys are configured: beyond this machine, bearer-token auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn

from floodway.build.store import ArtifactStore
from floodway.errors import FloodwayError
from floodway.functions.discover import load_app
from floodway.http.app import make_asgi_app
from floodway.jobs.local import LocalJobs, default_jobs_path
from floodway.routers.admission import API_KEYS_ENV, ApiKeys
from floodway.runtime.example import describe, example_inputs
from floodway.runtime.pool import Pool
from floodway.warmers.history import TrafficHistory

log = logging.getLogger("floodway.serve")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_server(app_spec: str, *, store: str | Path | None = None,
                 containers: int | None = None, api_keys: ApiKeys | None = None,
                 jobs_db: str | Path | None = None, job_ttl_s: float = 86400.0):
    """The ASGI app and its Pool for `app_spec` (containers and the job runner start with
    the app's lifespan).

    `api_keys` (None: no authentication) are required as bearer tokens. Async jobs live in
    the SQLite file `jobs_db` (None: FLOODWAY_JOBS_DB, else beside the artifact store) and
    their results are kept `job_ttl_s` seconds after they finish.
    Raises ArtifactError early when an endpoint has no build.
    """
    app, eps = load_app(app_spec)
    st = ArtifactStore(store)
    for ep in eps:
        st.latest(ep.name)   # fail now, with the command to run, not in every worker
    target = app_spec.split("::")[0]
    jobs_path = Path(jobs_db or default_jobs_path(st.root, app.name))
    jobs_path.parent.mkdir(parents=True, exist_ok=True)
    # Per-minute user arrivals, beside the jobs: the warm-pool policy learns from them.
    history = TrafficHistory(jobs_path.with_name("history.sqlite3"))
    pool = Pool(app, target, str(st.root), containers=containers, history=history)
    jobs = LocalJobs(app, pool, jobs_path, ttl_s=job_ttl_s)

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
                         on_arrival=pool.record_arrival), pool


async def _show_example(base: str, endpoint: str, pool: Pool, timeout_s: float) -> None:
    """Wait until ready, then print a curl line with items of the endpoint's own type
    (`floodway.runtime.example`) and the start of its real answer."""
    if not await pool.wait_ready(timeout_s):
        print(f"containers not ready after {timeout_s:g} s: {pool.readiness()}", flush=True)
        return
    inputs = example_inputs(pool.app[endpoint].fn)
    if inputs is None:
        print(f"\nready. (no example request for {endpoint}'s item type; POST "
              f"{{\"inputs\": [...]}} to {base}/v1/{endpoint})", flush=True)
        return
    body = {"inputs": inputs}
    print(f"\nready. try:\n  curl -s -X POST {base}/v1/{endpoint} "
          f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'", flush=True)
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(f"{base}/v1/{endpoint}", json=body)
    text = r.text
    print(f"answer ({r.status_code}, {len(text)} bytes): {text[:160]}...", flush=True)
    if r.status_code == 200:
        outs = r.json()["outputs"]
        print(f"  {len(outs)} outputs, each {describe(outs[0])}. Ctrl-C stops the server.\n",
              flush=True)


def serve(app_spec: str, *, host: str = "127.0.0.1", port: int = 8000,
          store: str | Path | None = None, containers: int | None = None,
          show_example: bool = False, log_level: str = "info",
          api_keys: ApiKeys | None = None, jobs_db: str | Path | None = None,
          job_ttl_s: float = 86400.0) -> None:
    """Run the router and containers until interrupted (Ctrl-C).

    `api_keys` None reads them from FLOODWAY_API_KEYS. Raises FloodwayError, before loading
    anything, for a non-loopback `host` without API keys.
    """
    keys = ApiKeys.from_env() if api_keys is None else api_keys
    if not is_loopback(host) and not keys:
        # Anyone who can reach the port could otherwise run (and exhaust) the endpoints.
        raise FloodwayError(f"--host {host} is not a loopback address; serving beyond this "
                            f"machine needs bearer-token auth: set {API_KEYS_ENV} "
                            "(comma-separated keys) or pass --api-key")
    if keys:
        log.info("bearer-token auth on: %d API key(s)", len(keys))
    asgi, pool = build_server(app_spec, store=store, containers=containers, api_keys=keys,
                              jobs_db=jobs_db, job_ttl_s=job_ttl_s)
    config = uvicorn.Config(asgi, host=host, port=port, log_level=log_level)
    server = uvicorn.Server(config)

    async def main() -> None:
        example = None
        if show_example:
            first = next(iter(pool.containers))
            example = asyncio.create_task(
                _show_example(f"http://{host}:{port}", first, pool, timeout_s=180))
        try:
            await server.serve()
        finally:
            if example:
                example.cancel()

    asyncio.run(main())
