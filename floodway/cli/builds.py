"""`floodway build` (cold-start artifacts, here or with --on-modal on Modal) and
`floodway hub-seed` (a local model folder placed in the Hugging Face cache for builds)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from floodway.cli.common import AppArg, StoreOpt, console, fail, no_hub_progress_bars, no_modal
from floodway.errors import FloodwayError

BUILD_HELP = (
    "Build cold-start artifacts: fetch, snapshot, export, optimize, compile, verify, publish."
    "\n\n"
    "A task=\"text-generation\" model (a GPT-2- or Llama-style decoder) exports to one ONNX "
    "graph with its key/value cache, checked against PyTorch; the container runs it with "
    "continuous batching.")
# What the ``build`` extra installs (pyproject.toml): a build without them names the extra.
_BUILD_EXTRA_MODULES = frozenset({"torch", "transformers", "onnx", "onnxscript"})


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
    from floodway.cli.on_modal import build_on_modal
    from floodway.functions.discover import load_app

    if on_modal:
        try:
            build_on_modal(app, force)
        except FloodwayError as e:
            raise fail(e) from None
        return
    no_modal()
    no_hub_progress_bars()
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
        raise fail(e) from None
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in _BUILD_EXTRA_MODULES:
            raise
        raise fail(FloodwayError(
            f"floodway build needs the build extra ({e.name} is not installed): pip install "
            f"'floodway[build]' (the README's install section says how to get torch's CPU "
            f"wheel)")) from None


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


__all__ = ["BUILD_HELP", "build", "hub_seed"]
