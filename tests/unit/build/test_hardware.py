"""Engine stamps against the hardware found, and the load plan they lead to (pure)."""

import dataclasses

import pytest

from floodway.build.hardware import EngineStamp, HardwareInfo, detect, engine_usable
from floodway.build.loader import plan, read_manifest
from floodway.build.manifest_view import EngineRef
from floodway.build.store import ArtifactStore

L4 = HardwareInfo(gpu_name="NVIDIA L4", compute_capability="8.9", tensorrt_version="10.13.0",
                  ort_providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
STAMP = EngineStamp(tensorrt_version="10.13.0", compute_capability="8.9", gpu_name="NVIDIA L4")


@pytest.mark.parametrize("hw,ok,why", [
    (L4, True, "stamp matches"),
    (HardwareInfo(), False, "no CUDA GPU on this machine"),
    (HardwareInfo(gpu_name="NVIDIA L4", compute_capability="8.9"), False,
     "tensorrt is not installed"),
    (HardwareInfo(gpu_name="NVIDIA L4", compute_capability="8.9", tensorrt_version="11.0.0"),
     False, "engine built with TensorRT 10.13.0, this machine has 11.0.0"),
    (HardwareInfo(gpu_name="NVIDIA H100", compute_capability="9.0", tensorrt_version="10.13.0"),
     False, "engine built for compute capability 8.9 (NVIDIA L4), this GPU is 9.0 (NVIDIA H100)"),
])
def test_engine_usable(hw, ok, why):
    assert engine_usable(STAMP, hw) == (ok, why)


def test_sm_and_hardware_class():
    assert L4.sm == "sm89" and L4.hardware_class == "NVIDIA L4 (sm89)"
    assert HardwareInfo().hardware_class == "cpu" and not HardwareInfo().has_cuda


def with_engine(manifest, cc="8.9", ver="10.13.0"):
    path = f"engines/trt-{ver}/sm{cc.replace('.', '')}/b64-s256/model.plan"
    arts = dict(manifest.artifacts)
    arts[path] = next(iter(arts.values()))
    return dataclasses.replace(manifest, artifacts=arts, engines=(EngineRef(
        path=path, tensorrt_version=ver, compute_capability=cc, gpu_name="NVIDIA L4"),))


def test_plan_puts_a_matching_engine_first(built_store):
    m = with_engine(read_manifest(ArtifactStore(built_store).latest("embed")))
    choices = plan(m, L4)
    assert [(c.backend, c.usable) for c in choices][:3] == [
        ("tensorrt", True), ("onnxruntime-cuda", True), ("onnxruntime-cpu", True)]


def test_plan_skips_an_engine_for_another_gpu(built_store):
    m = with_engine(read_manifest(ArtifactStore(built_store).latest("embed")), cc="9.0")
    first, cuda = plan(m, L4)[:2]
    assert first.backend == "tensorrt" and not first.usable
    assert "compute capability 9.0" in first.reason
    assert cuda.backend == "onnxruntime-cuda" and cuda.usable


def test_detect_on_this_machine():
    hw = detect()
    assert "CPUExecutionProvider" in hw.ort_providers
    if hw.gpu_name is None:
        assert hw.hardware_class == "cpu" and hw.tensorrt_version is None


def test_plan_offers_ort_tensorrt_provider_when_present(built_store):
    m = read_manifest(ArtifactStore(built_store).latest("embed"))
    hw = dataclasses.replace(L4, ort_providers=("TensorrtExecutionProvider",
                                                "CUDAExecutionProvider", "CPUExecutionProvider"))
    choices = plan(m, hw)
    assert [(c.backend, c.usable) for c in choices][:3] == [
        ("tensorrt", False), ("onnxruntime-tensorrt", True), ("onnxruntime-cuda", True)]
    assert choices[1].files == ("model.onnx", "model.onnx.data")


def test_ort_trt_provider_options_key_the_cache_by_model_hash(tmp_path):
    from floodway.build.trt import ort_trt_provider, profile_shapes

    shapes = profile_shapes(("input_ids", "attention_mask"), 64, 256, 32)
    name, opts = ort_trt_provider(tmp_path, "ab" * 32, shapes)
    assert name == "TensorrtExecutionProvider"
    assert opts["trt_engine_cache_path"] == str(tmp_path / "ort-trt" / ("ab" * 8))
    assert opts["trt_profile_min_shapes"] == "input_ids:1x1,attention_mask:1x1"
    assert opts["trt_profile_opt_shapes"] == "input_ids:32x128,attention_mask:32x128"
    assert opts["trt_profile_max_shapes"] == "input_ids:64x256,attention_mask:64x256"
