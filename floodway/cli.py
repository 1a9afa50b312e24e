"""The `floodway` command: build, serve, bench, simulate, deploy, hub-seed."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from floodway import cli_help as opts
from floodway.bench.command import bench
from floodway.cli_help import BENCH_HELP, BUILD_HELP, CLI_HELP, SERVE_HELP, SIMULATE_HELP
from floodway.errors import FloodwayError

cli = typer.Typer(help=CLI_HELP, no_args_is_help=True, add_completion=False)
console = Console(stderr=True, soft_wrap=True)

AppArg = Annotated[str, typer.Argument(
    help="FILE.py or module, optionally ::ENDPOINT (e.g. modal_app.py::embed)")]
StoreOpt = Annotated[Path | None, typer.Option(
    help="artifact store root (default: $FLOODWAY_STORE or the user cache)")]


def _no_modal() -> None:
    """build/serve never use the Modal objects an app file makes: skip importing Modal."""
    from floodway.modal.extra import NO_MODAL_ENV

    os.environ.setdefault(NO_MODAL_ENV, "1")


def _no_hub_progress_bars() -> None:
    """No Hugging Face progress bars (downloads, transformers loading weights) under
    floodway's own: the hub and transformers read this at import, workers inherit it; a
    value the user set wins."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _fail(e: Exception) -> typer.Exit:
    console.print(f"[bold red]error:[/] {escape(str(e))}")
    return typer.Exit(code=2)


def _modal_app(app: str, what: str):
    """The floodway App named by `app` and the one modal.App its module defines.

    Clears ``FLOODWAY_NO_MODAL`` first: left set in the shell, it would make `to_modal` skip
    building the Modal objects that deploying and building on Modal need."""
    from floodway.modal.extra import NO_MODAL_ENV, require_modal

    require_modal(what)
    import modal

    from floodway.functions.discover import import_target, load_app

    os.environ.pop(NO_MODAL_ENV, None)

    target = app.partition("::")[0]
    fw_app, _ = load_app(app)
    module = import_target(target.split(":")[0] if not target.endswith(".py") else target)
    apps = [v for v in vars(module).values() if isinstance(v, modal.App)]
    if len(apps) != 1:
        raise FloodwayError(f"{target} must define exactly one modal.App (e.g. "
                            f"`app = to_modal(endpoints)`) to {what}")
    return fw_app, apps[0]


@contextlib.contextmanager
def _talking_to_modal(what: str) -> Iterator[None]:
    """Say that Modal is being contacted (an unreachable Modal is retried for about a minute
    before the client gives up), and turn the client's errors into one FloodwayError line
    instead of a traceback through the client."""
    import modal.exception

    console.print(f"contacting Modal to {what}...")
    try:
        yield
    except modal.exception.ConnectionError as e:
        raise FloodwayError(f"could not reach Modal to {what} ({e}); check the network, and "
                            f"MODAL_SERVER_URL if it is set") from None
    except modal.exception.AuthError as e:
        raise FloodwayError(f"Modal refused the credentials to {what}: {e} (run `modal "
                            f"token new`, or check the MODAL_TOKEN_* or MODAL_OAUTH_* "
                            f"variables)") from None
    except modal.exception.Error as e:
        raise FloodwayError(f"Modal refused to {what}: {type(e).__name__}: {e}") from None


def _check_credentials() -> None:
    """Raise FloodwayError, before anything is sent to Modal, when the Modal credentials are
    missing or incomplete, or a JWT key's libraries are not installed (`credentials_problem`,
    looked up on `floodway.modal.deploy` as `deploy_and_apply` does)."""
    from floodway.modal import deploy as deployer

    problem = deployer.credentials_problem()
    if problem is not None:
        raise FloodwayError(problem)


# What the ``build`` extra installs (pyproject.toml): a build without them names the extra.
_BUILD_EXTRA_MODULES = frozenset({"torch", "transformers", "onnx", "onnxscript"})


def _build_on_modal(app: str, force: bool) -> None:
    """Run the app's Modal build functions (one per GPU type) and print what they did.
    Raises FloodwayError, before contacting Modal, when no credentials are configured."""
    endpoint = app.partition("::")[2]
    fw_app, module_app = _modal_app(app, "build on Modal")
    _check_credentials()
    from floodway.modal.app.build import run_builds_on_modal

    with _talking_to_modal("build"):
        results = run_builds_on_modal(module_app, fw_app, endpoint or None, force)
    for res in results:
        verdict = "unchanged (no-op)" if res["cached"] else "built"
        console.print(f"{res['endpoint']}: {verdict} {res['key']} on Modal in "
                      f"{res['seconds']:.1f}s; skipped: {res['skipped'] or 'nothing'}")


@cli.command(help=BUILD_HELP)
def build(app: AppArg, store: StoreOpt = None,
          force: Annotated[bool, typer.Option(help="rebuild even if unchanged")] = False,
          on_modal: Annotated[bool, typer.Option(
              "--on-modal", help="build on Modal, on each endpoint's own GPU type, into the "
                                 "artifact Volume; runs the build functions alone, not the "
                                 "serving app (needs Modal credentials)")] = False,
          ) -> None:
    """Build cold-start artifacts (`BUILD_HELP`)."""
    from floodway.build.pipeline import STAGES, build_endpoint
    from floodway.build.store import ArtifactStore
    from floodway.functions.discover import load_app

    if on_modal:
        try:
            _build_on_modal(app, force)
        except FloodwayError as e:
            raise _fail(e) from None
        return
    _no_modal()
    _no_hub_progress_bars()
    try:
        _, eps = load_app(app)
        st = ArtifactStore(store)
        for ep in eps:
            with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                          TextColumn("{task.fields[msg]}"), TimeElapsedColumn(),
                          console=console, transient=False) as progress:
                task = progress.add_task(f"build {ep.name}", total=len(STAGES), msg="")

                def report(stage: str, msg: str, progress=progress, task=task) -> None:
                    progress.update(task, completed=STAGES.index(stage), msg=f"{stage}: {msg}")

                res = build_endpoint(ep, st, report=report, force=force)
                progress.update(task, completed=len(STAGES))
            verdict = "unchanged (no-op)" if res.cached else "built"
            console.print(f"{ep.name}: {verdict} {res.path} in {res.seconds:.2f}s")
            for stage, why in res.skipped.items():
                console.print(f"{ep.name}: stage {stage} skipped: {why}")
            for warning in res.warnings:
                console.print(f"{ep.name}: warning: {warning}", style="yellow", markup=False)
            if res.stages_cached and not res.cached:
                console.print(f"{ep.name}: reused cached stages: {', '.join(res.stages_cached)}")
    except FloodwayError as e:
        raise _fail(e) from None
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in _BUILD_EXTRA_MODULES:
            raise
        raise _fail(FloodwayError(
            f"floodway build needs the build extra ({e.name} is not installed): pip install "
            f"'floodway[build]' (the README's install section says how to get torch's CPU "
            f"wheel)")) from None


def serve_logging(level: str) -> None:
    """`floodway serve`'s log: floodway's loggers at `level` (uvicorn's get it too); httpx's
    at WARNING at least (its line per request repeats the access log's)."""
    number = logging.getLevelName(level.upper())
    logging.basicConfig(level=number, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("floodway").setLevel(number)
    logging.getLogger("httpx").setLevel(max(number, logging.WARNING))


@cli.command(help=SERVE_HELP)
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
          jobs_db: Annotated[Path | None, typer.Option(help=opts.JOBS_HELP["db"])] = None,
          job_ttl_s: Annotated[float, typer.Option(min=1, help=opts.JOBS_HELP["ttl"])] = 86400.0,
          job_max_mib: Annotated[int, typer.Option(min=1, help=opts.JOBS_HELP["max"])] = 1024,
          job_tenant_mib: Annotated[int, typer.Option(min=1, help=opts.JOBS_HELP["tenant"])] = 256,
          allow_stale: Annotated[bool, typer.Option(
              "--allow-stale", help="serve builds made from another definition of their "
                                    "endpoint (a warning instead of the refusal)")] = False,
          log_level: Annotated[opts.LogLevel, typer.Option(
              case_sensitive=False, help=opts.LOG_LEVEL_OPT)] = opts.LogLevel.info,
          ) -> None:
    """Serve endpoints locally (`SERVE_HELP`)."""
    from floodway.routers.admission import ApiKeys
    from floodway.runtime.server import serve as run

    serve_logging(log_level.value)
    _no_modal()
    _no_hub_progress_bars()
    try:
        run(app, host=host, port=port, store=store, containers=containers,
            show_example=show_example, api_keys=ApiKeys.from_env(extra=api_key or ()),
            jobs_db=jobs_db, job_ttl_s=job_ttl_s, job_max_bytes=job_max_mib << 20,
            job_tenant_max_bytes=job_tenant_mib << 20, allow_stale=allow_stale,
            log_level=log_level.value)
    except FloodwayError as e:
        raise _fail(e) from None


# Defined beside the replay it drives (floodway/bench/command.py), registered here.
cli.command(help=BENCH_HELP)(bench)


@cli.command()
def deploy(app: Annotated[str, typer.Argument(
        help="FILE.py or module whose top level calls to_modal (e.g. modal_app.py)")]) -> None:
    """Deploy to Modal (as `modal deploy` does), then re-apply every endpoint's current warm
    target, which the deploy reset to the decorator's values (needs Modal credentials, and
    the router's keys Secret unless the router is public: checked before deploying)."""
    from floodway.modal import deploy as deployer
    from floodway.modal.warmers.apply import summary_line

    try:
        if "::" in app:
            raise FloodwayError("deploy takes the whole app: drop the ::ENDPOINT part")
        fw_app, module_app = _modal_app(app, "deploy")
        _check_credentials()
        with _talking_to_modal("deploy"):
            applied = deployer.deploy_and_apply(module_app, fw_app)
    except FloodwayError as e:
        raise _fail(e) from None
    console.print(f"deployed {module_app.name}; warm targets:")
    for a in applied:
        console.print(summary_line(a))
    if any(a.error for a in applied):
        raise typer.Exit(code=1)


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


@cli.command(help=SIMULATE_HELP)
def simulate(app: AppArg,
             trace: Annotated[Path | None, typer.Option(help=opts.TRACE_OPT)] = None,
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
             batch_times: Annotated[Path | None, typer.Option(help=opts.BATCH_TIMES_OPT)] = None,
             seed: Annotated[int, typer.Option(help="seed of arrivals and samples")] = 0,
             out: Annotated[Path | None, typer.Option(help="write the plot here (PNG)")] = None,
             generation: Annotated[bool, typer.Option(help=opts.GENERATION_OPT)] = False,
             bench_run: Annotated[Path | None, typer.Option(help=opts.BENCH_RUN_OPT)] = None,
             ) -> None:
    """Simulate an endpoint's pool over a trace (`SIMULATE_HELP`)."""
    from floodway.bench.runfile import BenchRun
    from floodway.bench.service_choice import choose_service
    from floodway.functions.discover import load_app
    from floodway.routers.tokens import TokenCost
    from floodway.sim import SimConfig, read_trace
    from floodway.sim import simulate as run

    _no_modal()
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
        raise _fail(e) from None
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


@cli.command("hub-seed")
def hub_seed(folder: Annotated[Path, typer.Argument(help="a local HF-format model folder")],
             repo_id: Annotated[str, typer.Argument()], revision: Annotated[str, typer.Argument()],
             cache_dir: Annotated[Path | None, typer.Option(
                 help="Hub cache (default: HF_HUB_CACHE)")] = None) -> None:
    """Place a local model folder in the Hugging Face cache as REPO_ID at REVISION, so that
    builds resolve it through huggingface_hub with HF_HUB_OFFLINE=1."""
    from floodway.build.fetch import seed_hub_cache

    t = time.perf_counter()
    snap = seed_hub_cache(folder, repo_id, revision, cache_dir)
    console.print(f"seeded {repo_id}@{revision[:12]} -> {snap} ({time.perf_counter() - t:.2f}s)")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
