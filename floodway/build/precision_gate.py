"""The precision stage: make each reduced-precision artifact `Build.precision` asks for and
hold it to the accuracy gate, or fail the build.

The reference is the float32 ONNX graph on ONNX Runtime's CPU provider (itself checked
against PyTorch by the verify stage), run on the task's parity cases (`floodway.tasks`,
also the int8 quantizer's calibration inputs); the reduced artifact runs on the same cases
and is measured with the task's metric (`floodway.tasks.metrics`,
`floodway.tasks.PRECISION_METRICS`) against the tolerances of `floodway.build.precision`.
A gate not met raises BuildError('precision') naming the artifact, the measurement, the
value, the case and the tolerance. Each artifact's record
(`floodway.build.manifest.PrecisionEntry`) lands in ``precision.json`` for the manifest.

Where each runs here: int8 on the CPU provider (where it serves); the float16 graph on the
CUDA provider when this machine has one, else on the CPU provider (float16 storage and
rounding are measured, CUDA's kernels are not: the record says which); a reduced TensorRT
engine (compiled on this GPU by the compile stage) on that GPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from floodway.build import precision as P
from floodway.build.prefetch import ONNX_DATA, ONNX_FILE, OPT_FILE
from floodway.errors import BuildError
from floodway.tasks.base import Case
from floodway.tasks.metrics import measure

RECORD = "precision.json"
Run = Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]]


def session_run(path: Path, outputs: Sequence[str], cuda: bool = False) -> Run:
    """An ONNX Runtime session over `path` -> run(feeds) -> `outputs` as float32 arrays."""
    import onnxruntime as ort

    providers = (["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda
                 else ["CPUExecutionProvider"])
    session = ort.InferenceSession(str(path), providers=providers)
    return lambda feeds: [np.asarray(o, dtype=np.float32)
                          for o in session.run(list(outputs), feeds)]


def gate(precision: str, artifact: str, run: Run, cases: Sequence[Case],
         reference: Sequence[Sequence[np.ndarray]], *, metric: str, build: Any,
         names: Sequence[str], per_token: bool, gated_on: str) -> dict[str, Any]:
    """Measure `run` against `reference` (float32 outputs per case) -> the artifact's
    record (`PrecisionEntry` fields). Raises BuildError('precision') naming the artifact,
    measurement, measured value, case and tolerance when a bound is not met."""
    worst: dict[str, tuple[float, str]] = {}
    per_case: dict[str, dict[str, float]] = {}
    for case, want in zip(cases, reference, strict=True):
        got = run({n: case.feeds[n] for n in names})
        mask = case.mask if per_token else None
        for g, w in zip(got, want, strict=True):
            for k, v in measure(metric, g, w, mask).items():
                per_case.setdefault(case.label, {})[k] = v
                low = P.BOUNDS[k][1] == "min"
                if k not in worst or (v < worst[k][0] if low else v > worst[k][0]):
                    worst[k] = (v, case.label)
    bounds = {k: P.tolerance(precision, k, build) for k in worst}
    for k, (v, label) in worst.items():
        if not P.passes(k, v, bounds[k]):
            side = ">=" if P.BOUNDS[k][1] == "min" else "<="
            raise BuildError("precision", f"{precision} {artifact}: {k} {v:.4g} on case "
                                          f"{label!r}, tolerance {side} {bounds[k]:g} (set "
                                          f"Build.{P.BOUNDS[k][0]} to accept it, or drop "
                                          f"{precision!r} from Build.precision)")
    return {"precision": precision, "device": P.DEVICE[precision], "artifact": artifact,
            "metric": metric, "measured": {k: v for k, (v, _) in worst.items()},
            "tolerance": bounds, "cases": per_case, "passed": True, "gated_on": gated_on}


def produce(b: Any, d: Path, exp: Path, opt: Path, io: dict[str, Any],
            engine: tuple[Path, dict[str, Any]] | None) -> None:
    """The stage's output in `d`: each reduced graph and ``precision.json`` (records, and
    why a reduced precision was not made). `b` is the pipeline's run (`_Build`): its task,
    context and build config; `engine`: the compile stage's folder and engine.json."""
    from floodway.build import quantize
    from floodway.tasks import PRECISION_METRICS

    ctx, task, build = b.ctx(), b.task, b.ep.build
    metric = PRECISION_METRICS[task.name]
    names = [s["name"] for s in io["inputs"]]
    outputs = [s["name"] for s in io["outputs"]]
    cases = task.parity_cases(ctx, task.max_seq_len(ctx))
    ref_run = session_run(opt / OPT_FILE, outputs)
    reference = [ref_run({n: c.feeds[n] for n in names}) for c in cases]
    common = dict(cases=cases, reference=reference, metric=metric, build=build, names=names,
                  per_token=task.per_token)
    records, skipped, methods = [], {}, {}
    asked = P.reduced(build)
    if P.INT8 in asked:
        # calibrated on the parity cases: the smoothing ranges are per-channel maxima, a
        # property of the model (see floodway.build.quantize for held-out figures)
        methods[P.INT8] = quantize.quantize_int8(exp, ONNX_FILE, ONNX_DATA, d / P.INT8_FILE,
                                                 calibration=[c.feeds for c in cases])
        records.append(gate(P.INT8, P.INT8_FILE, session_run(d / P.INT8_FILE, outputs),
                            gated_on="CPUExecutionProvider", **common))
    if P.FP16 in asked:
        quantize.convert_float(exp, ONNX_FILE, ONNX_DATA, d / P.FP16_FILE, P.FP16)
        cuda = b.hw.has_cuda
        records.append(gate(P.FP16, P.FP16_FILE, session_run(d / P.FP16_FILE, outputs, cuda),
                            gated_on="CUDAExecutionProvider" if cuda
                            else "CPUExecutionProvider", **common))
    if engine is not None and engine[1].get("precision", P.FP32) != P.FP32:
        records.append(_gate_engine(b, engine, outputs, common))
    elif b.ep.build.tensorrt and (P.FP16 in asked or P.BF16 in asked):
        skipped["tensorrt"] = b.skipped.get("compile", "no engine was compiled")
    for r in records:
        r["method"] = methods.get(r["precision"], {}).get("method", _method(r))
    (d / RECORD).write_text(json.dumps({"records": records, "skipped": skipped}))


def _method(record: dict[str, Any]) -> str:
    if record["artifact"].startswith("engines/"):
        return f"TensorRT builder, {record['precision']} enabled"
    return f"float graph conversion to {record['precision']} (float32 in and out)"


def _gate_engine(b: Any, engine: tuple[Path, dict[str, Any]], outputs: Sequence[str],
                 common: dict[str, Any]) -> dict[str, Any]:
    """Gate the reduced TensorRT engine the compile stage built, on this GPU."""
    from floodway.build import trt
    from floodway.build.manifest_view import ManifestView

    folder, info = engine
    view = ManifestView(endpoint=b.ep.name, build_key="", inputs=tuple(common["names"]),
                        max_seq_len=1, max_batch_rows=1, artifacts={})
    runner = trt.engine_runner(folder / info["path"], view)

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        got = runner(feeds)
        return [got[o] for o in outputs]

    return gate(info["precision"], info["path"], run, gated_on=f"tensorrt {b.hw.gpu_name}",
                **common)


def read(folder: Path) -> dict[str, Any]:
    """The stage's ``precision.json`` ({"records": [...], "skipped": {...}})."""
    return json.loads((folder / RECORD).read_text())


__all__ = ["RECORD", "gate", "produce", "read", "session_run"]
