"""Making the reduced-precision graphs from the float32 ONNX graph (build machines only).

- int8 (`quantize_int8`): ONNX Runtime's dynamic quantization
  (``onnxruntime.quantization.quantize_dynamic``; ORT docs, "Quantize ONNX models"):
  weights stored as int8 per output channel (QInt8, symmetric, full 8-bit range),
  activations quantized per tensor at run time (DynamicQuantizeLinear: uint8, one scale for
  the whole tensor), served by the CPU provider. Quantized: the MatMul / Gemm nodes whose
  second input is a weight (`weight_matmuls`). Left in float32: the activation-by-activation
  products of attention (Q.K^T, scores.V: nothing to store, and ORT's MatMulConstBOnly
  default skips them), the embedding lookups (Gather: quantizing MiniLM's table shrank the
  graph 59 -> 23 MB but cost the one-word parity case cosine 0.989 -> 0.983), and the
  elementwise ops (Add, LayerNorm, Softmax, GELU).

  Before quantizing, activation outliers are moved into the weights (`smooth`, the
  smoothing of Xiao et al., "SmoothQuant", ICML 2023, with a scale that only ever shrinks
  channels): X.W = (X / s).(s W) exactly, one ``Mul`` by 1/s per quantized input tensor
  (shared by the MatMuls that read it), s per input channel from the largest |x| the
  float32 graph produces on the calibration inputs (the task's parity cases in a build).
  Why: measured on all-MiniLM-L6-v2, the error is the activations': weights alone int8
  (float32 compute) keep cosine >= 0.9985 on every parity case, activations alone int8
  drop the one-word case to 0.985. A few channels carry most of the range (hidden channel
  99 reaches |x| 28 after LayerNorm where the median channel reaches 1.6; one GELU output
  channel of layers 0-2 reaches 14-25 where the median reaches 1), so one per-tensor scale
  leaves the rest of the channels a handful of levels.
  ``s_j = max(m_j / median(m), 1) ** SMOOTH_ALPHA``, m_j the channel's calibration range:
  channels at or below the median keep s = 1, so a channel quiet in the calibration inputs
  is never amplified (SmoothQuant's own s_j = m_j^a / w_j^(1-a), alpha 0.6, calibrated on
  ten one- and two-word texts, fell to cosine 0.84 on longer texts; calibrated on the
  parity cases, alpha 0.5, it reached 0.9924 on them but 0.9846 on longer texts).

  Measured on all-MiniLM-L6-v2 (the parity cases; 256 texts of 1-200 words in batches of
  32, benchmarks/precision.py's mix, none a parity case; ten one- or two-word texts, each
  alone), smallest row cosine with float32:

      recipe                                        parity   1-200 words   1-2 words
      per channel, not smoothed (before)            0.9887   0.9811        0.9801
      per-tensor weights                            0.9310   0.8855        0.8973
      QUInt8 weights                                0.9860   0.9791        0.9777
      reduce_range (7-bit weights)                  0.9843   0.9790        0.9710
      not smoothed, FFN output MatMuls in float32   0.9914   0.9842        0.9834
      not smoothed, layer 4 in float32              0.9923   0.9847        0.9849
      smoothed, alpha 0.4                           0.9953   0.9938        0.9884
      smoothed, alpha 0.5 (this recipe)             0.9946   0.9926        0.9930
      smoothed, alpha 0.7                           0.9938   0.9927        0.9819
      alpha 0.5, calibrated on 32 of the 1-200
        word texts instead of the parity cases      0.9944   0.9952        0.9922
      alpha 0.5, calibrated on the ten short texts  0.9948   0.9850        0.9942

  (median over the 1-200 word texts: 0.9936 before, 0.9980 smoothed). Calibration wants
  full-length inputs (the last row); the parity cases have them. The smoothing's one
  elementwise Mul per input costs no measurable speed: rows per CPU-second, one intra-op
  thread, the 256 texts, two runs: 2.02x and 2.12x float32 smoothed, 2.02x and 2.18x not
  (ONNX Runtime 1.32, an AVX512-VNNI CPU). reduce_range (ORT advises it for CPUs without
  VNNI) stays off: it costs accuracy on a VNNI CPU.
- fp16 / bf16 (`convert_float`): every float32 initializer, constant and cast retyped, the
  graph's float inputs cast down on entry and its outputs cast back to float32, so callers
  keep feeding and reading float32 (as onnxconverter-common's ``keep_io_types`` does; written
  here, it is not a dependency). Constants are clipped to the target's finite range first:
  transformers masks padding with float32's lowest value, which float16 rounds to -inf, and
  0 x -inf is NaN.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from floodway.build.precision import SMOOTH_ALPHA
from floodway.errors import BuildError

FP16_MAX = 65504.0          # float16's largest finite value (IEEE 754 binary16)
BF16_MAX = 3.3895e38        # bfloat16's largest finite value


def _private_copy(folder: Path, files: tuple[str, ...], tmp: Path) -> Path:
    """Copy `files` into `tmp` (onnx refuses external data with several hard links, which
    the stage cache's files have once linked into a build)."""
    for name in files:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, tmp / name)
    return tmp / files[0]


def weight_matmuls(model: Any) -> list[str]:
    """Names of the MatMul / Gemm nodes with an initializer input (weights, not activations),
    naming any unnamed node on the way (the quantizer selects nodes by name)."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
        if node.op_type in ("MatMul", "Gemm") and any(x in inits for x in node.input[1:]):
            out.append(node.name)
    return out


def activation_ranges(model: Any, tensors: Sequence[str], feeds: Sequence[Mapping[str, Any]],
                      tmp: Path) -> dict[str, np.ndarray]:
    """Largest |x| per channel (last axis) of each float32 tensor in `tensors`, over every
    position of every batch in `feeds` (graph input name -> array; other keys ignored), the
    float32 `model` run by ONNX Runtime's CPU provider with graph optimizations off (so
    every named tensor exists). -> {tensor: (channels,) float64}. `tmp`: a scratch folder."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in set(tensors) - {o.name for o in probe.graph.output}:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, None))
    path = tmp / "probe.onnx"
    onnx.save_model(probe, str(path), save_as_external_data=True, location="probe.onnx.data")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    out: dict[str, np.ndarray] = {}
    for batch in feeds:
        got = session.run(list(tensors), {n: batch[n] for n in inputs})
        for name, a in zip(tensors, got, strict=True):
            a = np.abs(np.asarray(a, np.float64)).reshape(-1, a.shape[-1]).max(axis=0)
            out[name] = np.maximum(out[name], a) if name in out else a
    return out


def smoothing_scale(ranges: np.ndarray, alpha: float = SMOOTH_ALPHA) -> np.ndarray:
    """(channels,) activation ranges -> (channels,) float32 s >= 1: ``max(range /
    median(range), 1) ** alpha``; 1 for a non-finite range, all ones where the median
    range is 0."""
    ranges = np.where(np.isfinite(ranges), ranges, 0.0)
    mid = float(np.median(ranges))
    if mid <= 0:
        return np.ones(len(ranges), np.float32)
    return (np.maximum(ranges / mid, 1.0) ** alpha).astype(np.float32)


def smooth(model: Any, nodes: Sequence[str], feeds: Sequence[Mapping[str, Any]],
           tmp: Path, alpha: float = SMOOTH_ALPHA) -> int:
    """Rewrite float32 `model` in place so that each input X of the MatMul / Gemm `nodes`
    reaches them as X / s and their weights hold s W (same products, exactly, in real
    arithmetic; s from `smoothing_scale` over `activation_ranges` on `feeds`). Inputs
    whose weights are shared with another node or not 2-d, and Gemm inputs read transposed,
    are left alone. -> how many input tensors were smoothed."""
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    uses: dict[str, int] = {}
    for node in g.node:
        for x in node.input:
            uses[x] = uses.get(x, 0) + 1
    groups: dict[str, list[Any]] = {}
    for node in g.node:
        if node.name in nodes:
            groups.setdefault(node.input[0], []).append(node)
    groups = {x: ns for x, ns in groups.items()      # X an activation, its channels last
              if x not in inits and all(uses[n.input[1]] == 1 and n.input[1] in inits
                                        and len(inits[n.input[1]].dims) == 2
                                        and not any(a.name == "transA" and a.i
                                                    for a in n.attribute) for n in ns)}
    if not groups:
        return 0
    ranges = activation_ranges(model, list(groups), feeds, tmp)
    muls: dict[str, Any] = {}
    for x, ns in groups.items():
        s = smoothing_scale(ranges[x], alpha)
        for n in ns:
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            trans = any(a.name == "transB" and a.i for a in n.attribute)
            w = w * (s[None, :] if trans else s[:, None])   # rows of B are X's channels
            inits[n.input[1]].CopyFrom(numpy_helper.from_array(w, n.input[1]))
            n.input[0] = x + "/smoothed"
        g.initializer.append(numpy_helper.from_array(1.0 / s, x + "/smoothing"))
        muls[x] = helper.make_node("Mul", [x, x + "/smoothing"], [x + "/smoothed"],
                                   name=x + "/SmoothMul")
    order = []                  # each Mul just before the first node that reads it
    for node in g.node:
        for x in node.input:
            if x.endswith("/smoothed") and x[: -len("/smoothed")] in muls:
                order.append(muls.pop(x[: -len("/smoothed")]))
        order.append(node)
    del g.node[:]
    g.node.extend(order)
    return len(groups)


def quantize_int8(folder: Path, graph: str, data: str, dst: Path,
                  calibration: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """`folder`/`graph` (float32, weights in `data`) -> `dst`, its int8 dynamic quantization
    (one file; the recipe in the module doc). `calibration`: input batches (graph input
    name -> array) for the smoothing ranges; none: no smoothing. Returns {"method",
    "nodes": quantized node count, "smoothed": inputs smoothed}. Raises
    BuildError('precision') when ONNX Runtime cannot quantize it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="floodway-int8-") as tmp:
        src = _private_copy(folder, (graph, data), Path(tmp))
        model = onnx.load(str(src))
        nodes = weight_matmuls(model)
        if not nodes:
            raise BuildError("precision", f"int8: {graph} has no MatMul or Gemm with weights "
                                          "to quantize")
        try:
            smoothed = smooth(model, nodes, calibration, Path(tmp)) if calibration else 0
            named = Path(tmp) / "named.onnx"
            onnx.save_model(model, str(named), save_as_external_data=True,
                            location="named.onnx.data")
            quantize_dynamic(str(named), str(dst), weight_type=QuantType.QInt8,
                             per_channel=True, reduce_range=False, nodes_to_quantize=nodes)
        except Exception as e:  # noqa: BLE001 - any quantizer failure is a build failure
            raise BuildError("precision", f"int8: ONNX Runtime could not quantize {graph}: "
                                          f"{type(e).__name__}: {e}") from e
    how = (f"; activation outliers of {smoothed} inputs smoothed into the weights, alpha "
           f"{SMOOTH_ALPHA}, ranges from {len(calibration)} calibration batches"
           if smoothed else "")
    return {"method": "onnxruntime.quantization.quantize_dynamic (QInt8 weights per channel; "
                      f"MatMul/Gemm with weights only{how})",
            "nodes": len(nodes), "smoothed": smoothed}


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def _retype(t: Any, elem: int) -> None:
    """Convert a float32 TensorProto in place to `elem` (FLOAT16 or BFLOAT16)."""
    from onnx import TensorProto, numpy_helper

    a = numpy_helper.to_array(t).astype(np.float32)
    big = FP16_MAX if elem == TensorProto.FLOAT16 else BF16_MAX
    a = np.clip(a, -big, big)
    t.ClearField("float_data")
    t.ClearField("raw_data")
    t.data_type = elem
    t.raw_data = (a.astype(np.float16) if elem == TensorProto.FLOAT16 else _bf16_bits(a)
                  ).tobytes()


def convert_float(folder: Path, graph: str, data: str, dst: Path, precision: str) -> None:
    """`folder`/`graph` (float32) -> `dst` in `precision` ("fp16" or "bf16"), weights in
    ``<dst>.data``, float32 in and out (see the module doc). Raises BuildError('precision')."""
    import onnx
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if precision == "fp16" else TensorProto.BFLOAT16
    F = TensorProto.FLOAT
    with tempfile.TemporaryDirectory(prefix="floodway-float-") as tmp:
        model = onnx.load(str(_private_copy(folder, (graph, data), Path(tmp))))
    g = model.graph
    for t in g.initializer:
        if t.data_type == F:
            _retype(t, elem)
    for node in g.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == F:
                _retype(attr.t, elem)
            if node.op_type == "Cast" and attr.name == "to" and attr.i == F:
                attr.i = elem
    del g.value_info[:]          # stale float32 types: shape inference redoes them
    casts = []
    for v in g.input:
        if v.type.tensor_type.elem_type == F:
            low = v.name + "_reduced"
            for node in g.node:
                node.input[:] = [low if x == v.name else x for x in node.input]
            casts.append(helper.make_node("Cast", [v.name], [low], to=elem))
    for v in g.output:
        if v.type.tensor_type.elem_type == F:
            low = v.name + "_reduced"
            for node in g.node:
                node.output[:] = [low if x == v.name else x for x in node.output]
                node.input[:] = [low if x == v.name else x for x in node.input]
            g.node.append(helper.make_node("Cast", [low], [v.name], to=F))
    for c in reversed(casts):
        g.node.insert(0, c)
    try:
        onnx.save_model(model, str(dst), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=dst.name + ".data",
                        size_threshold=1024)
        onnx.checker.check_model(str(dst))
    except Exception as e:  # noqa: BLE001
        raise BuildError("precision", f"{precision}: the converted graph is invalid: {e}") from e


__all__ = ["SMOOTH_ALPHA", "activation_ranges", "convert_float", "quantize_int8", "smooth",
           "smoothing_scale", "weight_matmuls"]
