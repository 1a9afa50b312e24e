"""Endpoints that bring their own runtime: a `load=` hook over the build's files, or no model
source at all. floodway builds no graph for them, but still builds (files hashed in a
manifest), boots them in a container with per-phase cold-start timings, and serves them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from floodway.build.artifacts import load_own, open_artifacts
from floodway.build.loader import load
from floodway.build.manifest import Manifest
from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError
from tests.unit.build import own_apps


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """(app file, store root) with both endpoints of `own_apps.APP` built."""
    root = tmp_path_factory.mktemp("own")
    app = own_apps.app_file(root / "own_app.py", own_apps.source_folder(root / "src"))
    return app, own_apps.build_all(app, root / "store")


def test_a_load_endpoint_builds_its_source_files_and_no_graph(own):
    _, store = own
    m = Manifest.read(ArtifactStore(store).latest("describe"))
    assert m.runtime == "own" and m.source.kind == "local"
    assert set(m.artifacts) == {"source/config.json", "source/vocab.txt",
                                "source/model.safetensors"}
    assert set(m.skipped) == {"export", "optimize", "compile", "verify"}
    assert all("load=" in why for why in m.skipped.values())
    assert m.parity == [] and m.io.inputs == [] and m.engines == []


def test_a_sourceless_endpoint_builds_a_manifest_only_and_rebuilds_as_a_noop(own):
    from floodway.build.pipeline import build_endpoint
    from floodway.functions.discover import load_app

    app, store = own
    folder = ArtifactStore(store).latest("shout")
    m = Manifest.read(folder)
    assert (m.runtime, m.source.kind, m.task, m.artifacts) == ("own", "none", None, {})
    assert "no model source" in m.skipped["export"]
    _, (ep,) = load_app(f"{app}::shout")
    again = build_endpoint(ep, ArtifactStore(store))
    assert again.cached and again.path == folder


def test_the_graph_loader_refuses_an_own_runtime_build(own):
    with pytest.raises(ArtifactError, match="brings its own runtime"):
        load(ArtifactStore(own[1]).latest("describe"))


def test_artifacts_give_the_files_and_catch_an_altered_one(own, tmp_path):
    import shutil

    src = ArtifactStore(own[1]).latest("describe")
    arts = open_artifacts(src)
    assert (arts.source_dir / "config.json").is_file() and arts.weights is None
    assert arts.path("source/vocab.txt").read_text().startswith("[PAD]")
    with pytest.raises(ArtifactError, match="has no source/missing.txt"):
        arts.path("source/missing.txt")
    arts.check()
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    data = bytearray((copy / "source" / "config.json").read_bytes())
    data[3] ^= 1
    (copy / "source" / "config.json").write_bytes(bytes(data))
    altered = open_artifacts(copy)              # same size: opens ...
    with pytest.raises(ArtifactError, match="source/config.json do\\(es\\) not match"):
        altered.check()                         # ... the hash does not match
    (copy / "source" / "vocab.txt").unlink()
    with pytest.raises(ArtifactError, match="vocab.txt is missing"):
        open_artifacts(copy)
    with pytest.raises(ArtifactError, match="holds no source files"):
        _ = open_artifacts(ArtifactStore(own[1]).latest("shout")).source_dir


def test_boot_calls_the_load_hook_and_reports_its_phase(own, monkeypatch):
    from floodway.runtime import worker
    from floodway.runtime.protocol import Phase, Ready

    app, store = own
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    sent: list = []
    fn, state = worker.boot(str(app), "describe", str(store), sent.extend)
    assert state["config"].startswith('{"model_type": "toy"')
    phase, ready = sent
    assert phase == Phase("warming") and isinstance(ready, Ready)
    assert ready.backend == "load-hook"
    assert set(ready.timings_s) == {"process_start", "imports", "artifact_load", "load_hook",
                                    "warmup"}
    assert fn(state, ["x"]) == [f"3:{state['onnxruntime']}:{'torch' in sys.modules}:x"]
    sent.clear()
    fn, state = worker.boot(str(app), "shout", str(store), sent.extend)
    assert state is None and sent[1].backend == "no-model" and fn(state, ["a"]) == ["A"]


def test_a_load_container_imports_neither_onnxruntime_nor_torch(own):
    """In a real worker process: the hook's result answers a batch; the container skipped the
    graph path's imports (what the hook found imported is in its answer)."""
    from floodway.runtime.protocol import FROM_WORKER, Batch, ItemResult, Ready, decode_all, encode

    app, store = own
    out = subprocess.run([sys.executable, "-m", "floodway.runtime.worker", str(app), "describe",
                          str(store)], input=encode(Batch(1, (("r:0", "hello"),))),
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    msgs = [m for line in out.stdout.splitlines() for m in decode_all(line, FROM_WORKER)]
    ready = next(m for m in msgs if isinstance(m, Ready))
    assert ready.backend == "load-hook" and ready.torch is False
    (result,) = [m for m in msgs if isinstance(m, ItemResult)]
    assert result.output == "3:False:False:hello"
    assert json.loads(json.dumps(ready.timings_s))["load_hook"] >= 0


def test_a_torch_module_with_a_load_hook_gets_its_state_dict_snapshot(tmp_path):
    import numpy as np

    import floodway as fw
    from floodway.config import TensorSpec, TorchModel
    from tests.unit.build import toy_modules
    from tests.unit.build.conftest import CONV, build_app

    app = fw.App("own-torch")

    def load_hook(artifacts):
        return artifacts.read_weights()

    @app.endpoint(model=TorchModel(CONV, inputs=[TensorSpec("image", shape=(None, 3, 16, 16))]),
                  load=load_hook)
    def keys(state, texts: list[str]) -> list[int]:
        return [len(state)] * len(texts)

    build_app(app, tmp_path)
    folder = ArtifactStore(tmp_path).latest("keys")
    m = Manifest.read(folder)
    assert (m.runtime, set(m.artifacts)) == ("own", {"weights/model.safetensors"})
    state, backend, _ = load_own(app["keys"], folder)
    want = toy_modules.conv_net().state_dict()
    assert backend == "load-hook" and set(state) == set(want)
    np.testing.assert_array_equal(state["0.weight"], want["0.weight"].numpy())


def test_a_hub_source_is_published_as_files_not_as_cache_symlinks(tmp_path):
    """A Hub cache snapshot is a folder of relative symlinks into its blobs: the build must
    hold the bytes (linked or copied), not links that dangle in the build folder."""
    import floodway as fw
    from floodway.build.artifacts import load_own
    from floodway.build.fetch import seed_hub_cache
    from tests.unit.build.conftest import build_app

    rev = "2" * 40
    seed_hub_cache(own_apps.source_folder(tmp_path / "src"), "toy/own-source", rev)
    app = fw.App("hub-own")

    @app.endpoint(model=fw.HFModel("toy/own-source", revision=rev),
                  load=lambda artifacts: (artifacts.source_dir / "config.json").read_text())
    def config(text, items: list[str]) -> list[str]:
        return [text] * len(items)

    build_app(app, tmp_path / "store")
    folder = ArtifactStore(tmp_path / "store").latest("config")
    assert set(Manifest.read(folder).artifacts) == {"source/config.json", "source/vocab.txt",
                                                    "source/model.safetensors"}
    assert not any(p.is_symlink() for p in (folder / "source").iterdir())
    text, _, _ = load_own(app["config"], folder)
    assert '"model_type": "toy"' in text
