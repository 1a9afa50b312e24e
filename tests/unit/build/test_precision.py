"""Reduced-precision builds on the real all-MiniLM-L6-v2: the int8 (and fp16) graphs pass
their accuracy gate, the manifest records it, the loader serves int8 on a CPU and fp16 only
on a GPU; an impossible tolerance fails the build naming the metric. One extra build: it
reuses the session store's cached stages (hard-linked), so only the precision stage runs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import floodway as fw
from floodway.build.hardware import HardwareInfo
from floodway.build.loader import load, plan, read_manifest
from floodway.build.store import ArtifactStore
from floodway.errors import BuildError

REDUCED = ("fp32", "int8", "fp16")


def reduced_app(build: fw.Build) -> fw.App:
    import modal_app

    embed = modal_app.endpoints["embed"]
    app = fw.App("precision")
    app.endpoint(model=embed.model, build=build, gpu="L4", name="embed")(embed.fn)
    return app


def linked_store(built_store, dst):
    """A fresh store whose stage cache is the session store's (hard links: nothing copied)."""
    shutil.copytree(built_store / ".stages", dst / ".stages", copy_function=os.link)
    return ArtifactStore(dst)


@pytest.fixture(scope="module")
def int8_build(built_store, tmp_path_factory):
    import modal_app
    from floodway.build.pipeline import build_endpoint

    base = modal_app.endpoints["embed"].build
    build = dataclasses.replace(base, tensorrt=False, precision=REDUCED)
    store = linked_store(built_store, tmp_path_factory.mktemp("int8-store"))
    res = build_endpoint(reduced_app(build)["embed"], store)
    assert "precision" not in res.stages_cached and "export" in res.stages_cached
    return res


def test_int8_passes_its_gate_and_the_manifest_records_it(int8_build):
    from floodway.build.manifest import Manifest

    m = Manifest.read(int8_build.path)
    by = {p.precision: p for p in m.precisions}
    int8 = by["int8"]
    assert int8.passed and int8.device == "cpu" and int8.metric == "cosine"
    assert int8.artifact == "model.int8.onnx" and "model.int8.onnx" in m.artifacts
    assert int8.tolerance == {"cosine": 0.99}
    cosines = [c["cosine"] for c in int8.cases.values()]
    assert set(int8.cases) == {"one", "padded", "long"}
    assert int8.measured["cosine"] == min(cosines) >= 0.99      # the one-word text too
    assert int8.cases["long"]["cosine"] >= 0.995
    assert "smoothed into the weights" in int8.method
    assert int8.measured["cosine"] < 0.99999        # really quantized, not a float32 copy
    fp16 = by["fp16"]
    assert fp16.passed and fp16.device == "gpu" and fp16.measured["cosine"] >= 0.999
    assert m.build["precision"] == list(REDUCED)
    assert m.artifacts["model.int8.onnx"].bytes < 0.7 * m.artifacts["model.onnx.data"].bytes


def test_loader_serves_int8_on_cpu_without_torch(int8_build):
    code = ("import sys, json; from floodway.build.loader import load; "
            f"m = load({str(int8_build.path)!r}); f = m.encode(['int8 on a cpu']); "
            "o = m.run(f)['last_hidden_state']; "
            "print(json.dumps([m.backend, m.path_taken[-1], 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    backend, taken, torch_loaded = json.loads(out.strip().splitlines()[-1])
    assert backend == "onnxruntime-cpu" and "model.int8.onnx" in taken and "loaded" in taken
    assert torch_loaded is False


def test_int8_embeddings_agree_with_float32(int8_build, built_store):
    import modal_app

    int8 = load(int8_build.path)
    fp32 = load(ArtifactStore(built_store).latest("embed"))
    texts = ["quantized embeddings", "a second and rather longer sentence about warm pools"]
    a = np.asarray(modal_app.endpoints["embed"].fn(int8, texts))
    b = np.asarray(modal_app.endpoints["embed"].fn(fp32, texts))
    assert (a * b).sum(axis=1).min() >= 0.99 and not np.allclose(a, b, atol=1e-6)


def test_plan_takes_fp16_on_a_gpu_and_int8_only_on_a_cpu(int8_build):
    m = read_manifest(int8_build.path)
    gpu = HardwareInfo("NVIDIA L4", "8.9", None,
                       ("CUDAExecutionProvider", "CPUExecutionProvider"))
    usable = [c for c in plan(m, gpu) if c.usable]
    assert usable[0].backend == "onnxruntime-cuda"
    assert usable[0].files == ("model.fp16.onnx", "model.fp16.onnx.data")
    cpu = [c for c in plan(m, HardwareInfo()) if c.usable]
    assert cpu[0].files == ("model.int8.onnx",) and "gate passed" in cpu[0].reason
    assert not any("fp16" in f for c in cpu for f in c.files)


def test_a_failed_gate_is_never_planned(int8_build, tmp_path):
    folder = tmp_path / "b"
    shutil.copytree(int8_build.path, folder)
    raw = json.loads((folder / "manifest.json").read_text())
    for p in raw["precisions"]:
        p["passed"] = False
    (folder / "manifest.json").write_text(json.dumps(raw))
    m = read_manifest(folder)
    files = [f for c in plan(m, HardwareInfo("NVIDIA L4", "8.9", None,
                                             ("CUDAExecutionProvider",))) for f in c.files]
    assert "model.int8.onnx" not in files and "model.fp16.onnx" not in files
    assert load(folder, verify="size").path_taken[-1].startswith(
        "onnxruntime-cpu[model.opt.onnx")


def test_an_impossible_tolerance_fails_the_build_naming_the_metric(built_store, int8_build,
                                                                   tmp_path):
    import modal_app
    from floodway.build.manifest import Manifest
    from floodway.build.pipeline import build_endpoint

    build = dataclasses.replace(modal_app.endpoints["embed"].build, tensorrt=False,
                                precision=("fp32", "int8"), precision_min_cosine=0.999999)
    store = linked_store(built_store, tmp_path)
    with pytest.raises(BuildError) as e:
        build_endpoint(reduced_app(build)["embed"], store)
    msg = str(e.value)
    assert e.value.stage == "precision"
    assert "int8 model.int8.onnx: cosine 0.9" in msg and ">= 0.999999" in msg
    cases = next(p for p in Manifest.read(int8_build.path).precisions
                 if p.precision == "int8").cases
    worst = min(cases, key=lambda k: cases[k]["cosine"])      # same graph, same recipe
    assert f"case {worst!r}" in msg and "precision_min_cosine" in msg
    assert not list(tmp_path.glob("embed/*/manifest.json"))      # nothing published
