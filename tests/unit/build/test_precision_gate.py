"""The accuracy gate's metrics and its top-1 path on the MiniLM cross-encoder (the session's
text-classification build): its graph quantized here, no extra build."""

from __future__ import annotations

import numpy as np
import pytest

import floodway as fw
from floodway.build.precision_gate import gate, session_run
from floodway.build.store import ArtifactStore
from floodway.errors import BuildError
from floodway.tasks.base import Case
from floodway.tasks.metrics import max_rel_err, measure, row_cosines, top1_agreement

PAIRS = [("is the pool warm?", "Two containers are ready."), ("a", "b"),
         ("how long is a cold start?", "About a second, mostly imports."),
         ("what does the router do", "It admits requests and decides where they go."),
         ("int8", "a quarter of the bytes")]


def test_cosine_pools_over_the_mask_only():
    want = np.ones((2, 3, 4), np.float32)
    got = want.copy()
    got[0, 2] = -50.0                       # a padded position: not compared
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    assert row_cosines(got, want, mask).min() == pytest.approx(1.0)
    got[1, 0, :2] = -5.0                    # a real position: compared
    assert row_cosines(got, want, mask)[1] < 0.9


def test_top1_and_relative_error():
    want = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 4.0]])
    got = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 4.2]])
    assert top1_agreement(got, want, None) == 0.5
    assert max_rel_err(got, want, None) == pytest.approx(1.0 / 4.0)
    per_token = np.stack([want, got])[None].repeat(1, 0)[0]   # (2 rows, 2 tokens, 3)
    mask = np.array([[1, 1], [1, 0]])
    assert top1_agreement(per_token, per_token[::-1], mask) == pytest.approx(1 / 3)
    assert set(measure("top1", got, want, None)) == {"top1_agreement", "max_rel_err"}
    with pytest.raises(ValueError, match="unknown precision metric"):
        measure("psnr", got, want, None)


@pytest.fixture(scope="module")
def cross_encoder(text_cls_store, tmp_path_factory):
    """The cross-encoder's float32 graph, its int8 quantization, and pair cases."""
    from floodway.build.loader import load
    from floodway.build.quantize import quantize_int8

    folder = ArtifactStore(text_cls_store).latest("rerank")
    dst = tmp_path_factory.mktemp("int8") / "model.int8.onnx"
    model = load(folder)
    feeds = model.encode_pairs(PAIRS)
    # calibrated on the gate's case, as the precision stage does with its parity cases
    info = quantize_int8(folder, "model.onnx", "model.onnx.data", dst,
                         calibration=[feeds])
    case = Case("pairs", feeds, len(PAIRS), feeds["input_ids"].shape[1], True,
                feeds["attention_mask"])
    return folder, dst, info, model, [case]


def run_gate(cross_encoder, build):
    folder, dst, _, model, cases = cross_encoder
    ref = session_run(folder / "model.opt.onnx", ["logits"])
    reference = [ref({n: c.feeds[n] for n in model.input_names}) for c in cases]
    return gate("int8", dst.name, session_run(dst, ["logits"]), cases, reference,
                metric="top1", build=build, names=model.input_names, per_token=False,
                gated_on="CPUExecutionProvider")


def test_int8_cross_encoder_keeps_its_top1(cross_encoder):
    _, _, info, _, _ = cross_encoder
    assert info["nodes"] >= 36 and info["smoothed"] >= 24
    record = run_gate(cross_encoder, fw.Build(precision=("fp32", "int8")))
    assert record["passed"] and record["metric"] == "top1"
    assert record["measured"]["top1_agreement"] == 1.0
    assert 0 < record["measured"]["max_rel_err"] <= 0.25
    assert record["tolerance"] == {"top1_agreement": 0.95, "max_rel_err": 0.25}


def test_an_impossible_logit_bound_fails_naming_it(cross_encoder):
    build = fw.Build(precision=("fp32", "int8"), precision_max_rel_err=1e-9)
    with pytest.raises(BuildError, match=r"int8 model.int8.onnx: max_rel_err .* case "
                                         r"'pairs', tolerance <= 1e-09") as e:
        run_gate(cross_encoder, build)
    assert e.value.stage == "precision"
