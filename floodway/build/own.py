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

import os
import shutil
from pathlib import Path
from typing import Any

from floodway.build.artifacts import SOURCE_DIR
from floodway.sources import TorchModel

WHY_SKIPPED = "the endpoint brings its own runtime (load=)"
WHY_NO_SOURCE = "the endpoint has no model source"


def is_hub_blob(path: Path) -> bool:
    """Whether `path` is a Hugging Face cache blob (``models--org--name/blobs/<hash>``): named
    by its content's hash and never rewritten, so a build may share it (a hard link)."""
    repo = path.parent.parent.name
    return path.parent.name == "blobs" and repo.startswith(("models--", "datasets--"))


def _copy_source(folder: Path, d: Path) -> None:
    """Every file of `folder` into ``d/source/``, as bytes: a copy, so that editing the
    user's own folder after a build never alters the build (a hard link would share the
    file); only a Hub cache blob, immutable, is hard-linked (`is_hub_blob`). A symbolic link
    (a Hub snapshot is made of them) is followed, never kept: its relative target would
    dangle in the build."""
    for f in sorted(folder.rglob("*")):
        if not f.is_file():
            continue
        target = d / SOURCE_DIR / f.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        real = f.resolve()
        if is_hub_blob(real):
            try:
                os.link(real, target)
                continue
            except OSError:   # another filesystem: a copy
                pass
        shutil.copyfile(real, target)


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


__all__ = ["SOURCE_DIR", "WHY_NO_SOURCE", "WHY_SKIPPED", "build_own", "is_hub_blob"]
