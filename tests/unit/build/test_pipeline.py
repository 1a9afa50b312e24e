"""The build pipeline on the real model: manifest, parity, no-op rebuild, atomic publish."""

import json
import time

import numpy as np

import modal_app
from floodway.build.manifest import Manifest
from floodway.build.pipeline import build_endpoint
from floodway.build.store import ArtifactStore


def test_manifest_records_source_toolchain_io_and_parity(built_store):
    folder = ArtifactStore(built_store).latest("embed")
    m = Manifest.read(folder)
    assert m.endpoint == "embed" and m.build_key == folder.name
    assert m.source.kind == "hf" and m.source.revision == modal_app.MODEL_REVISION
    assert len(m.source.files["model.safetensors"]) == 64
    assert m.toolchain["torch"].startswith("2.") and m.toolchain["onnxruntime"] != "absent"
    assert [i.name for i in m.io.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert m.io.inputs[0].shape == ["batch", "seq"]
    assert m.max_seq_len == 256
    # Parity at three shapes (batch 1, a padded batch, a full-length batch) for both graphs.
    assert [(p.graph, p.rows, p.padded) for p in m.parity] == [
        ("model.onnx", 1, False), ("model.onnx", 3, True), ("model.onnx", 4, False),
        ("model.opt.onnx", 1, False), ("model.opt.onnx", 3, True), ("model.opt.onnx", 4, False)]
    assert m.parity[2].seq_len == 256
    assert all(p.passed and 0 < p.max_abs_err <= p.atol == 1e-3 for p in m.parity)
    assert "no CUDA GPU" in m.skipped["compile"] and m.engines == []
    assert set(m.timings_s) >= {"fetch", "snapshot", "export", "optimize", "verify"}
    for rel, entry in m.artifacts.items():
        assert (folder / rel).stat().st_size == entry.bytes
    assert {"weights/model.safetensors", "model.onnx", "model.onnx.data", "model.opt.onnx",
            "model.opt.onnx.data", "tokenizer/tokenizer.json"} <= set(m.artifacts)
    # Weights live outside the graph files (external data): the graphs themselves are small.
    assert m.artifacts["model.onnx"].bytes < 1_000_000 < m.artifacts["model.onnx.data"].bytes


def test_publish_times_a_cold_load_of_the_build_in_a_fresh_process(built_store):
    from floodway.build.loader import load

    folder = ArtifactStore(built_store).latest("embed")
    m = Manifest.read(folder)
    assert m.cold_start_s is not None and m.cold_start_s > 0
    assert m.warnings == []
    # The probe left the build as published: it still loads, every file matching its hash.
    assert load(folder).backend.startswith("onnxruntime")


def test_onnx_graph_has_dynamic_batch_and_sequence_axes(built_store):
    import onnx

    folder = ArtifactStore(built_store).latest("embed")
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in graph.input]
    assert dims == [["batch", "seq"]] * 3


def test_weights_snapshot_matches_source(built_store, model_dir):
    from safetensors.numpy import load_file

    folder = ArtifactStore(built_store).latest("embed")
    ours = load_file(folder / "weights" / "model.safetensors")
    theirs = load_file(model_dir / "model.safetensors")
    common = [k for k in theirs if k in ours]
    assert len(common) >= 100
    for k in common:
        np.testing.assert_array_equal(ours[k], theirs[k].astype(np.float32))


def test_unchanged_rebuild_is_a_noop(built_store):
    folder = ArtifactStore(built_store).latest("embed")
    mtime = (folder / "manifest.json").stat().st_mtime_ns
    t = time.perf_counter()
    res = build_endpoint(modal_app.endpoints["embed"], ArtifactStore(built_store))
    assert res.cached and res.path == folder
    assert time.perf_counter() - t < 10   # generous: the point is no export happened
    assert (folder / "manifest.json").stat().st_mtime_ns == mtime
    assert not [p for p in (built_store / "embed").iterdir() if p.name.startswith(".staging")]


def test_latest_pointer_is_a_plain_key(built_store):
    key = (built_store / "embed" / "LATEST").read_text().strip()
    assert (built_store / "embed" / key / "manifest.json").is_file()
    manifest = json.loads((built_store / "embed" / key / "manifest.json").read_text())
    assert manifest["build_key"] == key


def test_changed_tolerance_reuses_earlier_stages(built_store):
    import dataclasses

    ep = modal_app.endpoints["embed"]
    looser = dataclasses.replace(ep, build=dataclasses.replace(ep.build, parity_atol=2e-3))
    res = build_endpoint(looser, ArtifactStore(built_store))
    assert not res.cached
    assert res.stages_cached == ("snapshot", "export", "optimize")
    assert Manifest.read(res.path).parity[0].atol == 2e-3
    # the original build is still there, and LATEST goes back to it on its (no-op) rebuild
    back = build_endpoint(ep, ArtifactStore(built_store))
    assert back.cached and back.path != res.path


def test_failed_parity_fails_the_build_and_publishes_nothing(built_store, tmp_path):
    import dataclasses

    import pytest

    from floodway.errors import BuildError

    ep = modal_app.endpoints["embed"]
    strict = dataclasses.replace(ep, build=dataclasses.replace(ep.build, parity_atol=1e-9))
    store = ArtifactStore(tmp_path)
    with pytest.raises(BuildError, match=r"stage 'verify' failed: model.onnx output differs "
                                         r"from PyTorch by .* \(tolerance 1e-09\)"):
        build_endpoint(strict, store)
    assert not (tmp_path / "embed" / "LATEST").exists()


def test_pickle_weights_opt_in_loads_with_weights_only(model_dir, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file

    from floodway.build.export import load_torch_model

    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    torch.save(load_file(str(d / "model.safetensors")), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    model = load_torch_model(d, allow_pickle=True)
    ref = load_torch_model(model_dir, allow_pickle=False)
    x = torch.tensor([[101, 7592, 102]])
    with torch.inference_mode():
        assert torch.allclose(model(input_ids=x).last_hidden_state,
                              ref(input_ids=x).last_hidden_state)
