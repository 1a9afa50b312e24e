"""The build pipeline: fetch -> snapshot -> export -> optimize -> compile -> verify -> publish.

Every stage after fetch is cached by a key over its inputs (`floodway.build.stages`), and the
build as a whole by a build key over all stage keys, the source, the build config and the
hardware class. When that build is already published, `build_endpoint` only re-points LATEST:
an unchanged rebuild is a no-op (it hashes the source files and nothing more).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from floodway.build.fetch import fetch
from floodway.build.hardware import HardwareInfo, detect
from floodway.build.manifest_view import ManifestView
from floodway.build.prefetch import ONNX_FILE, OPT_FILE, make_tokenizer, sha256_path
from floodway.build.stages import StageCache, link_into, stage_key
from floodway.build.store import ArtifactStore
from floodway.config import HFModel
from floodway.functions.endpoint import Endpoint

# The stage code (torch, numpy, onnx, pydantic) is imported only when a stage runs, so that an
# unchanged rebuild stays well under a second.
TOKENIZER_DIR = "tokenizer"

STAGES = ("fetch", "snapshot", "export", "optimize", "compile", "verify", "publish")
TOOLCHAIN = ("floodway", "torch", "transformers", "onnx", "onnxruntime", "tokenizers",
             "safetensors", "tensorrt")
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
    stages_cached: tuple[str, ...] = ()
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)


def toolchain() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in TOOLCHAIN:
        out[dist] = "absent"
        # GPU builds install the -gpu wheels of ONNX Runtime and TensorRT's cuda-specific ones.
        for name in (dist, f"{dist}-gpu", f"{dist}-cu12", f"{dist}-cu13"):
            try:
                out[dist] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def source_files(folder: Path) -> dict[str, str]:
    """sha256 of every file a build reads from the source folder."""
    return {str(p.relative_to(folder)): sha256_path(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def compile_skip_reason(ep: Endpoint, hw: HardwareInfo) -> str | None:
    """Why the TensorRT compile stage does not run here (None: it runs)."""
    if not ep.build.tensorrt:
        return "Build.tensorrt is False"
    if hw.gpu_name is None:
        return ("no CUDA GPU on this machine (engines are compiled on the endpoint's GPU type, "
                "e.g. `floodway build --on-modal`)")
    if hw.tensorrt_version is None:
        return "tensorrt is not installed (pip install 'floodway[tensorrt]')"
    return None


class _Build:
    """One run of the pipeline for one endpoint (holds the lazily loaded torch model)."""

    def __init__(self, ep: Endpoint, store: ArtifactStore, say: Report, hw: HardwareInfo):
        self.ep, self.store, self.say, self.hw = ep, store, say, hw
        self.cache = StageCache(store.root)
        self.tools = toolchain()
        self.timings: dict[str, float] = {}
        self.cached: list[str] = []
        self.skipped: dict[str, str] = {}

    @cache  # noqa: B019 - one model per build run, dropped with the run
    def model(self) -> Any:
        from floodway.build import export

        return export.load_torch_model(self.folder, allow_pickle=self.ep.model.allow_pickle)

    def stage(self, name: str, key: str, produce: Callable[[Path], None], msg: str) -> Path:
        self.say(name, msg)
        t = time.perf_counter()
        out, hit = self.cache.run(name, key, produce)
        self.timings[name] = round(time.perf_counter() - t, 4)
        if hit:
            self.cached.append(name)
            self.say(name, f"cached ({key})")
        return out

    def keys(self, files: dict[str, str]) -> dict[str, str]:
        b, t = self.ep.build, self.tools
        snap = stage_key("snapshot", files, b.dtype, t["torch"], t["transformers"],
                         t["safetensors"], self.ep.model.allow_pickle)
        exp = stage_key("export", snap, b.opset, t["torch"], t["onnx"], b.max_seq_len)
        opt = stage_key("optimize", exp, t["onnxruntime"])
        comp = stage_key("compile", exp, t["tensorrt"], self.hw.sm, b.max_batch_rows,
                         b.max_seq_len, self.ep.batching.max_batch_rows)
        ver = stage_key("verify", exp, opt, b.parity_atol, b.max_batch_rows, b.max_seq_len,
                        t["onnxruntime"])
        return {"snapshot": snap, "export": exp, "optimize": opt, "compile": comp,
                "verify": ver}

    def run(self, force: bool) -> BuildResult:
        ep, b = self.ep, self.ep.build
        t0 = time.perf_counter()
        self.say("fetch", ep.model.display)
        self.folder = fetch(ep.model)
        files = source_files(self.folder)
        self.timings["fetch"] = round(time.perf_counter() - t0, 4)
        keys = self.keys(files)
        skip = compile_skip_reason(ep, self.hw)
        key = stage_key("build", ep.model.display, keys, dataclasses.asdict(b),
                        self.hw.hardware_class, skip is None)
        final = self.store.build_dir(ep.name, key)
        if (final / "manifest.json").is_file() and not force:
            self.store.publish(ep.name, key, self.store.staging_dir(ep.name))
            self.say("publish", f"unchanged: {key} is already built")
            skipped = ManifestView.parse((final / "manifest.json").read_bytes()).skipped
            return BuildResult(ep.name, key, final, True, time.perf_counter() - t0,
                               tuple(STAGES), skipped)
        if force:
            shutil.rmtree(final, ignore_errors=True)
            shutil.rmtree(self.cache.root, ignore_errors=True)

        from floodway.build import export

        snap = self.stage("snapshot", keys["snapshot"],
                          lambda d: export.snapshot_weights(self.model(), d, b.dtype),
                          f"safetensors in {b.dtype}")
        exp = self.stage("export", keys["export"], lambda d: self._export(d),
                         f"ONNX opset {b.opset}, dynamic batch and sequence axes")
        names = tuple(json.loads((exp / "inputs.json").read_text()))
        opt = self.stage("optimize", keys["optimize"],
                         lambda d: export.optimize_onnx(exp / ONNX_FILE, d / OPT_FILE),
                         "ONNX Runtime offline optimization (EXTENDED)")
        comp = None
        if skip:
            self.skipped["compile"] = skip
            self.say("compile", f"skipped: {skip}")
        else:
            comp = self.stage("compile", keys["compile"], lambda d: self._compile(exp, names, d),
                              f"TensorRT {self.hw.tensorrt_version} for {self.hw.sm}")
        ver = self.stage("verify", keys["verify"], lambda d: self._verify(exp, opt, names, d),
                         "parity PyTorch vs ONNX Runtime (plain and optimized graphs)")

        self.say("publish", f"{ep.name}/{key}")
        staging = self.store.staging_dir(ep.name)
        try:
            for part in (snap, exp, opt) + ((comp,) if comp else ()):
                link_into(part, staging)
            (staging / "inputs.json").unlink(missing_ok=True)
            (staging / "engine.json").unlink(missing_ok=True)
            tok_dir = staging / TOKENIZER_DIR
            tok_dir.mkdir()
            for name in TOKENIZER_FILES:
                if (self.folder / name).is_file():
                    shutil.copyfile(self.folder / name, tok_dir / name)
            manifest = self._manifest(key, files, names, staging, ver, comp)
            manifest.write(staging)
            path = self.store.publish(ep.name, key, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return BuildResult(ep.name, key, path, False, time.perf_counter() - t0,
                           tuple(self.cached), dict(self.skipped))

    def _export(self, d: Path) -> None:
        from floodway.build import export

        names = export.input_names(self.model())
        export.export_onnx(self.model(), d / ONNX_FILE, names=names, opset=self.ep.build.opset)
        (d / "inputs.json").write_text(json.dumps(list(names)))

    def _compile(self, exp: Path, names: tuple[str, ...], d: Path) -> None:
        from floodway.build import trt

        b = self.ep.build
        shapes = trt.profile_shapes(names, b.max_batch_rows, b.max_seq_len,
                                    self.ep.batching.max_batch_rows)
        rel = (f"engines/trt-{self.hw.tensorrt_version}/{self.hw.sm}/"
               f"{trt.profile_id(shapes)}/model.plan")
        info = trt.compile_engine(exp / ONNX_FILE, d / rel, shapes)
        (d / "engine.json").write_text(json.dumps({"path": rel, "profile": shapes, **info}))

    def _verify(self, exp: Path, opt: Path, names: tuple[str, ...], d: Path) -> None:
        import onnxruntime as ort

        from floodway.build import export
        from floodway.build.manifest import ParityCheck
        from floodway.functions.loaded import Loaded

        b = self.ep.build
        max_len = export.read_max_seq_len(self.folder, b.max_seq_len)
        tok = make_tokenizer(self.folder, max_len)
        probe = Loaded(backend="probe", tokenizer=tok, runner=lambda f: {}, input_names=names,
                       max_seq_len=max_len, artifact_dir=d)
        checks: list[ParityCheck] = []
        for folder, graph in ((exp, ONNX_FILE), (opt, OPT_FILE)):
            session = ort.InferenceSession(str(folder / graph),
                                           providers=["CPUExecutionProvider"])
            checks += export.check_parity(self.model(), session, probe.encode,
                                          max_rows=b.max_batch_rows, max_seq_len=max_len,
                                          atol=b.parity_atol, graph=graph)
        (d / "parity.json").write_text(json.dumps({
            "max_seq_len": max_len, "checks": [c.model_dump() for c in checks]}))

    def _manifest(self, key: str, files: dict[str, str], names: tuple[str, ...], staging: Path,
                  ver: Path, comp: Path | None) -> Any:
        from floodway.build import export
        from floodway.build.manifest import (
            EngineEntry,
            FileEntry,
            Hardware,
            IOSignature,
            Manifest,
            ParityCheck,
            SourceInfo,
            TensorSpec,
        )

        ep, src = self.ep, self.ep.model
        parity = json.loads((ver / "parity.json").read_text())
        engines = []
        if comp is not None:
            info = json.loads((comp / "engine.json").read_text())
            engines.append(EngineEntry(path=info["path"], profile=info["profile"],
                                       tensorrt_version=info["tensorrt_version"],
                                       compute_capability=self.hw.compute_capability or "",
                                       gpu_name=self.hw.gpu_name or ""))
        artifacts = {str(p.relative_to(staging)): FileEntry(bytes=p.stat().st_size,
                                                            sha256=sha256_path(p))
                     for p in sorted(staging.rglob("*")) if p.is_file()}
        return Manifest(
            endpoint=ep.name, build_key=key, created_at=datetime.now(UTC).isoformat(),
            source=SourceInfo(kind="hf" if isinstance(src, HFModel) else "local",
                              display=src.display, repo_id=getattr(src, "repo_id", None),
                              revision=getattr(src, "revision", None), files=files),
            build=dataclasses.asdict(ep.build), toolchain=self.tools,
            hardware=Hardware(hardware_class=self.hw.hardware_class, gpu_name=self.hw.gpu_name,
                              compute_capability=self.hw.compute_capability,
                              tensorrt_version=self.hw.tensorrt_version),
            io=IOSignature(
                inputs=[TensorSpec(name=n, dtype="int64", shape=["batch", "seq"]) for n in names],
                outputs=[TensorSpec(name=export.OUTPUT_NAME, dtype="float32",
                                    shape=["batch", "seq", "hidden"])]),
            max_seq_len=parity["max_seq_len"], artifacts=artifacts, engines=engines,
            skipped=self.skipped, parity=[ParityCheck(**c) for c in parity["checks"]],
            timings_s=self.timings)


def build_endpoint(ep: Endpoint, store: ArtifactStore | None = None, *,
                   report: Report | None = None, force: bool = False,
                   hardware: HardwareInfo | None = None) -> BuildResult:
    """Build (or find) the artifacts of `ep`. Raises BuildError naming the failed stage.

    `force` discards cached stages and the published build first. `hardware` overrides
    detection (tests; building for the machine you are on is the normal case).
    """
    run = _Build(ep, store or ArtifactStore(), report or (lambda stage, msg: None),
                 hardware or detect())
    return run.run(force)
