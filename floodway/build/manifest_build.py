"""Assembling a build's `Manifest` (`floodway.build.manifest`) at publish time, from what the
pipeline's stages left: the exported graph's io signature, the parity checks, the engine
stamps, the file hashes of the staging folder."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from floodway.build.manifest import (
    EngineEntry,
    FileEntry,
    GenerationInfo,
    Hardware,
    IOSignature,
    Manifest,
    ParityCheck,
    PrecisionEntry,
    SourceInfo,
    TaskInfo,
    TensorSpec,
)
from floodway.build.prefetch import sha256_path
from floodway.sources import HFModel, LocalModel, TorchModel


def source_info(src: Any, files: dict[str, str]) -> SourceInfo:
    """The manifest's record of a model source (None: no source)."""
    if src is None:
        return SourceInfo(kind="none", display="none")
    kind = ("hf" if isinstance(src, HFModel) else "local" if isinstance(src, LocalModel)
            else "torch")
    repo = src.repo_id if isinstance(src, HFModel) else (
        str(src.weights) if isinstance(src, TorchModel) and src.weights_kind == "hf" else None)
    return SourceInfo(kind=kind, display=src.display, repo_id=repo,
                      revision=getattr(src, "revision", None),
                      factory=src.factory if isinstance(src, TorchModel) else None, files=files,
                      allow_random_head=bool(getattr(src, "allow_random_head", False)))


def task_info(task: Any, tolerance: float, labels: tuple[str, ...] = ()) -> TaskInfo:
    return TaskInfo(name=task.name, model_class=task.model_class, metric=task.metric,
                    per_token=task.per_token, tolerance=tolerance, labels=list(labels))


def artifacts_of(staging: Path) -> dict[str, FileEntry]:
    """Every file of the staging folder: size and sha256, by path relative to it."""
    return {str(p.relative_to(staging)): FileEntry(bytes=p.stat().st_size,
                                                   sha256=sha256_path(p))
            for p in sorted(staging.rglob("*")) if p.is_file()}


def io_signature(io: dict[str, list[dict[str, Any]]] | None) -> IOSignature:
    io = io or {"inputs": [], "outputs": []}
    return IOSignature(inputs=[TensorSpec(**s) for s in io["inputs"]],
                       outputs=[TensorSpec(**s) for s in io["outputs"]])


def engine_entry(info: dict[str, Any], hw: Any) -> EngineEntry:
    return EngineEntry(path=info["path"], profile=info["profile"],
                       tensorrt_version=info["tensorrt_version"],
                       compute_capability=hw.compute_capability or "",
                       gpu_name=hw.gpu_name or "", precision=info.get("precision", "fp32"))


def make_manifest(*, ep: Any, key: str, files: dict[str, str], tools: dict[str, str], hw: Any,
                  staging: Path, io: dict[str, list[dict[str, Any]]] | None, max_seq_len: int,
                  task: TaskInfo | None, runtime: str = "floodway",
                  engines: list[EngineEntry] | None = None,
                  skipped: dict[str, str] | None = None,
                  parity: list[dict[str, Any]] | None = None,
                  timings: dict[str, float] | None = None,
                  generation: dict[str, Any] | None = None,
                  precisions: list[dict[str, Any]] | None = None,
                  warnings: list[str] | None = None) -> Manifest:
    """The manifest of the build being published from `staging` (see `Manifest`)."""
    return Manifest(
        endpoint=ep.name, build_key=key, created_at=datetime.now(UTC).isoformat(),
        runtime=runtime, task=task, source=source_info(ep.model, files),
        build=dataclasses.asdict(ep.build), toolchain=tools,
        hardware=Hardware(hardware_class=hw.hardware_class, gpu_name=hw.gpu_name,
                          compute_capability=hw.compute_capability,
                          tensorrt_version=hw.tensorrt_version),
        io=io_signature(io), max_seq_len=max_seq_len, artifacts=artifacts_of(staging),
        engines=engines or [], skipped=skipped or {},
        parity=[ParityCheck(**c) for c in parity or []], timings_s=timings or {},
        generation=GenerationInfo(**generation) if generation else None,
        precisions=[PrecisionEntry(**p) for p in precisions or []], warnings=warnings or [])


__all__ = ["artifacts_of", "engine_entry", "io_signature", "make_manifest", "source_info",
           "task_info"]
