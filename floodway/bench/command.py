"""`floodway bench APP|URL --trace CSV`: replay a per-request trace open loop against an
app served locally or a deployed router, and report what came back (`floodway.cli`
registers `bench` from here, with its help text `BENCH_HELP`).

An APP is served by a `floodway serve` subprocess (`floodway.bench.server`) for the run;
a URL (http:// or https://) is replayed against as it is, with a bearer key from
``--api-key`` or ``$FLOODWAY_API_KEY``. Files written to ``--out``: ``requests.csv``
(`floodway.bench.report`), ``bench.png`` (`floodway.bench.plot`), ``batch_times.json``
(`floodway.bench.batches`, when the router's /metrics shows batches), ``run.json`` (what
was replayed against what, `floodway.bench.runfile`: `floodway simulate --bench-run` reads
it) and, for an APP, ``serve.log``. Every request carries ``Cache-Control: no-cache``: the
replay measures the endpoint, not its response cache.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from floodway.bench.service_choice import LAST_RUN_DIR, app_file
from floodway.errors import FloodwayError

if TYPE_CHECKING:
    from floodway.bench.report import Summary
    from floodway.bench.target import Target

BENCH_HELP = (
    "Replay a per-request trace open loop against an endpoint: APP is served locally for the "
    "run, a URL (a deployed router) is used as it is."
    "\n\n"
    "Requests go out at the trace's times (divided by --time-scale) whatever the answers, "
    "each with X-Deadline-Ms and one item: a text about ContextTokens tokens long when the "
    "trace has that column, else a short text, or --input-json (a URL's /openapi.json is "
    "read first: no text goes to an endpoint that does not take text). Prints the outcomes (200 "
    "within the deadline, 200 late, 202, 429, 503, 504, other), the share answered honestly "
    "in time, the 200s' latency percentiles, the goodput and the router's event-loop lag; "
    "then follows every 202's job to its end (jobs succeeded, the backlog's drain); lists "
    "the answers other than 200/202 by status with the first one's error, and exits "
    "non-zero when every request was refused with a 4xx. Writes "
    "requests.csv, bench.png, batch_times.json (the "
    "batch times the router measured and their fit on padded tokens, rows and batches, for "
    "simulate) and run.json (what was replayed against what: simulate --bench-run) to --out.")
API_KEY_ENV = "FLOODWAY_API_KEY"
# The client waits this long for any answer (a router answers within the deadline plus its
# hand-off; this only bounds a router that does not).
CLIENT_TIMEOUT_S = 30.0
WARMUP_REQUESTS = 3
console = Console(stderr=True, soft_wrap=True)
_table_console = Console()


async def _ready_containers(client, endpoint: str) -> int | None:
    """Containers of `endpoint` ready or busy now, from /readyz (None: not told)."""
    import httpx

    try:
        r = await client.get("/readyz")
        cs = r.json().get("endpoints", {}).get(endpoint)
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return None if cs is None else sum(1 for c in cs if c.get("state") in ("ready", "busy"))


async def _scrape(side) -> str:
    """The router's /metrics text ("" when it cannot be read)."""
    import httpx

    try:
        r = await side.get("/metrics")
    except httpx.HTTPError:
        return ""
    return r.text if r.status_code == 200 else ""


@dataclass
class Replayed:
    """What `_replay` measured: the results, the /metrics sampler, the containers ready at
    the start, the router's loop lag over the replay (None: not exported), and the jobs
    followed (0: not followed)."""

    results: list
    sampler: Any
    at_start: int | None
    lag: Any
    followed: int


async def _replay(base: str, target: Target, plan: list, headers: dict[str, str],
                  follow_jobs: bool) -> Replayed:
    """Warm-up (local servers only, not counted), then the replay with /metrics sampled
    beside it (on the replay's clock), then (`follow_jobs`) its 202s followed to their
    end (`floodway.bench.jobs`)."""
    import httpx
    from rich.progress import Progress

    from floodway.bench.batches import BatchSampler, watch
    from floodway.bench.jobs import follow
    from floodway.bench.replay import replay, sessions
    from floodway.bench.routerlag import lag_between

    sampler = BatchSampler(target.endpoint)
    # aiohttp sends the load (cheap per request: floodway.bench.replay says why); the
    # samples of /readyz and /metrics, a few a second, go through httpx.
    session, fresh = sessions(base, headers, CLIENT_TIMEOUT_S)
    async with session as client, fresh, \
            httpx.AsyncClient(base_url=base, headers=headers, timeout=5) as side:
        if target.url is None:       # a fresh router's first batches pay for warming up
            for k, p in enumerate(plan[:WARMUP_REQUESTS]):
                item = target.inputs.item(-1 - k, p.tokens, None)    # texts not replayed
                async with client.post(f"v1/{target.endpoint}", json={"inputs": [item]}) as r:
                    await r.read()
        at_start = await _ready_containers(side, target.endpoint)
        before = await _scrape(side)
        stop, sampled = asyncio.Event(), asyncio.Event()
        # One origin for the samples and the answers (the replay's own starts within
        # milliseconds of it), so that answers fall into the intervals they ended in; the
        # replay starts once the first sample is in, so that its first batches are counted.
        watcher = asyncio.create_task(watch(side, sampler, stop, time.perf_counter,
                                            t0=time.perf_counter(), local=target.url is None,
                                            started=sampled))
        await asyncio.wait([asyncio.ensure_future(sampled.wait()), watcher],
                           return_when=asyncio.FIRST_COMPLETED)
        wall0 = time.time() - time.perf_counter()   # the replay's clock on the wall clock
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"replaying {len(plan):,} requests", total=len(plan))
            t0 = time.perf_counter()
            results = await replay(client, target.endpoint, plan, target.deadline_ms,
                                   on_answer=lambda _: progress.advance(task), fresh=fresh)
        stop.set()
        await watcher
        lag = lag_between(before, await _scrape(side))
        followed = 0
        if follow_jobs and any(r.job for r in results):
            with console.status(f"following {sum(1 for r in results if r.job):,} jobs"):
                followed = await follow(client, results, wall0 + t0)
    return Replayed(results, sampler, at_start, lag, followed)


def _answered(target: Target, plan: list, results: list) -> list[tuple[float, int]]:
    """(answer time from the replay's start, the router's token estimate of its text) of
    each request answered 200, for endpoints taking text ([] otherwise)."""
    from floodway.routers.tokens import item_tokens

    seq = (target.config or {}).get("max_seq_len")
    if not seq or target.inputs.kind != "text":
        return []
    return [(r.send_s + r.lag_s + r.latency_s, item_tokens(p.inputs[0], seq))
            for p, r in zip(plan, results, strict=True) if r.status == 200]


def _failures(target: Target, results: list) -> None:
    """Print the answers other than 200/202 by status, each with its first error message.
    Raises FloodwayError when every request was refused with a 4xx."""
    from floodway.bench.report import all_refused, failures

    found = failures(results)
    if all_refused(results):
        sent = "the --input-json item" if target.inputs.kind == "json" else \
            f"a {target.inputs.kind} item; --input-json ITEM sends one of your own"
        raise FloodwayError(
            f"every request was refused: {'; '.join(f.describe() for f in found)}. The "
            f"endpoint {target.endpoint} does not take what bench sent ({sent}), or the "
            "key (--api-key)")
    if found:
        console.print("answers other than 200/202, by status (the first one's error):")
        for f in found:
            console.print(f"  {escape(f.describe())}")


def _cores() -> int:
    """The cores this process (and so a local router and its containers) may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _write(out: Path, target: Target, summary, sampler, title: str,
           answered: list[tuple[float, int]]) -> None:
    from floodway.bench.batches import batch_times
    from floodway.bench.contention import disturbed_text
    from floodway.bench.plot import plot_bench
    from floodway.bench.report import summary_table, write_json, write_requests_csv

    _table_console.print(summary_table(summary, title))
    if not any(r.status for r in summary.results):
        raise FloodwayError(f"no request was answered (the first: {summary.results[0].error}); "
                            f"is {target.url or 'the server'} a floodway router?")
    console.print(f"requests: {write_requests_csv(summary, out / 'requests.csv')}")
    _failures(target, summary.results)
    console.print("plot: " + str(plot_bench(
        [r.send_s for r in summary.results], [r.latency_s for r in summary.results],
        summary.outcomes, summary.deadline_s, out / "bench.png", title)))
    doc = batch_times(sampler, answered=answered,
                      sends_s=[r.send_s + r.lag_s for r in summary.results],
                      cores=None if target.url else _cores())
    if doc is None:
        console.print("batch times: none seen on the router's /metrics (a router on Modal "
                      "does not see its batches); no batch_times.json")
        return
    fit = doc["fit"]
    tok = "" if "per_token_s" not in fit else \
        f" + {fit['per_token_s'] * 1e6:.2f} us/padded token ({doc['tokens']})"
    console.print(f"batch times: {write_json(doc, out / 'batch_times.json')} "
                  f"({len(doc['batches'])} single batches, {fit['intervals']} intervals; fit "
                  f"{fit['per_batch_s'] * 1000:.1f} ms + {fit['per_row_s'] * 1000:.2f} ms/row"
                  f"{tok}; {doc['seconds']} seconds)")
    if doc.get("contention"):
        console.print("batch time / fit by busy containers: " + ", ".join(
            f"{c['busy']} busy x{c['factor']:.2f} ({c['intervals']} intervals)"
            for c in doc["contention"]["by_busy"]))
    if (fo := doc.get("foreign")) and fo["disturbed_s"]:
        console.print(f"[yellow]other work on this machine took up to {fo['most_cores']:.2f} "
                      f"cores during {disturbed_text(fo)}: batch times there are not the "
                      "app's alone[/yellow]")
    if doc.get("load"):
        ld = doc["load"]
        console.print(f"the load term: router and client took {ld['other_cores']:.2f} of "
                      f"{ld['cores']} cores + {ld['other_per_request_s'] * 1000:.2f} ms of CPU "
                      f"per request sent; batch time x{ld['at_rest']:.2f} / the containers' "
                      "share of a core")


def run(app: str, trace: Path, endpoint: str | None, time_scale: float,
        duration_s: float | None, deadline_ms: float | None, out: Path, api_key: str | None,
        input_json: str | None, capacity_rps: float | None, max_words: int,
        store: Path | None, start_s: float = 0.0, containers: int | None = None,
        follow_jobs: bool = True, quiet: bool = False) -> Summary:
    """The whole command (module docstring) -> the run's `floodway.bench.report.Summary`.
    `follow_jobs`: poll its 202s' jobs to their end (`floodway.bench.jobs`); `quiet`: no
    table or file notes on the console (a caller that reports itself). Raises
    FloodwayError for bad options, a trace it cannot read, or a local server that does
    not come up."""
    import contextlib

    from floodway.bench.plan import plan_requests
    from floodway.bench.report import summarize
    from floodway.bench.server import serving
    from floodway.bench.target import target_of
    from floodway.sim.trace import read_trace

    if capacity_rps is not None and not capacity_rps > 0:
        raise FloodwayError(f"--capacity-rps must be > 0, got {capacity_rps}")
    key = api_key or os.environ.get(API_KEY_ENV)
    # The replay measures the endpoint, not its response cache (a --input-json item repeats).
    headers = {"Cache-Control": "no-cache", **({"Authorization": f"Bearer {key}"} if key else {})}
    target = target_of(app, endpoint, input_json, deadline_ms, max_words, headers)
    if containers is not None and (target.url or containers < 1):
        raise FloodwayError(f"--containers {containers}: give a number >= 1, for an APP "
                            "served locally (a URL's router scales itself)")
    plan = plan_requests(read_trace(trace), target.inputs, time_scale, duration_s, start_s)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FloodwayError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    console.print(f"{len(plan):,} requests over {plan[-1].send_s:.1f} s to {target.endpoint} "
                  f"(time scale {time_scale:g}, deadline {target.deadline_ms:g} ms)")
    with tempfile.TemporaryDirectory(prefix="floodway-bench-") as work, \
            (contextlib.nullcontext(target.url) if target.url else
             serving(target.app, store, Path(work), out / "serve.log",
                     containers=containers)) as base:
        got = asyncio.run(_replay(base, target, plan, headers, follow_jobs))
    results, sampler, at_start = got.results, got.sampler, got.at_start
    span = duration_s if duration_s is not None else plan[-1].send_s
    summary = summarize(results, target.deadline_ms / 1000, capacity_rps, span, got.lag)
    _write_run(out, target, trace, plan, (time_scale, duration_s, start_s),
               {"pinned": containers, "at_start": at_start,
                "most_live": sampler.most_live or None,
                "cold_start_s": sorted(round(x, 3) for x in sampler.cold_s.values())})
    with _muted(quiet):
        _write(out, target, summary, sampler,
               f"floodway bench {target.endpoint} on {trace.name} ({len(plan):,} requests)",
               _answered(target, plan, results))
    return summary


def _muted(quiet: bool):
    """While `quiet`, the console prints nothing."""
    import contextlib

    if not quiet:
        return contextlib.nullcontext()
    return _Quiet()


class _Quiet:
    def __enter__(self) -> None:
        self.was = console.quiet, _table_console.quiet
        console.quiet = _table_console.quiet = True

    def __exit__(self, *exc: object) -> None:
        console.quiet, _table_console.quiet = self.was


def _write_run(out: Path, target: Target, trace: Path, plan: list,
               timing: tuple[float, float | None, float], containers: dict) -> None:
    """``run.json`` (`floodway.bench.runfile`): what was replayed, against what."""
    from floodway.bench.runfile import write_run

    inp = target.inputs
    time_scale, duration_s, start_s = timing
    console.print("run: " + str(write_run(
        out / "run.json", app=target.app, app_resolved=app_file(target.app),
        url=target.url, endpoint=target.endpoint,
        trace=str(trace), trace_resolved=str(trace.resolve()), start_s=start_s,
        time_scale=time_scale, duration_s=duration_s, requests=len(plan),
        first_row=plan[0].index, last_row=plan[-1].index, deadline_ms=target.deadline_ms,
        inputs={"kind": inp.kind, "json_item": inp.json_item, "max_words": inp.max_words,
                "max_new_tokens": inp.max_new_tokens},
        containers=containers, **(target.config or {}))))


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
          out: Annotated[Path, typer.Option(
              help="folder for the files written (simulate reads the default one's "
                   "batch times)")] = LAST_RUN_DIR,
          api_key: Annotated[str | None, typer.Option(
              help=f"bearer key for a URL (default: ${API_KEY_ENV})")] = None,
          input_json: Annotated[str | None, typer.Option(
              help="one item as JSON, sent by every request (endpoints not taking text)")]
          = None,
          capacity_rps: Annotated[float | None, typer.Option(
              help="the endpoint's capacity for this mix, requests/s: goodput is then "
                   "counted over the seconds whose arrivals exceed it")] = None,
          max_words: Annotated[int, typer.Option(min=1, help="longest text sent")] = 200,
          store: StoreOpt = None,
          start_s: Annotated[float, typer.Option(
              help="start this many trace seconds after its first arrival")] = 0.0,
          containers: Annotated[int | None, typer.Option(
              help="APP: serve it with this many containers (floodway serve --containers)")]
          = None,
          follow_jobs: Annotated[bool, typer.Option(
              help="after the replay, poll each 202's job to its end: jobs succeeded, "
                   "time to done, the backlog's drain rate")] = True) -> None:
    """Replay a trace against an endpoint (`BENCH_HELP`)."""
    try:
        run(app, trace, endpoint, time_scale, duration_s, deadline_ms, out, api_key,
            input_json, capacity_rps, max_words, store, start_s, containers, follow_jobs)
    except FloodwayError as e:
        console.print(f"[bold red]error:[/] {escape(str(e))}")
        raise typer.Exit(code=2) from None


__all__ = ["BENCH_HELP", "bench", "run"]
