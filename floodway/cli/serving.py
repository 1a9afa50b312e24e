"""`floodway serve`: the endpoints served locally (`floodway.server`), with its job
queue's options and its log."""

from __future__ import annotations

import logging
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from floodway.cli.common import AppArg, StoreOpt, fail, no_hub_progress_bars, no_modal
from floodway.errors import FloodwayError

SERVE_HELP = (
    "Serve endpoints locally: a router on HOST:PORT and worker-process containers "
    "(APP::ENDPOINT: that endpoint only; the others are not started and answer 404)."
    "\n\n"
    "POST /v1/ENDPOINT answers JSON; a streaming endpoint (a generator function) streams "
    "with the header Accept: text/event-stream (SSE) or application/x-ndjson. "
    "OpenAI-compatible routes beside them: /v1/models; /v1/embeddings for endpoints taking "
    "str items; /v1/completions and /v1/chat/completions for streaming endpoints taking "
    "fw.Prompt items (text generation).")
# `floodway serve --log-level`: floodway's loggers and uvicorn's.
LogLevel = Enum("LogLevel", {name: name for name in ("debug", "info", "warning", "error")},
                type=str)
LOG_LEVEL_OPT = ("the server log's level: floodway's and uvicorn's loggers (a traceback of "
                 "the endpoint's own code failing is logged at error)")
# `floodway serve`'s job queue options (the quotas: floodway.jobs.quota).
JOBS_HELP = {
    "db": "SQLite file of async jobs (default: $FLOODWAY_JOBS_DB, else "
          "<store>/.jobs/<app>/jobs.sqlite3)",
    "ttl": "seconds a finished job's result is kept",
    "max": "MiB the job store holds at most (inputs of unfinished jobs, results of finished "
           "ones); a submit past it is answered 503 with Retry-After",
    "tenant": "MiB of jobs one tenant may hold in the job store (a submit past it: 503)",
}


def serve_logging(level: str) -> None:
    """`floodway serve`'s log: floodway's loggers at `level` (uvicorn's get it too); httpx's
    at WARNING at least (its line per request repeats the access log's)."""
    number = logging.getLevelName(level.upper())
    logging.basicConfig(level=number, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("floodway").setLevel(number)
    logging.getLogger("httpx").setLevel(max(number, logging.WARNING))


def serve(app: AppArg, host: Annotated[str, typer.Option()] = "127.0.0.1",
          port: Annotated[int, typer.Option()] = 8000, store: StoreOpt = None,
          containers: Annotated[int | None, typer.Option(
              help="containers per endpoint (default: warm pool min + buffer)")] = None,
          show_example: Annotated[bool, typer.Option(
              help="once ready, send one real request and print it as a curl line")] = False,
          api_key: Annotated[list[str] | None, typer.Option(
              "--api-key", metavar="KEY", help="accept this bearer token (repeatable; added to "
                                "$FLOODWAY_API_KEYS, which is safer: command lines are visible "
                                "to other users); required for a non-loopback --host")] = None,
          jobs_db: Annotated[Path | None, typer.Option(help=JOBS_HELP["db"])] = None,
          job_ttl_s: Annotated[float, typer.Option(min=1, help=JOBS_HELP["ttl"])] = 86400.0,
          job_max_mib: Annotated[int, typer.Option(min=1, help=JOBS_HELP["max"])] = 1024,
          job_tenant_mib: Annotated[int, typer.Option(min=1, help=JOBS_HELP["tenant"])] = 256,
          allow_stale: Annotated[bool, typer.Option(
              "--allow-stale", help="serve builds made from another definition of their "
                                    "endpoint (a warning instead of the refusal)")] = False,
          log_level: Annotated[LogLevel, typer.Option(
              case_sensitive=False, help=LOG_LEVEL_OPT)] = LogLevel.info,
          ) -> None:
    """Serve endpoints locally (`SERVE_HELP`)."""
    from floodway.routers.admission import ApiKeys
    from floodway.server import serve as run

    serve_logging(log_level.value)
    no_modal()
    no_hub_progress_bars()
    try:
        run(app, host=host, port=port, store=store, containers=containers,
            show_example=show_example, api_keys=ApiKeys.from_env(extra=api_key or ()),
            jobs_db=jobs_db, job_ttl_s=job_ttl_s, job_max_bytes=job_max_mib << 20,
            job_tenant_max_bytes=job_tenant_mib << 20, allow_stale=allow_stale,
            log_level=log_level.value)
    except FloodwayError as e:
        raise fail(e) from None


__all__ = ["JOBS_HELP", "LOG_LEVEL_OPT", "SERVE_HELP", "LogLevel", "serve", "serve_logging"]
