"""The build pipeline: fetch -> snapshot -> export -> optimize -> compile -> verify -> precision
-> publish (precision only where `Build.precision` asks for int8, fp16 or bf16).

What is exported, and how parity is checked, comes from the source's task
(`floodway.tasks`). An endpoint that brings its own runtime (`load=`, or no model source)
gets a build without a graph (`floodway.build.own`): the source's files, or its module's
state dict, and a manifest.

Every stage after fetch is cached by a key over its inputs (`floodway.build.stages`), and the
build as a whole by a build key over all stage keys, the source, the task, the build config and
the hardware class. When that build is already published, `build_endpoint` only re-points
LATEST: an unchanged rebuild is a no-op (it hashes the source files and nothing more).

Publish opens a graph build in a fresh process first (`floodway.build.probe`) and records
the seconds in the manifest, the router's first cold-start estimate. Weights a checkpoint
lacks (a task's head) are initialised under a seed from the snapshot key, and only where the
source allows a random head (`floodway.build.export.load_torch_model`).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from floodway.build.fetch import fetch
from floodway.build.hardware import HardwareInfo, detect
from floodway.build.manifest_view import ManifestView
from floodway.build.precision import engine_precision, recipe_key, reduced
from floodway.build.prefetch import ONNX_FILE, OPT_FILE, sha256_path
from floodway.build.stages import StageCache, link_into, stage_key
from floodway.build.store import ArtifactStore
from floodway.functions.endpoint import Endpoint
from floodway.sources import TorchModel

# The stage code (torch, numpy, onnx, pydantic) is imported only when a stage runs, so that an
# unchanged rebuild stays well under a second.
STAGES = ("fetch", "snapshot", "export", "optimize", "compile", "verify", "precision",
          "publish")
TOOLCHAIN = ("floodway", "torch", "transformers", "onnx", "onnxruntime", "tokenizers",
             "safetensors", "tensorrt")
IO_FILE = "io.json"          # the export stage's record of the graph's io signature
PRECISION_RECORD = "precision.json"     # the precision stage's gate records
WARNINGS_RECORD = "warnings.json"       # the snapshot stage's warnings (an untrained head)

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
    warnings: tuple[str, ...] = ()      # what the build went on despite (an untrained head)


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
        from floodway import tasks

        self.ep, self.store, self.say, self.hw = ep, store, say, hw
        self.src = ep.model
        self.task = tasks.get(self.src.task) if self.src is not None else None
        self.cache = StageCache(store.root)
        self.tools = toolchain()
        self.timings: dict[str, float] = {}
        self.cached: list[str] = []
        self.skipped: dict[str, str] = {}
        self.folder: Path | None = None
        self.seed = 0       # weights the checkpoint lacks: initialised under the snapshot key
        self.warnings: list[str] = []     # what the build goes on despite (an untrained head)

    @property
    def atol(self) -> float:
        b = self.ep.build.parity_atol
        return b if b is not None else self.task.tolerance if self.task else 1e-3

    @cache  # noqa: B019 - one model per build run, dropped with the run
    def model(self) -> Any:
        if isinstance(self.src, TorchModel):
            from floodway.build import torch_module

            return torch_module.build_module(self.src)
        from floodway.build import export

        assert self.folder is not None and self.task is not None
        return export.load_torch_model(self.folder, allow_pickle=self.src.allow_pickle,
                                       model_class=self.task.model_class, seed=self.seed,
                                       allow_random_head=self.src.allow_random_head,
                                       warnings=self.warnings)

    @cache  # noqa: B019
    def ctx(self) -> Any:
        from floodway.tasks.base import BuildContext

        return BuildContext(self.src, self.folder, self.ep.build, self.model)

    def stage(self, name: str, key: str, produce: Callable[[Path], None], msg: str) -> Path:
        self.say(name, msg)
        t = time.perf_counter()
        out, hit = self.cache.run(name, key, produce)
        self.timings[name] = round(time.perf_counter() - t, 4)
        if hit:
            self.cached.append(name)
            self.say(name, f"cached ({key})")
        return out

    def fetch(self) -> dict[str, str]:
        """Fetch the source -> sha256 of every file the build reads from it."""
        src = self.src
        self.say("fetch", src.display if src is not None else "no model source")
        if src is None:
            return {}
        if isinstance(src, TorchModel):
            from floodway.build import torch_module

            return torch_module.source_files(src)
        self.folder = fetch(src, own_runtime=self.ep.own_runtime)
        return source_files(self.folder)

    def keys(self, files: dict[str, str]) -> dict[str, str]:
        b, t, src = self.ep.build, self.tools, self.src
        task = (self.task.name, self.task.model_class) if self.task else None
        module = ((src.factory, [dataclasses.astuple(s) for s in src.inputs], src.outputs)
                  if isinstance(src, TorchModel) else None)
        # An own-runtime build's snapshot is the source's files, not its weights: its own key.
        snap = stage_key("snapshot", files, b.dtype, t["torch"], t["transformers"],
                         t["safetensors"], getattr(src, "allow_pickle", False), task, module,
                         "own" if self.ep.own_runtime and not isinstance(src, TorchModel)
                         else "weights",
                         *(("random-head",) if getattr(src, "allow_random_head", False) else ()))
        exp = stage_key("export", snap, b.opset, t["torch"], t["onnx"], b.max_seq_len)
        opt = stage_key("optimize", exp, t["onnxruntime"])
        comp = stage_key("compile", exp, t["tensorrt"], self.hw.sm, b.max_batch_rows,
                         b.max_seq_len, self.ep.batching.max_batch_rows,
                         engine_precision(b.precision))
        ver = stage_key("verify", exp, opt, self.atol, b.max_batch_rows, b.max_seq_len,
                        t["onnxruntime"], t["transformers"])
        # The gate's verdict depends on where it ran: the CUDA provider or the CPU one.
        prec = stage_key("precision", exp, opt, comp, b.precision, b.precision_min_cosine,
                         b.precision_min_top1, b.precision_max_rel_err, b.max_batch_rows,
                         b.max_seq_len, t["onnxruntime"], t["onnx"], self.hw.has_cuda,
                         *recipe_key(b))
        return {"snapshot": snap, "export": exp, "optimize": opt, "compile": comp,
                "verify": ver, "precision": prec}

    def run(self, force: bool) -> BuildResult:
        ep = self.ep
        t0 = time.perf_counter()
        files = self.fetch()
        self.timings["fetch"] = round(time.perf_counter() - t0, 4)
        keys = self.keys(files)
        self.seed = int(keys["snapshot"], 16)
        skip = compile_skip_reason(ep, self.hw) if not ep.own_runtime else None
        key = stage_key("build", ep.model.display if ep.model else "none", keys,
                        dataclasses.asdict(ep.build), self.hw.hardware_class, skip is None,
                        "own" if ep.own_runtime else "floodway")
        final = self.store.build_dir(ep.name, key)
        if (final / "manifest.json").is_file() and not force:
            self.store.publish(ep.name, key, self.store.staging_dir(ep.name))
            self.say("publish", f"unchanged: {key} is already built")
            raw = (final / "manifest.json").read_bytes()
            return BuildResult(ep.name, key, final, True, time.perf_counter() - t0,
                               tuple(STAGES), ManifestView.parse(raw).skipped,
                               tuple(json.loads(raw).get("warnings", ())))
        if force:
            shutil.rmtree(final, ignore_errors=True)
            shutil.rmtree(self.cache.root, ignore_errors=True)
        if ep.own_runtime:
            from floodway.build.own import build_own

            path = build_own(self, key, files, keys["snapshot"])
        else:
            path = self._graph_build(key, files, keys, skip)
        return BuildResult(ep.name, key, path, False, time.perf_counter() - t0,
                           tuple(self.cached), dict(self.skipped), tuple(self.warnings))

    def _graph_build(self, key: str, files: dict[str, str], keys: dict[str, str],
                     skip: str | None) -> Path:
        from floodway.build import export

        b = self.ep.build
        snap = self.stage("snapshot", keys["snapshot"], self._snapshot,
                          f"safetensors in {b.dtype}")
        if (snap / WARNINGS_RECORD).is_file():   # kept with the weights they are about
            self.warnings[:] = json.loads((snap / WARNINGS_RECORD).read_text())
        exp = self.stage("export", keys["export"], self._export,
                         f"ONNX opset {b.opset} for {self.task.name}, dynamic axes by name")
        io = json.loads((exp / IO_FILE).read_text())
        opt = self.stage("optimize", keys["optimize"],
                         lambda d: export.optimize_onnx(exp / ONNX_FILE, d / OPT_FILE),
                         "ONNX Runtime offline optimization (EXTENDED)")
        comp = None
        if skip:
            self.skipped["compile"] = skip
            self.say("compile", f"skipped: {skip}")
        else:
            comp = self.stage("compile", keys["compile"], lambda d: self._compile(exp, io, d),
                              f"TensorRT {self.hw.tensorrt_version} for {self.hw.sm}")
        ver = self.stage("verify", keys["verify"], lambda d: self._verify(exp, opt, io, d),
                         f"parity PyTorch vs ONNX Runtime on {self.task.name} outputs "
                         "(plain and optimized graphs)")
        prec = self._precision(keys["precision"], exp, opt, io, comp)
        self.say("publish", f"{self.ep.name}/{key}")
        parts = (snap, exp, opt) + ((comp,) if comp else ()) + ((prec,) if prec else ())
        return self.publish(key, files, parts, lambda staging: self._manifest(
            key, files, io, staging, ver, comp, prec))

    def _precision(self, key: str, exp: Path, opt: Path, io: dict[str, Any],
                   comp: Path | None) -> Path | None:
        """The precision stage (`floodway.build.precision_gate`), where Build.precision
        asks for a reduced precision: its reduced graphs and their gate records."""
        asked = reduced(self.ep.build)
        if not asked:
            return None
        from floodway.build import precision_gate

        engine = ((comp, json.loads((comp / "engine.json").read_text()))
                  if comp is not None else None)
        return self.stage("precision", key,
                          lambda d: precision_gate.produce(self, d, exp, opt, io, engine),
                          f"{', '.join(asked)} vs float32 on {self.task.name} parity cases")

    def publish(self, key: str, files: dict[str, str], parts: tuple[Path, ...],
                manifest: Callable[[Path], Any]) -> Path:
        """Link `parts` into a staging folder with the task's preprocessing files, write the
        manifest (`manifest(staging)`) and publish it atomically."""
        staging = self.store.staging_dir(self.ep.name)
        try:
            for part in parts:
                link_into(part, staging)
            for name in (IO_FILE, "engine.json", PRECISION_RECORD, WARNINGS_RECORD):
                (staging / name).unlink(missing_ok=True)
            if (self.task and self.task.files_dir and self.folder is not None
                    and not self.ep.own_runtime):
                dst = staging / self.task.files_dir
                dst.mkdir()
                for name in self.task.publish_files():
                    if (self.folder / name).is_file():
                        shutil.copyfile(self.folder / name, dst / name)
            made = manifest(staging)
            made.write(staging)
            if made.runtime == "floodway":   # a graph: open it as a container would, timed
                from floodway.build.probe import probe_cold_start

                self.say("publish", "cold-start probe: the build opened in a fresh process")
                made.model_copy(update={"cold_start_s": probe_cold_start(staging)}).write(
                    staging)
            return self.store.publish(self.ep.name, key, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _snapshot(self, d: Path) -> None:
        from floodway.build import export

        export.snapshot_weights(self.model(), d, self.ep.build.dtype)
        if self.warnings:
            (d / WARNINGS_RECORD).write_text(json.dumps(self.warnings))

    def _export(self, d: Path) -> None:
        from floodway.build import export

        ctx, task = self.ctx(), self.task
        specs = task.graph_inputs(ctx)
        names = [s.name for s in specs]
        outputs = (self.src.outputs if isinstance(self.src, TorchModel)
                   else task.output_names(ctx))
        axes = {s.name: s.dynamic_axes() for s in specs}
        axes.update(task.output_axes(ctx))
        graph = task.graph(self.model(), names, outputs,
                           keywords=not isinstance(self.src, TorchModel))
        export.export_onnx(graph, d / ONNX_FILE, example=task.example_inputs(ctx), names=names,
                           outputs=outputs, axes=axes, opset=self.ep.build.opset)
        (d / IO_FILE).write_text(json.dumps(export.read_io(d / ONNX_FILE)))

    def _compile(self, exp: Path, io: dict[str, Any], d: Path) -> None:
        from floodway.build import trt

        b = self.ep.build
        shapes = trt.profile_shapes([(s["name"], s["shape"]) for s in io["inputs"]],
                                    b.max_batch_rows, b.max_seq_len,
                                    self.ep.batching.max_batch_rows)
        rel = (f"engines/trt-{self.hw.tensorrt_version}/{self.hw.sm}/"
               f"{trt.profile_id(shapes)}/model.plan")
        info = trt.compile_engine(exp / ONNX_FILE, d / rel, shapes,
                                  precision=engine_precision(b.precision))
        (d / "engine.json").write_text(json.dumps({"path": rel, "profile": shapes, **info}))

    def _verify(self, exp: Path, opt: Path, io: dict[str, Any], d: Path) -> None:
        import onnxruntime as ort

        from floodway.build import export

        ctx, task = self.ctx(), self.task
        max_len = task.max_seq_len(ctx)
        names = [s["name"] for s in io["inputs"]]
        outputs = [s["name"] for s in io["outputs"]]
        graph = task.graph(self.model(), names, outputs,
                           keywords=not isinstance(self.src, TorchModel))
        cases = task.parity_cases(ctx, max_len)
        checks = list(task.extra_checks(ctx))
        for folder, file in ((exp, ONNX_FILE), (opt, OPT_FILE)):
            session = ort.InferenceSession(str(folder / file),
                                           providers=["CPUExecutionProvider"])
            checks += [c.model_dump() for c in export.check_parity(
                graph, session, cases, names=names, outputs=outputs, per_token=task.per_token,
                atol=self.atol, graph_file=file)]
        (d / "parity.json").write_text(json.dumps({
            "max_seq_len": max_len, "checks": checks, "labels": list(task.labels(ctx))}))

    def _manifest(self, key: str, files: dict[str, str], io: dict[str, Any], staging: Path,
                  ver: Path, comp: Path | None, prec: Path | None = None) -> Any:
        from floodway.build.manifest_build import engine_entry, make_manifest, task_info

        parity = json.loads((ver / "parity.json").read_text())
        if prec is not None:
            record = json.loads((prec / PRECISION_RECORD).read_text())
            self.skipped.update({f"precision:{k}": v for k, v in record["skipped"].items()})
        engines = ([engine_entry(json.loads((comp / "engine.json").read_text()), self.hw)]
                   if comp is not None else [])
        return make_manifest(ep=self.ep, key=key, files=files, tools=self.tools, hw=self.hw,
                             staging=staging, io=io, max_seq_len=parity["max_seq_len"],
                             task=task_info(self.task, self.atol, tuple(parity["labels"])),
                             engines=engines, skipped=self.skipped, parity=parity["checks"],
                             timings=self.timings, generation=self._generation_info(),
                             precisions=record["records"] if prec is not None else [],
                             warnings=self.warnings)

    def _generation_info(self) -> dict[str, Any] | None:
        info = getattr(self.task, "generation_info", None)
        return info(self.folder) if info is not None and self.folder is not None else None


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
