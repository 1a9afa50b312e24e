"""Image preprocessing from a model's ``preprocessor_config.json``, with numpy and Pillow only.

It does what transformers' image processors (their PIL backend, transformers 5) do for the
common image-classification checkpoints, in their order:

1. resize with Pillow (`resample`): to ``size`` = {height, width}, or the shortest edge to
   ``size.shortest_edge`` keeping the aspect ratio (the long edge truncated to an int);
   ConvNeXT (and the ResNet checkpoints that use its processor) resizes the shortest edge
   to ``int(shortest_edge / crop_pct)`` and then center-crops a ``shortest_edge`` square
   below 384, and warps to a square at 384 or more;
2. center crop to ``crop_size`` (zero-padded where the image is smaller);
3. rescale by ``rescale_factor`` (1/255), computed in float64, stored as float32;
4. normalize per channel: (x - image_mean) / image_std;

then channels first: float32 (N, 3, H, W). Processor types (``image_processor_type``, or a
legacy ``feature_extractor_type``): ViT, DeiT, CLIP, BiT and ConvNeXT; settings the config
leaves out take that class's defaults (`DEFAULTS`, read from transformers 5.24's
``*ImageProcessorPil`` classes). Builds compare it with transformers' own processor on sample
images (`floodway.tasks.vision`), so an unsupported variation fails the build, not serving.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

IMAGENET_STANDARD = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
OPENAI_CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
BILINEAR, BICUBIC = 2, 3    # PIL.Image.Resampling values, as the configs store them
CONVNEXT_WARP_FROM = 384    # ConvNeXT warps instead of cropping at this shortest edge and up
# Resize the whole image (as transformers does, pixel for pixel) up to this many times the
# window kept (a 4:3 photo's is 1.33x, a 1:16 one's 16x); beyond, only the window
# (`ImageProcessor._resize_window`), so a thin image costs no more than a square one.
WHOLE_RESIZE_MAX_FACTOR = 16
# Each filter's support radius in output pixels, as Pillow's resample filters define them
# (Pillow's src/libImaging/Resample.c); 3 (Lanczos) for any other.
FILTER_SUPPORT = {0: 0.5, 2: 1.0, 3: 2.0}

# type -> (resample, (mean, std), size, crop_size or None, do_center_crop, default_to_square)
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "ViTImageProcessor": (BILINEAR, IMAGENET_STANDARD, {"height": 224, "width": 224}, None,
                          False, True),
    "DeiTImageProcessor": (BICUBIC, IMAGENET_STANDARD, {"height": 256, "width": 256},
                           {"height": 224, "width": 224}, True, True),
    "CLIPImageProcessor": (BICUBIC, OPENAI_CLIP, {"shortest_edge": 224},
                           {"height": 224, "width": 224}, True, False),
    "BitImageProcessor": (BICUBIC, OPENAI_CLIP, {"shortest_edge": 224},
                          {"height": 224, "width": 224}, True, False),
    "ConvNextImageProcessor": (BICUBIC, IMAGENET_STANDARD, {"shortest_edge": 384}, None,
                               False, False),
}


def processor_type(raw: Mapping[str, Any]) -> str:
    """The config's processor class name, normalized (legacy FeatureExtractor names, and the
    Fast / Pil backend suffixes, map to the ImageProcessor name)."""
    name = str(raw.get("image_processor_type") or raw.get("feature_extractor_type") or "")
    name = name.replace("FeatureExtractor", "ImageProcessor")
    for suffix in ("Fast", "Pil"):
        name = name.removesuffix(suffix)
    return name


def _size(value: Any, square: bool) -> dict[str, int]:
    """A config's size (a dict, or a legacy int) as {height, width} or {shortest_edge}."""
    if isinstance(value, int):
        return {"height": value, "width": value} if square else {"shortest_edge": value}
    if isinstance(value, Mapping):
        if "height" in value and "width" in value:
            return {"height": int(value["height"]), "width": int(value["width"])}
        if "shortest_edge" in value and not value.get("longest_edge"):
            return {"shortest_edge": int(value["shortest_edge"])}
    raise ValueError(f"image size {value!r} is not supported: {{height, width}} or "
                     "{shortest_edge} (floodway.tasks.image_processing)")


@dataclass(frozen=True)
class ImageProcessor:
    """Preprocessing settings (see the module doc); call it on a list of images."""

    kind: str                             # the processor type, e.g. "ViTImageProcessor"
    size: dict[str, int]
    resample: int = BILINEAR
    do_resize: bool = True
    do_center_crop: bool = False
    crop_size: tuple[int, int] | None = None
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = IMAGENET_STANDARD[0]
    image_std: tuple[float, ...] = IMAGENET_STANDARD[1]
    crop_pct: float = 224 / 256

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> ImageProcessor:
        """From a preprocessor_config.json's contents. Raises ValueError for a processor
        type or setting this module does not implement."""
        kind = processor_type(raw)
        if kind not in DEFAULTS:
            raise ValueError(f"image processor {kind or '(unnamed)'!r} is not supported; "
                             f"floodway implements {', '.join(DEFAULTS)}")
        resample, (mean, std), size, crop, center, square = DEFAULTS[kind]
        crop_size = _size(raw.get("crop_size", crop), True) if raw.get(
            "crop_size", crop) is not None else None
        return cls(
            kind=kind, size=_size(raw.get("size", size), square),
            resample=int(raw.get("resample", resample)),
            do_resize=bool(raw.get("do_resize", True)),
            do_center_crop=bool(raw.get("do_center_crop", center)),
            crop_size=(crop_size["height"], crop_size["width"]) if crop_size else None,
            do_rescale=bool(raw.get("do_rescale", True)),
            rescale_factor=float(raw.get("rescale_factor", 1 / 255)),
            do_normalize=bool(raw.get("do_normalize", True)),
            image_mean=tuple(float(x) for x in raw.get("image_mean") or mean),
            image_std=tuple(float(x) for x in raw.get("image_std") or std),
            crop_pct=float(raw.get("crop_pct") or 224 / 256))

    @classmethod
    def from_file(cls, path: str | Path) -> ImageProcessor:
        return cls.from_config(json.loads(Path(path).read_text()))

    @property
    def output_size(self) -> tuple[int, int] | None:
        """(height, width) of every processed image, or None where it follows the input."""
        if self.do_center_crop and self.crop_size:
            return self.crop_size
        if not self.do_resize:
            return None
        if "height" in self.size:
            return self.size["height"], self.size["width"]
        if self.kind == "ConvNextImageProcessor":
            edge = self.size["shortest_edge"]
            return edge, edge
        return None

    def _plan(self, w: int, h: int) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """For a w x h image: the resized (height, width), and the (height, width) of the
        centered window kept from it (None: all of it)."""
        crop = self.crop_size if self.do_center_crop and self.crop_size else None
        if not self.do_resize:
            return (h, w), crop
        if "height" in self.size:
            return (self.size["height"], self.size["width"]), crop
        edge = self.size["shortest_edge"]
        if self.kind == "ConvNextImageProcessor":
            if edge >= CONVNEXT_WARP_FROM:
                return (edge, edge), crop
            # ConvNeXT's own crop comes first; a crop_size one after it (never both in
            # practice) applies to an edge x edge image, so the window stays edge x edge.
            return _shortest(w, h, int(edge / self.crop_pct)), (edge, edge)
        return _shortest(w, h, edge), crop

    def resize(self, image: Any) -> np.ndarray:
        """One PIL image -> (H, W, 3) uint8: resized and center-cropped (ConvNeXT's crop, and
        `crop_size` where `do_center_crop`). Where the whole resized image would exceed
        WHOLE_RESIZE_MAX_FACTOR times the window kept, only the window is resampled
        (`_resize_window`): a 1 x 100,000 image resized to a shortest edge of 224 costs about
        a 224 x 224 image, not 224 x 22,400,000."""
        if getattr(image, "mode", "RGB") != "RGB":
            image = image.convert("RGB")
        w, h = image.size
        (rh, rw), crop = self._plan(w, h)
        if not self.do_resize:
            arr = np.asarray(image)
        elif crop is not None and rh * rw > WHOLE_RESIZE_MAX_FACTOR * crop[0] * crop[1]:
            return self._finish(self._resize_window(image, rh, rw, crop), crop)
        else:
            arr = np.asarray(image.resize((rw, rh), resample=self.resample))
        return self._finish(arr, crop) if crop is not None else arr

    def _finish(self, arr: np.ndarray, crop: tuple[int, int]) -> np.ndarray:
        out = center_crop(arr, *crop)   # pads where the image is smaller
        if self.do_center_crop and self.crop_size and crop != self.crop_size:
            out = center_crop(out, *self.crop_size)   # after ConvNeXT's own crop
        return out

    def _resize_window(self, image: Any, rh: int, rw: int, crop: tuple[int, int]) -> np.ndarray:
        """The centered `crop` window (clipped to rh x rw) of `image` resized to rh x rw, as
        uint8 (H, W, 3), resampling only that window. Pillow's order is kept (the horizontal
        pass, rounded to 8 bits, then the vertical one), each pass a ``resize(box=...)`` of
        one axis over the source rows the window reads (its filter's support): pixels equal
        a whole resize's but for a few that differ by one or two 8-bit levels (the box moves
        the filter's centers by a rounding error; tests/unit/build/test_image_resize.py)."""
        w, h = image.size
        top, bottom = _window(rh, crop[0])
        left, right = _window(rw, crop[1])
        sx, sy = w / rw, h / rh
        margin = math.ceil(FILTER_SUPPORT.get(self.resample, 3) * max(sy, 1.0)) + 2
        y0 = max(0, math.floor(top * sy) - margin)
        y1 = min(h, math.ceil(bottom * sy) + margin)
        rows = image.crop((0, y0, w, y1))
        rows = rows.resize((right - left, y1 - y0), resample=self.resample,
                           box=(left * sx, 0, right * sx, y1 - y0))
        out = rows.resize((right - left, bottom - top), resample=self.resample,
                          box=(0, top * sy - y0, right - left, bottom * sy - y0))
        return np.asarray(out)

    def __call__(self, images: Sequence[Any]) -> np.ndarray:
        """PIL images (or (H, W, 3) uint8 arrays) -> float32 (N, 3, H, W). Raises ValueError
        when the processed images differ in size (no fixed output size)."""
        from PIL import Image

        rows = []
        for img in images:
            if isinstance(img, np.ndarray):
                img = Image.fromarray(np.asarray(img, dtype=np.uint8))
            rows.append(self.resize(img))
        if len({r.shape for r in rows}) > 1:
            raise ValueError(f"processed images differ in size {sorted({r.shape for r in rows})}")
        batch = np.stack(rows) if rows else np.zeros((0, 1, 1, 3), np.uint8)
        x = (batch.astype(np.float64) * self.rescale_factor).astype(np.float32) \
            if self.do_rescale else batch.astype(np.float32)
        if self.do_normalize:
            x = (x - np.asarray(self.image_mean, np.float32)) / np.asarray(self.image_std,
                                                                           np.float32)
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32)


def _window(size: int, keep: int) -> tuple[int, int]:
    """[start, end) of the centered `keep` pixels of an axis of `size` (all of it where
    `size` is smaller: `center_crop` pads it then), as transformers' center_crop picks."""
    if size <= keep:
        return 0, size
    start = (size - keep) // 2
    return start, start + keep


def _shortest(w: int, h: int, short: int) -> tuple[int, int]:
    """(height, width) with the shorter edge `short` and the aspect ratio kept (the long
    edge truncated, as transformers' get_resize_output_image_size does)."""
    if w <= h:
        return int(short * h / w), short
    return short, int(short * w / h)


def center_crop(arr: np.ndarray, height: int, width: int) -> np.ndarray:
    """The centered (height, width) window of an (H, W, C) array, zero-padded around where
    the array is smaller (as transformers' center_crop)."""
    h, w = arr.shape[:2]
    top, left = (h - height) // 2, (w - width) // 2
    if top >= 0 and left >= 0:
        return arr[top:top + height, left:left + width]
    nh, nw = max(height, h), max(width, w)
    pad_top, pad_left = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    out = np.zeros((nh, nw, *arr.shape[2:]), dtype=arr.dtype)
    out[pad_top:pad_top + h, pad_left:pad_left + w] = arr
    top, left = top + pad_top, left + pad_left
    return out[max(0, top):min(nh, top + height), max(0, left):min(nw, left + width)]


__all__ = ["DEFAULTS", "ImageProcessor", "center_crop", "processor_type"]
