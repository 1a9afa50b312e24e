"""`floodway simulate`: an endpoint's warm pool and router simulated over a trace
(`floodway.sim`, or `floodway.sim.generation` for token generation), with its options read
as the simulator's models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from floodway.cli.common import AppArg, console, fail, no_modal
from floodway.errors import FloodwayError

SIMULATE_HELP = (
    "Simulate an endpoint's warm pool and router over a trace, with its own config, the real "
    "decide() and warm-pool policy: cold starts, latency, shed/spill, container-minutes, cost."
    "\n\n"
    "A streaming endpoint on a per-request trace with token columns (ContextTokens, "
    "GeneratedTokens), or any endpoint with --generation, runs the generation simulator "
    "(decide_stream, iteration-level containers at the priors' speed): time to first token, "
    "tokens/s, first tokens within the deadline."
    "\n\n"
    "It prints the service model it runs: --batch-times, --bench-run or --service-ms when "
    "given; else the batch times of the last `floodway bench` run of the same app and "
    "endpoint in ./bench-out (bench's default --out), when there is one; else the prior "
    "every router starts from, 20 ms + 5 ms per row."
    "\n\n"
    "--batch-times takes the service model a `floodway bench` run measured (its "
    "batch_times.json): decide() plans with its fit, and each batch runs the time measured for "
    "its size where there is one. When that fit has a per-token term, the endpoint takes text "
    "and the trace has a ContextTokens column, requests cost their tokens (padded per batch), "
    "as the runtime counts them."
    "\n\n"
    "--bench-run DIR simulates what a `floodway bench` run replayed (its run.json and "
    "batch_times.json in DIR): the same trace rows at the same time scale, each request "
    "costing the tokens the router estimated for the text it was sent, the run's deadline "
    "as the route's timeout, its containers (--containers, else the warm pool capped at the "
    "most the run had live) and the service model it measured. Requests the router would "
    "hand to the async queue near their deadline count as async jobs, as the runtime's "
    "deadline hand-off answers them 202.")
# Option help texts of `simulate`.
TRACE_OPT = ("per-request CSV (a timestamp column) or per-minute counts CSV (minute_1..N); "
             "not with --bench-run")
BATCH_TIMES_OPT = ("a floodway bench run's batch_times.json: its measured service model (not "
                   "--service-ms)")
GENERATION_OPT = ("simulate token generation (a streaming endpoint's sequences) even if the "
                  "endpoint does not stream; needs ContextTokens and GeneratedTokens columns")
BENCH_RUN_OPT = ("a floodway bench --out folder: simulate the requests that run replayed, "
                 "as it served them, with the batch times it measured (not with --trace or "
                 "--batch-times)")


def _numbers(spec: str, what: str, most: float) -> list[float]:
    """`spec` as numbers in 0..`most`: one ("30"), a comma list ("20,30,45") or a file of
    numbers (one per line or comma-separated; a non-numeric first line is taken as a
    header)."""
    p = Path(spec)
    text = p.read_text() if p.is_file() else spec
    out: list[float] = []
    for i, tok in enumerate(text.replace("\n", ",").split(",")):
        tok = tok.strip()
        if not tok:
            continue
        try:
            out.append(float(tok))
        except ValueError:
            if i == 0 and p.is_file():
                continue
            raise FloodwayError(f"{what}: {tok!r} is not a number (give N, N,N,... or a file "
                                "of numbers)") from None
    if not out or not all(0 <= x <= most for x in out):       # NaN fails this too
        raise FloodwayError(f"{what}: give numbers in 0..{most:g}, got {spec!r}")
    return out


def _plot_path(out: Path) -> Path:
    """Where `--out` writes its PNG (".png" added when it has no suffix), checked before a
    simulation runs."""
    if out.is_dir():
        raise FloodwayError(f"--out {out} is a directory; name a .png file")
    if out.suffix == "":
        out = out.with_suffix(".png")
    if out.suffix.lower() != ".png":
        raise FloodwayError(f"--out {out}: the plot is a PNG; name it *.png")
    existed = out.exists()
    try:                            # try it now rather than after a long simulation
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("ab"):
            pass
        if not existed:
            out.unlink()
    except OSError as e:
        raise FloodwayError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    return out


def _sim_models(cold_start_s: str, service_ms: str | None, per_row_ms: float,
               batch_times: Path | None = None):
    """`simulate`'s cold-start and service-time options as the simulator's models
    (`ColdStartModel`, `ServiceModel`: None when they give none); FloodwayError names the
    option that is wrong."""
    from floodway.sim import ColdStartModel, ServiceModel

    cold = ColdStartModel.of(_numbers(cold_start_s, "--cold-start-s", 3600.0))
    if batch_times is not None and (service_ms is not None or per_row_ms):
        raise FloodwayError("--batch-times gives the service model: drop --service-ms/--per-row-ms")
    if batch_times is not None:
        return cold, ServiceModel.read_batch_times(batch_times)
    if service_ms is None:
        if per_row_ms:
            raise FloodwayError("--per-row-ms applies with a single --service-ms value "
                                "(without it, the last bench run's fit or the prior)")
        return cold, None
    ms = _numbers(service_ms, "--service-ms", 3_600_000.0)
    if per_row_ms and len(ms) > 1:
        raise FloodwayError(f"--per-row-ms applies with a single --service-ms value, "
                            f"not {len(ms)} samples (each sample is a whole batch)")
    return cold, (ServiceModel.of(ms[0] / 1e3, per_row_ms / 1e3) if len(ms) == 1 else
                  ServiceModel.of([m / 1e3 for m in ms]))


def _print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _simulate_generation(ep, tr, cold, seed: int, out: Path | None) -> None:
    """`simulate` of a streaming endpoint (`floodway.sim.generation`) with its Route,
    WarmPool and Generation (the default Generation for one that does not stream), the
    cold starts given, containers at the priors' prefill and step speed. Raises
    FloodwayError for a trace without token columns, or with --out (no plot for it)."""
    from floodway.config import Generation
    from floodway.sim.generation import GenSimConfig, simulate_generation

    if tr.prompt_tokens is None or tr.generated_tokens is None:
        raise FloodwayError("--generation needs a per-request trace with ContextTokens and "
                            "GeneratedTokens columns")
    if out is not None:
        raise FloodwayError("--out: the generation simulation has no plot; drop --out")
    gen = ep.generation or Generation()
    res = simulate_generation(tr, GenSimConfig(
        route=ep.route, warm=ep.warm, max_sequences=gen.max_sequences,
        kv_cache_tokens=gen.kv_cache_tokens, max_new_tokens=gen.max_new_tokens, cold=cold,
        seed=seed))
    _print_rows(f"floodway simulate {ep.name} (generation) on {tr.name} "
                f"({tr.requests:,} requests)", res.rows())


def simulate(app: AppArg,
             trace: Annotated[Path | None, typer.Option(help=TRACE_OPT)] = None,
             function: Annotated[str | None, typer.Option(
                 help="per-minute CSV: the HashFunction (or a unique prefix) or 0-based row "
                      "index (default: row 0)")] = None,
             column: Annotated[str | None, typer.Option(
                 help="per-request CSV: the timestamp column (default TIMESTAMP)")] = None,
             spread: Annotated[str, typer.Option(
                 help="per-minute counts within a minute: uniform | poisson")] = "uniform",
             usd_per_gpu_s: Annotated[float, typer.Option(
                 min=0, help="$ per container-second (GPU price)")] = 0.000222,
             cold_start_s: Annotated[str, typer.Option(
                 help="measured cold starts, seconds: N, N,N,... or a file of numbers")] = "30",
             service_ms: Annotated[str | None, typer.Option(
                 help="batch service time, ms: N, N,N,... (samples) or a file (default: "
                      "the batch times of the last bench run of the endpoint, in "
                      "./bench-out, else the prior: 20 ms + 5 ms per row)")] = None,
             per_row_ms: Annotated[float, typer.Option(
                 min=0, help="with a single --service-ms: ms added per row")] = 0.0,
             batch_times: Annotated[Path | None, typer.Option(help=BATCH_TIMES_OPT)] = None,
             seed: Annotated[int, typer.Option(help="seed of arrivals and samples")] = 0,
             out: Annotated[Path | None, typer.Option(help="write the plot here (PNG)")] = None,
             generation: Annotated[bool, typer.Option(help=GENERATION_OPT)] = False,
             bench_run: Annotated[Path | None, typer.Option(help=BENCH_RUN_OPT)] = None,
             ) -> None:
    """Simulate an endpoint's pool over a trace (`SIMULATE_HELP`)."""
    from floodway.bench.runfile import BenchRun
    from floodway.bench.service_choice import choose_service
    from floodway.functions.discover import load_app
    from floodway.routers.tokens import TokenCost
    from floodway.sim import SimConfig, read_trace
    from floodway.sim import simulate as run

    no_modal()
    try:
        _, eps = load_app(app)
        if len(eps) != 1:
            raise FloodwayError(f"{app} has {len(eps)} endpoints ({', '.join(e.name for e in eps)})"
                                f"; pick one as {app}::ENDPOINT")
        ep, text = eps[0], TokenCost.of(eps[0])   # a text endpoint's requests may cost tokens
        bench = BenchRun.of_options(bench_run, trace, batch_times)
        tr = bench.trace(text and text.max_seq_len) if bench else read_trace(
            trace, function=function, column=column, spread=spread, seed=seed)
        cold, svc = _sim_models(cold_start_s, service_ms, per_row_ms,
                                bench.batch_times if bench else batch_times)
        service = choose_service(svc, app, ep.name, batch_times=batch_times, bench=bench,
                                 service_ms=service_ms)
        if spread not in ("uniform", "poisson"):
            raise FloodwayError(f"--spread must be uniform or poisson, got {spread!r}")
        if out is not None:
            out = _plot_path(out)
        for flag, x, most in (("--per-row-ms", per_row_ms, 3_600_000.0),
                              ("--usd-per-gpu-s", usd_per_gpu_s, 1e6)):
            if not 0 <= x <= most:                      # NaN fails this too
                raise FloodwayError(f"{flag}: give a number in 0..{most:g}, got {x}")
        if generation or (ep.streaming and tr.prompt_tokens is not None):
            _simulate_generation(ep, tr, cold, seed, out)
            return
    except FloodwayError as e:
        raise fail(e) from None
    from floodway.sim.kernel import prepare

    with console.status("loading the simulator's compiled fast path (compiling it the first "
                        "time in this checkout: about 10 s)"):
        took = prepare()
    if took > 2:
        console.print(f"compiled the simulator's fast path in {took:.1f} s (cached for next time)")
    console.print(escape(service.said))
    kw = {"cold": cold, "service": service.model, "usd_per_gpu_s": usd_per_gpu_s, "seed": seed}
    res = run(tr, bench.sim_config(ep, **kw) if bench else SimConfig(
        route=ep.route, warm=ep.warm, batching=ep.batching, max_seq_len=text and text.max_seq_len,
        **kw))
    _print_rows(f"floodway simulate {ep.name} on {tr.name} ({tr.requests:,} requests)",
                res.rows())
    if out is not None:
        from floodway.sim.plot import plot_result

        console.print(f"plot: {plot_result(res, out, f'{ep.name} on {tr.name}')}")


__all__ = ["SIMULATE_HELP", "simulate"]
