"""Making the reduced-precision graphs from the float32 ONNX graph (build machines only).

- int8 (`quantize_int8`): ONNX Runtime's dynamic quantization
  (``onnxruntime.quantization.quantize_dynamic``; ORT docs, "Quantize ONNX models"):
  weights stored as int8 per output channel, activations quantized per tensor at run time
  (MatMulInteger / DynamicQuantizeLinear), served by the CPU provider. Only MatMul and Gemm
  nodes whose second input is a weight are quantized: quantizing the activation-by-activation
  products of attention (Q.K^T, scores.V) as well brought all-MiniLM-L6-v2's smallest row
  cosine from 0.99 down to 0.69 on the same texts (measured here), for no speed-up.
  Per-channel weights, not reduce_range: the 7-bit range that ORT advises for CPUs without
  VNNI cost cosine 0.93 -> 0.69 per tensor on a VNNI machine.
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
from pathlib import Path
from typing import Any

import numpy as np

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
    naming any unnamed node on the way (the quantizer selects nodes by name). Embedding
    lookups (Gather) stay float32: quantizing MiniLM's table too shrank the graph from 59
    to 23 MB but cost the one-word parity case cosine 0.989 -> 0.983 (measured here)."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
        if node.op_type in ("MatMul", "Gemm") and any(x in inits for x in node.input[1:]):
            out.append(node.name)
    return out


def quantize_int8(folder: Path, graph: str, data: str, dst: Path) -> dict[str, Any]:
    """`folder`/`graph` (float32, weights in `data`) -> `dst`, its int8 dynamic quantization
    (one file). Returns {"method", "nodes": quantized node count}. Raises
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
        named = Path(tmp) / "named.onnx"
        onnx.save_model(model, str(named), save_as_external_data=True,
                        location="named.onnx.data")
        try:
            quantize_dynamic(str(named), str(dst), weight_type=QuantType.QInt8,
                             per_channel=True, reduce_range=False, nodes_to_quantize=nodes)
        except Exception as e:  # noqa: BLE001 - any quantizer failure is a build failure
            raise BuildError("precision", f"int8: ONNX Runtime could not quantize {graph}: "
                                          f"{type(e).__name__}: {e}") from e
    return {"method": "onnxruntime.quantization.quantize_dynamic (QInt8 weights per channel; "
                      "MatMul/Gemm with weights only)",
            "nodes": len(nodes)}


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


__all__ = ["convert_float", "quantize_int8", "weight_matmuls"]
