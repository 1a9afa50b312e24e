"""image-classification: preprocessing from preprocessor_config.json with numpy and Pillow
(checked against transformers' own image processors), and tiny ViT / ResNet classifiers
built, served without torch and compared with PyTorch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from floodway.build.loader import load
from floodway.build.manifest import Manifest
from floodway.build.store import ArtifactStore
from floodway.tasks.image_processing import ImageProcessor, center_crop
from floodway.tasks.vision import sample_images

CONFIGS = {
    "vit": {"image_processor_type": "ViTImageProcessor", "size": {"height": 48, "width": 40}},
    "convnext-crop": {"image_processor_type": "ConvNextImageProcessor",
                      "size": {"shortest_edge": 40}, "crop_pct": 0.875,
                      "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
    "convnext-warp": {"image_processor_type": "ConvNextImageProcessor",
                      "size": {"shortest_edge": 384}},
    "deit": {"image_processor_type": "DeiTImageProcessor", "size": {"height": 36, "width": 36},
             "crop_size": {"height": 32, "width": 32}},
    "clip": {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 30},
             "crop_size": {"height": 28, "width": 28}},
    "legacy": {"feature_extractor_type": "ViTFeatureExtractor", "size": 24, "resample": 3},
    "padded": {"image_processor_type": "DeiTImageProcessor", "size": {"height": 8, "width": 8},
               "crop_size": {"height": 12, "width": 10}, "do_rescale": False},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_preprocessing_matches_transformers_image_processor(name, tmp_path):
    from transformers import AutoImageProcessor

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(CONFIGS[name]))
    theirs = AutoImageProcessor.from_pretrained(str(tmp_path), backend="pil")
    ours = ImageProcessor.from_file(tmp_path / "preprocessor_config.json")
    images = sample_images(4, seed=3)
    want = np.stack([np.asarray(theirs(images=[im])["pixel_values"][0]) for im in images])
    got = ours(images)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.shape[2:] == ours.output_size
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_unsupported_processors_and_sizes_are_named():
    with pytest.raises(ValueError, match="'MobileViTImageProcessor' is not supported"):
        ImageProcessor.from_config({"image_processor_type": "MobileViTImageProcessor"})
    with pytest.raises(ValueError, match="image size .* is not supported"):
        ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor",
                                    "size": {"longest_edge": 30, "shortest_edge": 20}})
    free = ImageProcessor.from_config({"image_processor_type": "CLIPImageProcessor",
                                       "do_center_crop": False})
    assert free.output_size is None          # follows the input's aspect ratio


def test_center_crop_pads_a_small_image_symmetrically():
    arr = np.arange(2 * 3, dtype=np.uint8).reshape(2, 3, 1) + 1
    out = center_crop(arr, 4, 3)
    assert out.shape == (4, 3, 1)
    assert out[:, :, 0].tolist() == [[0, 0, 0], [1, 2, 3], [4, 5, 6], [0, 0, 0]]


def test_the_manifest_records_the_image_io_labels_and_the_preprocessing_check(image_store):
    m = Manifest.read(ArtifactStore(image_store).latest("vit"))
    assert (m.task.name, m.task.model_class) == ("image-classification",
                                                 "AutoModelForImageClassification")
    assert m.task.labels == ["cat", "dog", "bird", "fish"]
    assert [(i.name, i.shape) for i in m.io.inputs] == [("pixel_values", ["batch", 3, 32, 32])]
    assert [(o.name, o.shape) for o in m.io.outputs] == [("logits", ["batch", 4])]
    pre = [p for p in m.parity if p.graph == "preprocess"]
    assert pre and pre[0].case == "ViTImageProcessorPil" and pre[0].max_abs_err <= 1e-5
    graphs = [(p.graph, p.case, p.rows, p.seq_len) for p in m.parity if p.graph != "preprocess"]
    assert graphs == [("model.onnx", "one", 1, None), ("model.onnx", "batch", 3, None),
                      ("model.opt.onnx", "one", 1, None), ("model.opt.onnx", "batch", 3, None)]
    assert {"processor/preprocessor_config.json", "processor/config.json"} <= set(m.artifacts)
    assert not any(a.startswith("tokenizer/") for a in m.artifacts)


@pytest.mark.parametrize("name,cls", [("vit", "ViTForImageClassification"),
                                      ("resnet", "ResNetForImageClassification")])
def test_served_logits_match_pytorch_with_transformers_preprocessing(image_store, image_dirs,
                                                                     name, cls):
    import torch
    import transformers
    from transformers import AutoImageProcessor

    model = load(ArtifactStore(image_store).latest(name))
    assert model.task == "image-classification" and model.tokenizer is None
    images = sample_images(3, seed=11)
    got = model.run(model.prepare(images))["logits"]
    theirs = AutoImageProcessor.from_pretrained(str(image_dirs[name]), backend="pil")
    pixels = torch.from_numpy(np.stack([np.asarray(theirs(images=[im])["pixel_values"][0])
                                        for im in images]))
    ref = getattr(transformers, cls).from_pretrained(str(image_dirs[name])).eval()
    with torch.inference_mode():
        want = ref(pixel_values=pixels).logits.numpy()
    assert got.shape == (3, 4) and np.abs(got - want).max() <= 1e-3


def test_images_are_served_without_torch(image_store):
    code = ("import sys, json; from PIL import Image; from floodway.build.loader import load; "
            "m = load(sys.argv[1]); imgs = [Image.new('RGB', (64, 48), (10, 200, 30))] * 2; "
            "o = m.run(m.prepare(imgs))['logits']; "
            "print(json.dumps([m.backend, list(o.shape), m.labels[0], "
            "'torch' in sys.modules, 'transformers' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code,
                          str(ArtifactStore(image_store).latest("resnet"))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        "onnxruntime-cpu", [2, 4], "cat", False, False]


def test_a_text_build_takes_no_images(text_cls_store):
    model = load(ArtifactStore(text_cls_store).latest("rerank"))
    with pytest.raises(ValueError, match="task \\(text-classification\\) takes no images"):
        model.preprocess_images(sample_images(1))


def test_an_untyped_image_endpoint_warms_up_with_an_image(image_store, monkeypatch):
    from floodway import tasks
    from floodway.runtime.worker import WARMUP_INPUTS_ENV

    monkeypatch.delenv(WARMUP_INPUTS_ENV, raising=False)
    model = load(ArtifactStore(image_store).latest("vit"))
    image = tasks.get(model.task).sample_item(model)
    assert image.mode == "RGB" and model.run(model.prepare([image]))["logits"].shape == (1, 4)
