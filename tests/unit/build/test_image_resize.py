"""Image preprocessing resamples only the window it keeps where a whole resize would be
large: a thin image costs no more than a square one, and the result stays within an 8-bit
level or two of transformers' processor (pixel for pixel on ordinary images)."""

from __future__ import annotations

import json

import numpy as np
import PIL.Image
import pytest

import floodway.tasks.image_processing as ip
from floodway.tasks.image_processing import ImageProcessor

CONFIGS = {
    "clip": {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 224},
             "crop_size": {"height": 224, "width": 224}},
    "convnext": {"image_processor_type": "ConvNextImageProcessor",
                 "size": {"shortest_edge": 224}, "crop_pct": 0.875},
    "bit": {"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 224},
            "crop_size": {"height": 224, "width": 224}, "resample": 2},
}
SMALL = {
    "clip": {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 30},
             "crop_size": {"height": 28, "width": 28}},
    "convnext": {"image_processor_type": "ConvNextImageProcessor",
                 "size": {"shortest_edge": 40}, "crop_pct": 0.875},
    "bit": {"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 30},
            "crop_size": {"height": 28, "width": 28}, "resample": 2},
    "padded": {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 8},
               "crop_size": {"height": 12, "width": 10}},
}
SIZES = ((3, 200), (200, 3), (20, 90), (90, 20), (57, 41), (12, 9), (1, 500))
LEVEL = 1 / 255   # one 8-bit level, before normalization


def _random(w: int, h: int, seed: int = 0) -> PIL.Image.Image:
    rng = np.random.default_rng(seed)
    return PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


@pytest.fixture
def resized_areas(monkeypatch):
    """The area of every image Pillow's resize makes; one over a million pixels fails
    before it is allocated."""
    areas: list[int] = []
    real = PIL.Image.Image.resize

    def resize(self, size, *args, **kwargs):
        areas.append(size[0] * size[1])
        assert size[0] * size[1] <= 1_000_000, f"a {size[0]}x{size[1]} resize"
        return real(self, size, *args, **kwargs)

    monkeypatch.setattr(PIL.Image.Image, "resize", resize)
    return areas


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("w,h", [(1, 100_000), (100_000, 1)])
def test_a_thin_image_resamples_only_the_window_it_keeps(name, w, h, resized_areas):
    img = PIL.Image.new("RGB", (w, h), (200, 40, 90))
    out = ImageProcessor.from_config(CONFIGS[name])([img])
    assert out.shape == (1, 3, 224, 224) and out.dtype == np.float32
    # 224 x 224 kept (ConvNeXT: its 224 crop of a 256 shortest edge): no intermediate
    # larger than that window and the source rows it reads
    assert resized_areas and max(resized_areas) <= 256 * 300
    # a uniform color stays that color (no padding, no edge artifacts)
    want = ImageProcessor.from_config(CONFIGS[name])([PIL.Image.new("RGB", (300, 300),
                                                                    (200, 40, 90))])
    assert np.abs(out - want).max() <= 1e-5


def test_an_ordinary_image_is_resized_whole(resized_areas):
    ImageProcessor.from_config(CONFIGS["clip"])([_random(640, 480)])
    assert resized_areas == [298 * 224]   # as transformers does, then cropped


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_window_resize_stays_within_two_levels_of_transformers(name, tmp_path,
                                                                   monkeypatch):
    from transformers import AutoImageProcessor

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(SMALL[name]))
    theirs = AutoImageProcessor.from_pretrained(str(tmp_path), backend="pil")
    ours = ImageProcessor.from_config(SMALL[name])
    std = min(ours.image_std)
    for i, (w, h) in enumerate(SIZES):
        img = _random(w, h, seed=i)
        want = np.asarray(theirs(images=[img])["pixel_values"][0])
        whole = ours([img])[0]
        monkeypatch.setattr(ip, "WHOLE_RESIZE_MAX_FACTOR", 0)   # the window, always
        window = ours([img])[0]
        monkeypatch.setattr(ip, "WHOLE_RESIZE_MAX_FACTOR", 16)
        assert window.shape == want.shape == whole.shape
        assert np.abs(window - want).max() <= 2 * LEVEL / std + 1e-5, (w, h)
        assert np.mean(np.abs(window - want) > 1e-5) < 0.25, (w, h)
        thin = max(w, h) / min(w, h) > 16
        if not thin:   # resized whole: transformers' result, within float rounding
            assert np.abs(whole - want).max() <= 1e-5, (w, h)
