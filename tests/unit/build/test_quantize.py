"""The int8 recipe's smoothing on small hand-made graphs (no model, no build): it keeps a
float32 graph's products, leaves what it cannot rewrite alone, and cuts the int8 error an
outlier activation channel causes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from floodway.build.quantize import quantize_int8, smooth, smoothing_scale, weight_matmuls

CHANNELS, OUT = 16, 8


def graph(nodes, inits, n_in=CHANNELS):
    """A float32 model: input "x" (rows, n_in) -> output "y" (rows, OUT)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", n_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", OUT])
    g = helper.make_graph(nodes, "g", [x], [y],
                          [numpy_helper.from_array(a.astype(np.float32), k)
                           for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


def inputs(rng, rows=64, outlier=50.0):
    """Rows of unit-scale channels, channel 3 `outlier` times larger."""
    x = rng.standard_normal((rows, CHANNELS)).astype(np.float32)
    x[:, 3] *= outlier
    return x


def two_layers(rng):
    """x -> MatMul(w1) -> h, h -> MatMul(w2), h -> Gemm(w3, transB) -> y = sum: both
    weight nodes read h, one smoothing Mul serves them."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
             helper.make_node("MatMul", ["h", "w2"], ["a"], name="second"),
             helper.make_node("Gemm", ["h", "w3"], ["b"], name="third", transB=1),
             helper.make_node("Add", ["a", "b"], ["y"], name="sum")]
    inits = {"w1": rng.standard_normal((CHANNELS, CHANNELS)),
             "w2": rng.standard_normal((CHANNELS, OUT)),
             "w3": rng.standard_normal((OUT, CHANNELS))}
    return graph(nodes, inits)


def test_scale_shrinks_only_channels_above_the_median():
    ranges = np.array([1.0, 2.0, 1.0, 100.0, 1.5])
    s = smoothing_scale(ranges, alpha=0.5)
    assert s.dtype == np.float32 and s.min() == 1.0
    assert s[3] == pytest.approx((100.0 / 1.5) ** 0.5) and s[1] == pytest.approx((2 / 1.5) ** 0.5)
    assert list(s[[0, 2, 4]]) == [1.0, 1.0, 1.0]
    assert (smoothing_scale(np.zeros(4)) == 1.0).all()
    assert list(smoothing_scale(np.array([1.0, np.inf, 1.0, np.nan, 1.0]))) == [1.0] * 5


def test_smoothing_keeps_the_float32_products(tmp_path):
    rng = np.random.default_rng(0)
    model = two_layers(rng)
    x, fresh = inputs(rng), inputs(rng)                # fresh: not the calibration rows
    want = [run(model, x), run(model, fresh)]
    nodes = weight_matmuls(model)
    assert nodes == ["first", "second", "third"]
    assert smooth(model, nodes, [{"x": x[:16]}], tmp_path) == 2       # x, and h (shared)
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Mul", "MatMul", "Mul", "MatMul", "Gemm", "Add"]
    for got, w in zip([run(model, x), run(model, fresh)], want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-3)
    inv = numpy_helper.to_array(next(t for t in model.graph.initializer
                                     if t.name == "x/smoothing"))
    assert inv[3] < 0.2 and inv.max() == 1.0           # the outlier channel shrunk, only it


def test_smoothing_leaves_shared_weights_and_transposed_inputs_alone(tmp_path):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="a"),
             helper.make_node("MatMul", ["h", "w"], ["h2"], name="b"),   # w used twice
             helper.make_node("Gemm", ["h2", "v"], ["y"], name="c", transA=1)]
    model = graph(nodes, {"w": rng.standard_normal((CHANNELS, CHANNELS)),
                          "v": rng.standard_normal((CHANNELS, OUT))})
    x = inputs(rng, rows=CHANNELS)
    before = model.SerializeToString()
    assert smooth(model, weight_matmuls(model), [{"x": x}], tmp_path) == 0
    assert model.SerializeToString() == before


def saved(model, folder):
    folder.mkdir()
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True,
                    location="model.onnx.data", size_threshold=0)
    return folder


def test_smoothing_cuts_the_int8_error_of_an_outlier_channel(tmp_path):
    rng = np.random.default_rng(2)
    model = graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="only")],
                  {"w": rng.standard_normal((CHANNELS, OUT))})
    calib, test = inputs(rng, rows=256), inputs(rng, rows=256)
    want = run(model, test)
    folder = saved(model, tmp_path / "f32")            # (moves the weights out of `model`)
    err = {}
    for label, cal in (("plain", ()), ("smoothed", [{"x": calib}])):
        dst = tmp_path / f"{label}.onnx"
        info = quantize_int8(folder, "model.onnx", "model.onnx.data", dst, calibration=cal)
        assert info["nodes"] == 1 and info["smoothed"] == (1 if cal else 0)
        assert "MatMulInteger" in {n.op_type for n in onnx.load(str(dst)).graph.node}
        got = run(onnx.load(str(dst)), test)
        err[label] = float(np.abs(got - want).mean() / np.abs(want).mean())
    assert "smoothed into the weights" in info["method"]
    assert 0 < err["smoothed"] < err["plain"] / 2
