"""The cold-start loader: no torch, integrity checks, io signature check."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from floodway.build.hardware import HardwareInfo
from floodway.build.loader import load, plan, read_manifest
from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError


@pytest.fixture
def build_copy(built_store, tmp_path):
    src = ArtifactStore(built_store).latest("embed")
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_plan_on_cpu_prefers_the_optimized_graph(built_store):
    m = read_manifest(ArtifactStore(built_store).latest("embed"))
    choices = plan(m, HardwareInfo())
    assert [(c.backend, c.usable) for c in choices] == [
        ("tensorrt", False), ("onnxruntime-cuda", False), ("onnxruntime-cpu", True),
        ("onnxruntime-cpu", True), ("torch", True)]
    assert choices[2].files == ("model.opt.onnx", "model.opt.onnx.data")
    assert "no CUDA GPU" in choices[0].reason


def test_loads_and_runs_without_importing_torch(built_store):
    folder = ArtifactStore(built_store).latest("embed")
    code = ("import sys, json; from floodway.build.loader import load; "
            f"m = load({str(folder)!r}); f = m.encode(['hi there', 'x']); "
            "o = m.run(f)['last_hidden_state']; "
            "print(json.dumps([m.backend, list(o.shape), 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    backend, shape, torch_loaded = json.loads(out.strip().splitlines()[-1])
    assert backend == "onnxruntime-cpu"
    assert shape[0] == 2 and shape[2] == 384
    assert torch_loaded is False


def test_encode_pads_and_truncates(built_store):
    m = load(ArtifactStore(built_store).latest("embed"))
    f = m.encode(["a", "word " * 1000])
    assert f["input_ids"].shape == (2, 256) and f["input_ids"].dtype == np.int64
    assert f["attention_mask"][0].sum() == 3 and f["attention_mask"][1].sum() == 256


def flip_byte(path, at=1000):
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def test_truncated_graph_falls_back_to_the_next_path(build_copy, caplog):
    data = build_copy / "model.opt.onnx.data"
    with data.open("r+b") as f:
        f.truncate(data.stat().st_size // 2)
    m = load(build_copy)
    assert m.backend == "onnxruntime-cpu"
    assert "model.opt.onnx.data has" in m.path_taken[2] and "failed" in m.path_taken[2]
    assert m.path_taken[3].startswith("onnxruntime-cpu[model.onnx, model.onnx.data]: loaded")
    assert "falling back" in caplog.text
    assert m.run(m.encode(["x"]))["last_hidden_state"].shape[-1] == 384


def test_altered_graph_detected_by_hash_and_skipped(build_copy):
    flip_byte(build_copy / "model.opt.onnx.data")
    assert load(build_copy, verify="size").path_taken[2].endswith("(offline-optimized graph)")
    m = load(build_copy)   # sha256 (default) catches the same-size alteration
    assert "do(es) not match the manifest sha256" in m.path_taken[2]
    assert "model.onnx, model.onnx.data]: loaded" in m.path_taken[3]


def test_altered_tokenizer_fails_clearly(build_copy):
    flip_byte(build_copy / "tokenizer" / "vocab.txt", at=100)
    load(build_copy, verify="size")   # same size: the fast check passes ...
    with pytest.raises(ArtifactError, match="vocab.txt do\\(es\\) not match the manifest sha256"):
        load(build_copy)              # ... the hash does not


def test_every_onnx_path_broken_falls_back_to_torch(build_copy, built_store):
    for rel in ("model.opt.onnx", "model.onnx"):
        flip_byte(build_copy / rel, at=50)
    m = load(build_copy)
    assert m.backend == "torch"
    ref = load(ArtifactStore(built_store).latest("embed"))
    feeds = m.encode(["fallbacks keep containers up"])
    got, want = (x.run(feeds)["last_hidden_state"] for x in (m, ref))
    assert np.abs(got - want).max() < 1e-3


def test_nothing_loadable_lists_every_reason(build_copy):
    for rel in ("model.opt.onnx", "model.onnx", "weights/model.safetensors"):
        flip_byte(build_copy / rel, at=50)
    with pytest.raises(ArtifactError) as info:
        load(build_copy)
    text = str(info.value)
    assert text.startswith("no way to load")
    assert text.count("]: failed (") == 3 and "tensorrt[-]: skipped" in text
    assert "onnxruntime-cuda[model.onnx, model.onnx.data]: skipped" in text


def test_read_mode_matches_mmap_mode(built_store):
    folder = ArtifactStore(built_store).latest("embed")
    a, b = load(folder, mode="read"), load(folder, mode="mmap")
    feeds = a.encode(["network storage reads sequentially"])
    assert np.array_equal(a.run(feeds)["last_hidden_state"], b.run(feeds)["last_hidden_state"])


def test_missing_file_and_missing_manifest(build_copy):
    (build_copy / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(ArtifactError, match="tokenizer.json is missing"):
        load(build_copy)
    (build_copy / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="no manifest.json"):
        load(build_copy)


def test_io_signature_mismatch(build_copy):
    path = build_copy / "manifest.json"
    m = json.loads(path.read_text())
    m["io"]["inputs"] = m["io"]["inputs"][:2]
    path.write_text(json.dumps(m))
    m = load(build_copy)   # both ONNX graphs disagree with the manifest: logged fallback
    assert all("takes inputs ('input_ids', 'attention_mask', 'token_type_ids'), the manifest "
               "says ('input_ids', 'attention_mask')" in p for p in m.path_taken[2:4])
    assert m.backend == "torch"


def test_no_build_names_the_command(tmp_path):
    with pytest.raises(ArtifactError, match="floodway build"):
        ArtifactStore(tmp_path).latest("embed")


def test_huge_text_is_clipped_before_tokenizing_without_changing_tokens(built_store):
    m = load(ArtifactStore(built_store).latest("embed"), verify="size")
    huge = "word   \n " * 2_000_000                      # 18 MB of text
    assert len(m.clip(huge)) <= m.max_chars
    a, b = m.encode([huge]), m.encode(["word " * 300])
    assert np.array_equal(a["input_ids"], b["input_ids"])
    assert m.clip("short text") == "short text"


def test_prefetched_session_tokenizer_and_digests_are_used(built_store):
    from floodway.build.prefetch import start_prefetch

    folder = ArtifactStore(built_store).latest("embed")
    pre = start_prefetch(folder)
    m = load(folder, prefetch=pre)
    assert m.runner is pre.runner and m.tokenizer is pre.tokenizer
    assert set(pre.digests) >= {"model.opt.onnx", "model.opt.onnx.data",
                                "tokenizer/tokenizer.json"}
    ref = load(folder)
    feeds = ref.encode(["prefetch changes when, not what"])
    assert np.array_equal(m.run(feeds)["last_hidden_state"], ref.run(feeds)["last_hidden_state"])


def test_prefetch_does_not_bypass_integrity_checks(build_copy):
    from floodway.build.prefetch import start_prefetch

    flip_byte(build_copy / "model.opt.onnx.data")
    m = load(build_copy, prefetch=start_prefetch(build_copy))
    assert "do(es) not match the manifest sha256" in m.path_taken[2]
    assert m.path_taken[3].startswith("onnxruntime-cpu[model.onnx, model.onnx.data]: loaded")
    flip_byte(build_copy / "tokenizer" / "vocab.txt", at=100)
    with pytest.raises(ArtifactError, match="vocab.txt"):
        load(build_copy, prefetch=start_prefetch(build_copy))


# ---------------------------------------------------------------- two phases: prepare, finish

@pytest.fixture(scope="module")
def engine_store(built_store, tmp_path_factory):
    """A store whose latest embed build also has a stand-in TensorRT engine."""
    from tests.unit.build.standin_engine import store_with_standin_engine

    return store_with_standin_engine(built_store, tmp_path_factory.mktemp("engine-store"))


def test_prepare_needs_no_device_and_finish_opens_the_engine(engine_store, tmp_path):
    """What a memory snapshot can hold is done before the GPU exists; the engine is
    deserialized only once the GPU is attached, and computes what the CPU path computes."""
    from floodway.build.hardware import fresh_detect
    from floodway.build.loader import finish, prepare
    from tests.unit.build.standin_engine import standin_in_process

    folder = ArtifactStore(engine_store).latest("embed")
    attached = tmp_path / "gpu-attached"
    with standin_in_process(gpu_when=attached) as trt:
        ready = prepare(folder, expect="gpu")
        assert trt.DESERIALIZED == []                    # nothing device-bound yet
        (engine,) = ready.manifest.engines
        assert set(ready.buffers) == {engine.path}       # the engine, read ahead
        assert {engine.path, "model.onnx", "model.onnx.data"} <= set(ready.digests)
        assert fresh_detect().gpu_name is None           # no GPU before the snapshot
        attached.touch()
        model = finish(ready, hardware=fresh_detect())
        assert model.backend == "tensorrt", model.path_taken
        assert len(trt.DESERIALIZED) == 1 and ready.buffers == {}
        feeds = model.encode(["engines run in the GPU phase", "x"])
        got = model.run(feeds)["last_hidden_state"]
        assert trt.EXECUTIONS[0] >= 1
    want = load(folder, hardware=HardwareInfo()).run(feeds)["last_hidden_state"]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_an_altered_engine_is_caught_by_its_early_hash(engine_store, tmp_path):
    from floodway.build.loader import finish, prepare
    from tests.unit.build.standin_engine import standin_in_process

    copy = tmp_path / "build"
    shutil.copytree(ArtifactStore(engine_store).latest("embed"), copy)
    (engine,) = read_manifest(copy).engines
    flip_byte(copy / engine.path, at=5)
    with standin_in_process() as trt:
        model = finish(prepare(copy, expect="gpu"))
        assert trt.DESERIALIZED == []
    assert "do(es) not match the manifest sha256" in model.path_taken[0]
    assert model.backend == "onnxruntime-cpu"


def test_the_engine_path_in_a_subprocess(engine_store):
    """The stand-ins through the environment only (PYTHONPATH, PATH), as a container has
    them: a plain `load` takes the TensorRT path."""
    from tests.unit.build.standin_engine import standin_env

    folder = ArtifactStore(engine_store).latest("embed")
    code = ("import json, tensorrt; from floodway.build.loader import load; "
            f"m = load({str(folder)!r}); m.run(m.encode(['hi'])); "
            "print(json.dumps([m.backend, tensorrt.EXECUTIONS[0]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=standin_env(), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["tensorrt", 1]


def test_prepare_ahead_files_per_device(built_store):
    from floodway.build.loader import ahead_files

    m = read_manifest(ArtifactStore(built_store).latest("embed"))
    assert ahead_files(m, None) == ()
    assert ahead_files(m, "cpu") == ("model.opt.onnx", "model.opt.onnx.data", "model.onnx",
                                     "model.onnx.data")
    assert ahead_files(m, "gpu") == ("model.onnx", "model.onnx.data")   # no engine built here
