"""Reduced precision: which artifacts a `Build.precision` asks for, where each serves, and the
accuracy gate's default tolerances. Imports nothing heavy (config validation reads it).

    precision   artifact                      made by                          serves on
    fp32        model.onnx, model.opt.onnx    the export and optimize stages   CPU and GPU
    int8        model.int8.onnx               ONNX Runtime dynamic quantization CPU
                                              (`floodway.build.quantize`)
    fp16        model.fp16.onnx (+ .data);    float16 graph conversion; the    GPU
                a TensorRT engine with fp16   TensorRT builder's FP16 flag
    bf16        a TensorRT engine with bf16   the TensorRT builder's BF16 flag GPU

float32 is always built: it is the gate's reference and every loader's fallback.

Default tolerances (`Build.precision_min_cosine`, `precision_min_top1`,
`precision_max_rel_err` override them for every reduced precision of a build):

- int8 cosine >= 0.99 (the project's target); measured on all-MiniLM-L6-v2's parity cases
  (benchmarks/precision.py) the smoothed dynamic quantization (`floodway.build.quantize`)
  reaches 0.9946 on a one-word text, 0.9946 on a padded batch and 0.9979 on full-length
  texts (0.9926 at worst over 256 texts of 1-200 words outside the parity set); without the
  smoothing the one-word case measured 0.9887.
- int8 top-1 agreement >= 0.95 and relative logit error <= 0.25: a classification head
  rounds to the same class unless two logits are within the quantization noise; measured on
  the MiniLM cross-encoder of tests/unit/build (an untrained 3-label head: logits near 0,
  the worst case for a relative error): top-1 1.0, relative error 0.20 before the
  smoothing, 0.033 with it (the bound keeps the unsmoothed margin for other heads).
- fp16 cosine >= 0.999, top-1 = 1.0, relative error <= 0.01: float16 keeps 11 significant
  bits (unit roundoff 4.9e-4, IEEE 754), so a 6-12 layer encoder drifts by about 1e-3
  relative; bf16 keeps 8 bits (roundoff 3.9e-3): cosine >= 0.995, relative error <= 0.05.
"""

from __future__ import annotations

FP32, FP16, BF16, INT8 = "fp32", "fp16", "bf16", "int8"
PRECISIONS = (FP32, FP16, BF16, INT8)
REDUCED = (FP16, BF16, INT8)
# Where each reduced precision serves: the loader picks it only on that device.
DEVICE = {INT8: "cpu", FP16: "gpu", BF16: "gpu"}
INT8_FILE = "model.int8.onnx"
FP16_FILE = "model.fp16.onnx"
FP16_DATA = "model.fp16.onnx.data"
GRAPH_FILES = {INT8: (INT8_FILE,), FP16: (FP16_FILE, FP16_DATA)}

# measurement -> (the Build field that overrides it, "min" or "max": which side passes)
BOUNDS = {"cosine": ("precision_min_cosine", "min"),
          "top1_agreement": ("precision_min_top1", "min"),
          "max_rel_err": ("precision_max_rel_err", "max")}
# The int8 recipe (floodway.build.quantize): the share of an outlier activation channel's
# range moved into the weights (SmoothQuant's default; 0.4-0.7 measured, see quantize.py).
# Part of the precision stage's cache key, as are the default tolerances: a store built by
# another recipe or gate is built again, never served under the new verdict.
SMOOTH_ALPHA = 0.5
INT8_RECIPE = f"dynamic-per-channel-matmul+smooth-{SMOOTH_ALPHA}"
# precision -> measurement -> default tolerance (sources in the module doc)
DEFAULTS = {
    INT8: {"cosine": 0.99, "top1_agreement": 0.95, "max_rel_err": 0.25},
    FP16: {"cosine": 0.999, "top1_agreement": 1.0, "max_rel_err": 0.01},
    BF16: {"cosine": 0.995, "top1_agreement": 1.0, "max_rel_err": 0.05},
}


def recipe_key(build: object) -> tuple[object, ...]:
    """What of the reduced-precision recipe the precision stage's cache key holds: for each
    reduced precision `build` asks for, its default tolerances, and int8's recipe; () for a
    float32-only build (its key, and so its build, stay as they were)."""
    asked = reduced(build)
    return tuple((p, sorted(DEFAULTS[p].items()), INT8_RECIPE if p == INT8 else None)
                 for p in asked)


def reduced(build: object) -> tuple[str, ...]:
    """The reduced precisions `build` asks for, in `REDUCED` order."""
    asked = getattr(build, "precision", (FP32,))
    return tuple(p for p in REDUCED if p in asked)


def engine_precision(asked: object) -> str:
    """The precision of the one TensorRT engine a build compiles: "fp16" or "bf16" where
    `Build.precision` asks for it (fp16 first), else "fp32" (TensorRT's default: float32,
    TF32 where the GPU has it)."""
    return next((p for p in (FP16, BF16) if p in (asked or ())), FP32)


def tolerance(precision: str, measurement: str, build: object) -> float:
    """The gate's bound on `measurement` for `precision`: the Build field when set, else
    `DEFAULTS`. Raises KeyError for an unknown precision or measurement."""
    field, _ = BOUNDS[measurement]
    value = getattr(build, field, None)
    return float(value) if value is not None else DEFAULTS[precision][measurement]


def passes(measurement: str, value: float, bound: float) -> bool:
    return value >= bound if BOUNDS[measurement][1] == "min" else value <= bound


__all__ = ["BF16", "BOUNDS", "DEFAULTS", "DEVICE", "FP16", "FP16_DATA", "FP16_FILE", "FP32",
           "GRAPH_FILES", "INT8", "INT8_FILE", "PRECISIONS", "REDUCED", "engine_precision",
           "passes", "reduced", "tolerance"]
