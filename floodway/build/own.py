"""Builds of endpoints that bring their own runtime (`load=`, or no model source).

floodway exports no graph for them; the build holds what the endpoint's `load` hook reads
(`floodway.build.artifacts.Artifacts`), hashed in the manifest like any build:

    source                  the build holds
    HFModel / LocalModel    ``source/``: the fetched files, as they are (config, tokenizer,
                            weights: what ``from_pretrained(artifacts.source_dir)`` reads)
    TorchModel              ``weights/model.safetensors``: the module's state dict, snapshotted
    none                    nothing but the manifest

Publishing, the build key and the no-op rebuild are the pipeline's (`floodway.build.pipeline`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from floodway.build.artifacts import SOURCE_DIR
from floodway.sources import TorchModel

WHY_SKIPPED = "the endpoint brings its own runtime (load=)"
WHY_NO_SOURCE = "the endpoint has no model source"


def _copy_source(folder: Path, d: Path) -> None:
    from floodway.build.stages import link_into

    link_into(folder, d / SOURCE_DIR)


def build_own(run: Any, key: str, files: dict[str, str], snap_key: str) -> Path:
    """Build and publish the files of an own-runtime endpoint (`run`: the pipeline's run)
    -> the published folder."""
    from floodway.build.manifest_build import make_manifest, task_info

    ep, src, b = run.ep, run.src, run.ep.build
    parts: tuple[Path, ...] = ()
    if isinstance(src, TorchModel):
        from floodway.build import export

        parts = (run.stage("snapshot", snap_key,
                           lambda d: export.snapshot_weights(run.model(), d, b.dtype),
                           f"the module's state dict as safetensors in {b.dtype}"),)
    elif src is not None:
        parts = (run.stage("snapshot", snap_key, lambda d: _copy_source(run.folder, d),
                           "the source's files, as fetched"),)
    why = WHY_SKIPPED if ep.load is not None else WHY_NO_SOURCE
    for stage in ("export", "optimize", "compile", "verify"):
        run.skipped[stage] = why
        run.say(stage, f"skipped: {why}")
    run.say("publish", f"{ep.name}/{key}")
    task = task_info(run.task, run.atol) if run.task is not None else None

    def manifest(staging: Path) -> Any:
        return make_manifest(ep=ep, key=key, files=files, tools=run.tools, hw=run.hw,
                             staging=staging, io=None, max_seq_len=b.max_seq_len, task=task,
                             runtime="own", skipped=run.skipped, timings=run.timings)

    return run.publish(key, files, parts, manifest)


__all__ = ["SOURCE_DIR", "WHY_NO_SOURCE", "WHY_SKIPPED", "build_own"]
