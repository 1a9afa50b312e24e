"""The build pipeline: fetch -> snapshot -> export -> verify -> publish.

`build_endpoint` computes the build key first (source revision and file hashes, build config,
toolchain versions, hardware class); if that build is already published it only re-points
LATEST and returns, so an unchanged rebuild is a no-op.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from floodway.build import export
from floodway.build.fetch import fetch, sha256_file
from floodway.build.loader import ONNX_FILE, TOKENIZER_DIR, make_tokenizer
from floodway.build.manifest import (
    FileEntry,
    Hardware,
    IOSignature,
    Manifest,
    SourceInfo,
    TensorSpec,
)
from floodway.build.store import ArtifactStore
from floodway.config import HFModel
from floodway.functions.endpoint import Endpoint
from floodway.functions.loaded import Loaded

STAGES = ("fetch", "snapshot", "export", "verify", "publish")
TOOLCHAIN = ("floodway", "torch", "transformers", "onnx", "onnxruntime", "tokenizers",
             "safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "config.json", "sentence_bert_config.json")

Report = Callable[[str, str], None]


@dataclass(frozen=True)
class BuildResult:
    endpoint: str
    key: str
    path: Path
    cached: bool
    seconds: float


def toolchain() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in TOOLCHAIN:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def source_files(folder: Path) -> dict[str, str]:
    """sha256 of every file a build reads from the source folder."""
    return {str(p.relative_to(folder)): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def build_key(ep: Endpoint, files: dict[str, str], tools: dict[str, str], hw: str) -> str:
    blob = json.dumps({"source": ep.model.display, "files": files,
                       "build": dataclasses.asdict(ep.build), "toolchain": tools,
                       "hardware": hw}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_endpoint(ep: Endpoint, store: ArtifactStore | None = None, *,
                   report: Report | None = None, force: bool = False) -> BuildResult:
    """Build (or find) the artifacts of `ep`. Raises BuildError naming the failed stage."""
    say = report or (lambda stage, msg: None)
    store = store or ArtifactStore()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(stage: str, t: float) -> float:
        now = time.perf_counter()
        timings[stage] = round(now - t, 4)
        return now

    say("fetch", ep.model.display)
    folder = fetch(ep.model)
    files = source_files(folder)
    tools = toolchain()
    key = build_key(ep, files, tools, "cpu")
    t = lap("fetch", t0)
    final = store.build_dir(ep.name, key)
    if final.is_dir() and (final / "manifest.json").is_file() and not force:
        store.publish(ep.name, key, store.staging_dir(ep.name))
        say("publish", f"unchanged: {key} is already built")
        return BuildResult(ep.name, key, final, True, time.perf_counter() - t0)
    if force and final.is_dir():
        shutil.rmtree(final)

    staging = store.staging_dir(ep.name)
    try:
        say("snapshot", "loading weights (PyTorch) and writing safetensors")
        model = export.load_torch_model(folder, allow_pickle=ep.model.allow_pickle)
        export.snapshot_weights(model, staging)
        t = lap("snapshot", t)

        say("export", f"ONNX opset {ep.build.opset}, dynamic batch and sequence axes")
        names = export.input_names(model)
        export.export_onnx(model, staging / ONNX_FILE, names=names, opset=ep.build.opset)
        tok_dir = staging / TOKENIZER_DIR
        tok_dir.mkdir()
        for name in TOKENIZER_FILES:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, tok_dir / name)
        t = lap("export", t)

        say("verify", "parity PyTorch vs ONNX Runtime")
        import onnxruntime as ort

        max_len = export.read_max_seq_len(folder, ep.build.max_seq_len)
        session = ort.InferenceSession(str(staging / ONNX_FILE),
                                       providers=["CPUExecutionProvider"])
        probe = Loaded(backend="onnxruntime-cpu", tokenizer=make_tokenizer(tok_dir, max_len),
                       runner=lambda f: {}, input_names=names, max_seq_len=max_len,
                       artifact_dir=staging)
        parity = export.check_parity(model, session, probe.encode,
                                     max_rows=ep.build.max_batch_rows, max_seq_len=max_len,
                                     atol=ep.build.parity_atol)
        t = lap("verify", t)

        say("publish", f"{ep.name}/{key}")
        artifacts = {str(p.relative_to(staging)): FileEntry(bytes=p.stat().st_size,
                                                            sha256=sha256_file(p))
                     for p in sorted(staging.rglob("*")) if p.is_file()}
        src = ep.model
        manifest = Manifest(
            endpoint=ep.name, build_key=key, created_at=datetime.now(UTC).isoformat(),
            source=SourceInfo(kind="hf" if isinstance(src, HFModel) else "local",
                              display=src.display, repo_id=getattr(src, "repo_id", None),
                              revision=getattr(src, "revision", None), files=files),
            build=dataclasses.asdict(ep.build), toolchain=tools, hardware=Hardware(),
            io=IOSignature(
                inputs=[TensorSpec(name=n, dtype="int64", shape=["batch", "seq"]) for n in names],
                outputs=[TensorSpec(name=export.OUTPUT_NAME, dtype="float32",
                                    shape=["batch", "seq", "hidden"])]),
            max_seq_len=max_len, artifacts=artifacts, parity=parity, timings_s=timings)
        manifest.write(staging)
        lap("publish", t)
        path = store.publish(ep.name, key, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildResult(ep.name, key, path, False, time.perf_counter() - t0)
