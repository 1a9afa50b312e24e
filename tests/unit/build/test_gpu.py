"""GPU paths: TensorRT compile and load, ONNX Runtime CUDA. Skipped without a CUDA GPU."""

import numpy as np
import pytest

from floodway.build.hardware import detect

HW = detect()
needs_cuda = pytest.mark.skipif(
    not HW.has_cuda, reason="needs a CUDA GPU with ONNX Runtime's CUDA provider "
                            f"(found gpu={HW.gpu_name}, providers={list(HW.ort_providers)})")
needs_trt = pytest.mark.skipif(
    HW.gpu_name is None or HW.tensorrt_version is None,
    reason=f"needs a CUDA GPU and the tensorrt wheel (found gpu={HW.gpu_name}, "
           f"tensorrt={HW.tensorrt_version})")

pytestmark = pytest.mark.gpu


@needs_cuda
def test_onnxruntime_cuda_matches_cpu(built_store):
    from floodway.build.loader import load
    from floodway.build.store import ArtifactStore

    folder = ArtifactStore(built_store).latest("embed")
    gpu = load(folder)
    assert gpu.backend in ("onnxruntime-cuda", "tensorrt")
    cpu = load(folder, hardware=type(HW)())
    feeds = cpu.encode(["gpu and cpu agree", "a second, longer sentence for padding"])
    a, b = gpu.run(feeds)["last_hidden_state"], cpu.run(feeds)["last_hidden_state"]
    assert np.abs(a - b).max() < 1e-2


@needs_trt
def test_tensorrt_engine_is_built_stamped_and_loaded(hf_cache, tmp_path):
    import modal_app
    from floodway.build.loader import load
    from floodway.build.manifest import Manifest
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    res = build_endpoint(modal_app.endpoints["embed"], ArtifactStore(tmp_path))
    m = Manifest.read(res.path)
    (engine,) = m.engines
    assert engine.tensorrt_version == HW.tensorrt_version
    assert engine.compute_capability == HW.compute_capability
    assert engine.path.startswith(f"engines/trt-{HW.tensorrt_version}/{HW.sm}/")
    assert (res.path / engine.path).stat().st_size > 1_000_000
    loaded = load(res.path)
    assert loaded.backend == "tensorrt", loaded.path_taken
    cpu = load(res.path, hardware=type(HW)())
    feeds = cpu.encode(["tensorrt parity"])
    got = loaded.run(feeds)["last_hidden_state"]
    want = cpu.run(feeds)["last_hidden_state"]
    assert np.abs(got - want).max() < 5e-2   # fp16 engine vs fp32 CPU
