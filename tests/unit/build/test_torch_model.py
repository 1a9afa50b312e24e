"""A user's own PyTorch module (TorchModel): the factory builds it, floodway snapshots its
state dict, exports ONNX with the declared inputs and dynamic axes, checks parity and serves
it through ONNX Runtime without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from floodway.build.loader import load
from floodway.build.manifest import Manifest
from floodway.build.store import ArtifactStore
from floodway.config import TensorSpec, TorchModel
from floodway.errors import BuildError
from tests.unit.build import toy_modules
from tests.unit.build.conftest import CONV, build_app, torch_app

IMAGES = np.random.default_rng(5).standard_normal((3, 3, 16, 16)).astype(np.float32)


def module_out(module, *arrays):
    with torch.inference_mode():
        return module(*(torch.from_numpy(a) for a in arrays))


def test_the_manifest_records_the_module_its_io_and_parity(torch_store):
    m = Manifest.read(ArtifactStore(torch_store).latest("tag"))
    assert (m.task.name, m.source.kind, m.source.factory) == (
        "torch-module", "torch", "tests.unit.build.toy_modules:tagger")
    assert set(m.source.files) == {"factory/toy_modules.py"}       # no weights: the factory's
    assert [(i.name, i.dtype, i.shape) for i in m.io.inputs] == [
        ("ids", "int64", ["batch", "seq"]), ("weights", "float32", ["batch", "seq"])]
    assert [(o.name, o.shape) for o in m.io.outputs] == [("pooled", ["batch", 2]),
                                                       ("tokens", ["batch", "seq", 4])]
    assert [(p.graph, p.case, p.rows, p.seq_len) for p in m.parity] == [
        ("model.onnx", "one", 1, 8), ("model.onnx", "batch", 3, 16),
        ("model.opt.onnx", "one", 1, 8), ("model.opt.onnx", "batch", 3, 16)]
    assert all(p.passed and p.outputs == ["pooled", "tokens"] for p in m.parity)
    assert "weights/model.safetensors" in m.artifacts


def test_served_outputs_match_the_module(torch_store):
    conv = load(ArtifactStore(torch_store).latest("classify"))
    feeds = conv.prepare(list(IMAGES))
    assert feeds["image"].shape == (3, 3, 16, 16)
    want = module_out(toy_modules.conv_net().eval(), IMAGES).numpy()
    assert np.abs(conv.run(feeds)["logits"] - want).max() <= 1e-4
    tag = load(ArtifactStore(torch_store).latest("tag"))
    items = [{"ids": [1, 2, 3, 4, 5], "weights": [1.0, 0.5, 0.25, 1.0, 1.0]},
             {"ids": [9, 8, 7, 6, 5], "weights": [0.0, 1.0, 1.0, 1.0, 2.0]}]
    feeds = tag.prepare(items)
    assert feeds["ids"].dtype == np.int64 and feeds["weights"].shape == (2, 5)
    got = tag.run(feeds)
    want = module_out(toy_modules.tagger().eval(), feeds["ids"], feeds["weights"])
    assert np.abs(got["pooled"] - want["pooled"].numpy()).max() <= 1e-5
    assert np.abs(got["tokens"] - want["tokens"].numpy()).max() <= 1e-5


def test_prepare_names_the_item_that_does_not_fit(torch_store):
    conv = load(ArtifactStore(torch_store).latest("classify"))
    with pytest.raises(ValueError, match=r"item 1: input 'image' has shape \(3, 8, 8\)"):
        conv.prepare([IMAGES[0], np.zeros((3, 8, 8))])
    tag = load(ArtifactStore(torch_store).latest("tag"))
    with pytest.raises(ValueError, match="item 0 should be a dict with an array for input "
                                         "'weights'"):
        tag.prepare([{"ids": [1, 2]}])


def test_served_without_torch(torch_store):
    code = ("import sys, json; import numpy as np; from floodway.build.loader import load; "
            "m = load(sys.argv[1]); "
            "o = m.run(m.prepare([np.zeros((3, 16, 16), np.float32)] * 2))['logits']; "
            "print(json.dumps([m.backend, list(o.shape), 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code,
                          str(ArtifactStore(torch_store).latest("classify"))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["onnxruntime-cpu", [2, 4], False]


def _reseeded() -> dict:
    module = toy_modules.conv_net()            # seeds 0: re-initialise with another seed
    torch.manual_seed(42)
    for p in module.parameters():
        torch.nn.init.normal_(p)
    return module.state_dict()


def _served_logits(app, root, name="classify"):
    build_app(app, root)
    model = load(ArtifactStore(root).latest(name))
    return model.run(model.prepare(list(IMAGES)))["logits"]


@pytest.mark.parametrize("where", ["file", "folder", "hub", "pickle"])
def test_weights_from_a_file_a_folder_or_the_hub_replace_the_factorys(where, tmp_path):
    from safetensors.torch import save_file

    from floodway.build.fetch import seed_hub_cache

    state = _reseeded()
    weights_dir = tmp_path / "w"
    weights_dir.mkdir()
    if where == "pickle":
        torch.save(state, weights_dir / "model.pt")
        with pytest.raises(BuildError, match="only pickled weights"):
            build_app(torch_app(weights=weights_dir), tmp_path / "refused")
        app = torch_app(weights=weights_dir / "model.pt", allow_pickle=True)
    else:
        save_file(state, str(weights_dir / "model.safetensors"))
        if where == "hub":
            rev = "1" * 40
            seed_hub_cache(weights_dir, "toy/conv-net", rev)
            app = torch_app(weights="toy/conv-net", revision=rev)
        else:
            app = torch_app(weights=weights_dir / "model.safetensors" if where == "file"
                            else weights_dir)
    module = toy_modules.conv_net()
    module.load_state_dict(state)
    want = module_out(module.eval(), IMAGES).numpy()
    got = _served_logits(app, tmp_path / "store")
    assert np.abs(got - want).max() <= 1e-4
    default = module_out(toy_modules.conv_net().eval(), IMAGES).numpy()
    assert np.abs(got - default).max() > 1e-2     # not the factory's own initialisation


def test_weights_that_do_not_fit_and_a_failing_factory_fail_the_snapshot(tmp_path):
    from safetensors.torch import save_file

    from floodway.build.torch_module import build_module

    image = TensorSpec("image", "float32", (None, 3, 16, 16))
    save_file({"extra.weight": torch.zeros(2, 2)}, str(tmp_path / "keys.safetensors"))
    with pytest.raises(BuildError, match=r"stage 'snapshot' failed: the weights do not fit "
                                         r".*conv_net\(\): 4 missing .* 1 unexpected"):
        build_module(TorchModel(CONV, weights=tmp_path / "keys.safetensors", inputs=[image]))
    state = dict(toy_modules.conv_net().state_dict(), **{"0.weight": torch.zeros(2, 2)})
    save_file(state, str(tmp_path / "shape.safetensors"))
    with pytest.raises(BuildError, match="size mismatch for 0.weight"):
        build_module(TorchModel(CONV, weights=tmp_path / "shape.safetensors", inputs=[image]))
    with pytest.raises(BuildError, match=r"toy_modules:broken\(\) raised RuntimeError: no "
                                         "weights here"):
        build_module(TorchModel("tests.unit.build.toy_modules:broken", inputs=[image]))
    with pytest.raises(BuildError, match="cannot import the factory 'no_such_pkg.mod:make'"):
        build_module(TorchModel("no_such_pkg.mod:make", inputs=[image]))


def test_the_pytorch_fallback_rebuilds_the_module_from_its_factory(torch_store, tmp_path):
    import shutil

    src = ArtifactStore(torch_store).latest("tag")
    copy = tmp_path / src.name
    shutil.copytree(src, copy)
    for rel in ("model.opt.onnx", "model.onnx"):
        data = bytearray((copy / rel).read_bytes())
        data[40] ^= 1
        (copy / rel).write_bytes(bytes(data))
    fallback, ref = load(copy), load(src)
    assert fallback.backend == "torch"
    feeds = ref.prepare([{"ids": [1, 2, 3], "weights": [1.0, 1.0, 0.5]}])
    for name in ("pooled", "tokens"):
        assert np.abs(fallback.run(feeds)[name] - ref.run(feeds)[name]).max() <= 1e-5


def test_an_untyped_endpoint_warms_up_with_an_item_its_task_takes(torch_store, monkeypatch):
    from floodway.runtime.worker import WARMUP_INPUTS_ENV, _warmup_batches

    monkeypatch.delenv(WARMUP_INPUTS_ENV, raising=False)
    app = torch_app()
    for name in ("classify", "tag"):
        ep, model = app[name], load(ArtifactStore(torch_store).latest(name))
        (warm,) = _warmup_batches(ep, model)
        assert len(ep.fn(model, warm)) == 1
    ((item,),) = _warmup_batches(app["tag"], model)
    assert item["ids"].shape == (1,) and item["weights"].dtype == np.float32
