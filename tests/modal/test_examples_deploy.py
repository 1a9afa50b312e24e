"""Every app under examples/ deploys through the real modal client against the fake control
plane, as `modal_app.py` does: its endpoint's class, the router, the job function and the
build function, with nothing the fake does not implement."""

from __future__ import annotations

import json

import pytest

from floodway.modal.contract import class_name
from tests.conftest import ROOT
from tests.modal.support import deploy_example

EXAMPLES = ROOT / "examples"
# example file -> (Modal app name, endpoint, the GPU its build function runs on)
DEPLOYS = {
    "rerank_app.py": ("floodway-rerank", "rerank", "build_l4"),
    "cross_encoder_app.py": ("floodway-cross-encoder", "relevance", "build_l4"),
    "vision_app.py": ("floodway-vision", "classify_image", "build_l4"),
    "eager_app.py": ("floodway-eager", "embed_eager", "build_cpu"),
}


@pytest.fixture
def cross_encoder_dir(tmp_path, monkeypatch):
    """A stand-in classifier folder, so that importing cross_encoder_app makes none (a deploy
    reads no weights; the build does)."""
    folder = tmp_path / "cross-encoder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    monkeypatch.setenv("CROSS_ENCODER_DIR", str(folder))
    return folder


@pytest.mark.parametrize("example", list(DEPLOYS))
def test_example_deploys_its_class_and_router(fake_modal, cross_encoder_dir, example):
    app_name, endpoint, build_fn = DEPLOYS[example]
    mod = deploy_example(fake_modal, path=EXAMPLES / example)
    state = fake_modal.state
    cls = class_name(endpoint)
    assert state.class_tags(app_name) == {cls}
    assert state.function_tags(app_name) == {f"{cls}.*", "router", "run_job", build_fn}
    assert state.unimplemented == []
    d = state.function(f"{cls}.*", app=app_name).definition
    assert d.is_class and set(d.method_definitions) == {"predict"}
    ep = mod.endpoints[endpoint]
    assert (d.batch_max_size, d.resources.gpu_config.gpu_type or None) == (
        ep.batching.max_batch_rows, ep.gpu)
    assert state.function("router", app=app_name).handle.web_url.startswith("https://")


def test_the_vision_build_image_carries_the_factorys_package(fake_modal):
    deploy_example(fake_modal, path=EXAMPLES / "vision_app.py")
    mounted = {path for files in fake_modal.state.mounts.values() for path in files}
    assert "/root/examples/vision_module.py" in mounted


def test_the_eager_example_serves_from_an_image_with_torch(fake_modal):
    deploy_example(fake_modal, path=EXAMPLES / "eager_app.py")
    commands = [c for req in fake_modal.state.images.values()
                for c in req.image.dockerfile_commands]
    assert any("torch==2.13.0" in c and "transformers" in c for c in commands)
