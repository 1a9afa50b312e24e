"""`floodway bench APP|URL --trace CSV`: replay a per-request trace open loop against an
app served locally or a deployed router, and report what came back (`floodway.cli`
registers `bench` from here; its help text is `floodway.cli_help.BENCH_HELP`).

An APP is served by a `floodway serve` subprocess (`floodway.bench.server`) for the run;
a URL (http:// or https://) is replayed against as it is, with a bearer key from
``--api-key`` or ``$FLOODWAY_API_KEY``. Files written to ``--out``: ``requests.csv``
(`floodway.bench.report`), ``bench.png`` (`floodway.bench.plot`), ``batch_times.json``
(`floodway.bench.batches`, when the router's /metrics shows batches) and, for an APP,
``serve.log``. Every request carries ``Cache-Control: no-cache``: the replay measures the
endpoint, not its response cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from floodway.errors import FloodwayError

API_KEY_ENV = "FLOODWAY_API_KEY"
# The client waits this long for any answer (a router answers within the deadline plus its
# hand-off; this only bounds a router that does not).
CLIENT_TIMEOUT_S = 30.0
WARMUP_REQUESTS = 3
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class Target:
    """Where to replay: `url` (None: serve `app` locally), the endpoint, how its items are
    made and the deadline in ms."""

    app: str | None
    url: str | None
    endpoint: str
    inputs: Any
    deadline_ms: float


def _app_target(app: str, endpoint: str | None, input_json: Any,
                deadline_ms: float | None, max_words: int) -> Target:
    """The Target of an app file: its endpoint (the only one, or `endpoint`), its item kind
    from the function's annotation, its Route.timeout_s as the default deadline."""
    from floodway.bench.plan import Inputs
    from floodway.config import Generation
    from floodway.deploy import NO_MODAL_ENV
    from floodway.functions.discover import load_app
    from floodway.functions.prompts import Prompt

    os.environ.setdefault(NO_MODAL_ENV, "1")      # the app's Modal objects are not used
    spec = app if endpoint is None or "::" in app else f"{app}::{endpoint}"
    _, eps = load_app(spec)
    if len(eps) != 1:
        raise FloodwayError(f"{app} has {len(eps)} endpoints ({', '.join(e.name for e in eps)})"
                            "; pick one with --endpoint NAME")
    ep = eps[0]
    if input_json is not None:
        inputs = Inputs("json", input_json, max_words)
    elif ep.input_type is str:
        inputs = Inputs("text", max_words=max_words)
    elif ep.input_type is Prompt:
        inputs = Inputs("prompt", max_words=max_words,
                        max_new_tokens=(ep.generation or Generation()).max_new_tokens)
    else:
        kind = getattr(ep.input_type, "__name__", ep.input_type)
        raise FloodwayError(f"endpoint {ep.name} takes {kind} items, not text: give one "
                            "with --input-json")
    return Target(spec, None, ep.name, inputs,
                  deadline_ms if deadline_ms is not None else ep.route.timeout_s * 1000)


def _target(app: str, endpoint: str | None, input_json: str | None,
            deadline_ms: float | None, max_words: int) -> Target:
    from floodway.bench.plan import Inputs
    from floodway.config import Route

    item = None
    if input_json is not None:
        try:
            item = json.loads(input_json)
        except json.JSONDecodeError as e:
            raise FloodwayError(f"--input-json is not JSON ({e.msg} at {e.pos}): give one "
                                "item, e.g. '\"a text\"' or '{\"prompt\": \"hi\"}'") from None
    if deadline_ms is not None and not 0 < deadline_ms <= 3_600_000:
        raise FloodwayError(f"--deadline-ms: give a number in (0, 3600000], got {deadline_ms}")
    if not app.startswith(("http://", "https://")):
        return _app_target(app, endpoint, item, deadline_ms, max_words)
    if endpoint is None:
        raise FloodwayError(f"{app} is a URL: name the endpoint with --endpoint NAME")
    inputs = Inputs("json", item, max_words) if item is not None else \
        Inputs("text", max_words=max_words)
    return Target(None, app.rstrip("/"), endpoint, inputs,
                  deadline_ms if deadline_ms is not None else Route().timeout_s * 1000)


async def _replay(base: str, target: Target, plan: list, headers: dict[str, str]):
    """Warm-up (local servers only, not counted), then the replay with /metrics sampled
    beside it -> (results, BatchSampler)."""
    import httpx
    from rich.progress import Progress

    from floodway.bench.batches import BatchSampler, watch
    from floodway.bench.replay import replay

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    sampler = BatchSampler(target.endpoint)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=CLIENT_TIMEOUT_S,
                                 limits=limits) as client, \
            httpx.AsyncClient(base_url=base, headers=headers, timeout=5) as side:
        if target.url is None:       # a fresh router's first batches pay for warming up
            for k, p in enumerate(plan[:WARMUP_REQUESTS]):
                item = target.inputs.item(-1 - k, p.tokens, None)    # texts not replayed
                await client.post(f"/v1/{target.endpoint}", json={"inputs": [item]})
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(side, sampler, stop, time.perf_counter))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"replaying {len(plan):,} requests", total=len(plan))
            results = await replay(client, target.endpoint, plan, target.deadline_ms,
                                   on_answer=lambda _: progress.advance(task))
        stop.set()
        await watcher
    return results, sampler


def _write(out: Path, target: Target, summary, sampler, title: str) -> None:
    from floodway.bench.batches import batch_times
    from floodway.bench.plot import plot_bench
    from floodway.bench.report import summary_table, write_json, write_requests_csv

    Console().print(summary_table(summary, title))
    if not any(r.status for r in summary.results):
        raise FloodwayError(f"no request was answered (the first: {summary.results[0].error}); "
                            f"is {target.url or 'the server'} a floodway router?")
    console.print(f"requests: {write_requests_csv(summary, out / 'requests.csv')}")
    console.print("plot: " + str(plot_bench(
        [r.send_s for r in summary.results], [r.latency_s for r in summary.results],
        summary.outcomes, summary.deadline_s, out / "bench.png", title)))
    doc = batch_times(sampler)
    if doc is None:
        console.print("batch times: none seen on the router's /metrics (a router on Modal "
                      "does not see its batches); no batch_times.json")
        return
    fit = doc["fit"]
    console.print(f"batch times: {write_json(doc, out / 'batch_times.json')} "
                  f"({len(doc['batches'])} single batches, {fit['intervals']} intervals; fit "
                  f"{fit['per_batch_s'] * 1000:.1f} ms + {fit['per_row_s'] * 1000:.2f} ms/row)")


def run(app: str, trace: Path, endpoint: str | None, time_scale: float,
        duration_s: float | None, deadline_ms: float | None, out: Path, api_key: str | None,
        input_json: str | None, capacity_rps: float | None, max_words: int,
        store: Path | None) -> None:
    """The whole command (module docstring). Raises FloodwayError for bad options, a trace
    it cannot read, or a local server that does not come up."""
    import contextlib

    from floodway.bench.plan import plan_requests
    from floodway.bench.report import summarize
    from floodway.bench.server import serving
    from floodway.sim.trace import read_trace

    if capacity_rps is not None and not capacity_rps > 0:
        raise FloodwayError(f"--capacity-rps must be > 0, got {capacity_rps}")
    target = _target(app, endpoint, input_json, deadline_ms, max_words)
    plan = plan_requests(read_trace(trace), target.inputs, time_scale, duration_s)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FloodwayError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    key = api_key or os.environ.get(API_KEY_ENV)
    # The replay measures the endpoint, not its response cache (a --input-json item repeats).
    headers = {"Cache-Control": "no-cache", **({"Authorization": f"Bearer {key}"} if key else {})}
    console.print(f"{len(plan):,} requests over {plan[-1].send_s:.1f} s to {target.endpoint} "
                  f"(time scale {time_scale:g}, deadline {target.deadline_ms:g} ms)")
    with tempfile.TemporaryDirectory(prefix="floodway-bench-") as work, \
            (contextlib.nullcontext(target.url) if target.url else
             serving(target.app, store, Path(work), out / "serve.log")) as base:
        results, sampler = asyncio.run(_replay(base, target, plan, headers))
    span = duration_s if duration_s is not None else plan[-1].send_s
    summary = summarize(results, target.deadline_ms / 1000, capacity_rps, span)
    _write(out, target, summary, sampler,
           f"floodway bench {target.endpoint} on {trace.name} ({len(plan):,} requests)")


StoreOpt = Annotated[Path | None, typer.Option(
    help="artifact store root for APP (default: $FLOODWAY_STORE or the user cache)")]


def bench(app: Annotated[str, typer.Argument(
              help="FILE.py or module (served locally for the run), or the URL of a "
                   "deployed router (http:// or https://)")],
          trace: Annotated[Path, typer.Option(
              help="per-request CSV: a TIMESTAMP column (ContextTokens sizes the texts)")],
          endpoint: Annotated[str | None, typer.Option(
              help="the endpoint (needed for a URL, or an app of several)")] = None,
          time_scale: Annotated[float, typer.Option(
              help="replay speed: 2 sends twice as fast as the trace")] = 1.0,
          duration_s: Annotated[float | None, typer.Option(
              help="replay only the first S seconds (after scaling)")] = None,
          deadline_ms: Annotated[float | None, typer.Option(
              help="X-Deadline-Ms of every request (default: the app's Route.timeout_s; "
                   "2000 for a URL)")] = None,
          out: Annotated[Path, typer.Option(help="folder for the files written")]
          = Path("bench-out"),
          api_key: Annotated[str | None, typer.Option(
              help=f"bearer key for a URL (default: ${API_KEY_ENV})")] = None,
          input_json: Annotated[str | None, typer.Option(
              help="one item as JSON, sent by every request (endpoints not taking text)")]
          = None,
          capacity_rps: Annotated[float | None, typer.Option(
              help="the endpoint's capacity for this mix, requests/s: goodput is then "
                   "counted over the seconds whose arrivals exceed it")] = None,
          max_words: Annotated[int, typer.Option(min=1, help="longest text sent")] = 200,
          store: StoreOpt = None) -> None:
    """Replay a trace against an endpoint (`floodway.cli_help.BENCH_HELP`)."""
    try:
        run(app, trace, endpoint, time_scale, duration_s, deadline_ms, out, api_key,
            input_json, capacity_rps, max_words, store)
    except FloodwayError as e:
        console.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(code=2) from None


__all__ = ["bench", "run"]
