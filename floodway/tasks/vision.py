"""Image tasks: image-classification. The graph takes ``pixel_values`` float32
(batch, channels, H, W), H and W fixed by the model's preprocessor_config.json; serving
preprocesses PIL RGB images with numpy and Pillow (`floodway.tasks.image_processing`), which
the build checks against transformers' own image processor on sample images.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floodway.errors import BuildError
from floodway.tasks.base import BuildContext, Case, IOSpec, Task
from floodway.tasks.image_processing import ImageProcessor

CONFIG = "preprocessor_config.json"
# Sample image sizes (width, height) for parity and the preprocessing check: landscape,
# square, portrait, and one smaller than a typical crop (padded).
SAMPLE_SIZES = ((57, 41), (32, 32), (20, 90), (12, 9))
# Largest difference allowed between our preprocessing and transformers' (float32 rounding).
PREPROCESS_ATOL = 1e-5


def sample_images(n: int, seed: int = 0) -> list[Any]:
    """`n` seeded random RGB PIL images of SAMPLE_SIZES (cycled)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
            for w, h in (SAMPLE_SIZES[i % len(SAMPLE_SIZES)] for i in range(n))]


@dataclass(frozen=True)
class ImageTask(Task):
    def required_files(self) -> tuple[tuple[str, ...], ...]:
        return (("config.json",), (CONFIG,))

    def publish_files(self) -> tuple[str, ...]:
        return (CONFIG, "config.json")

    def processor(self, ctx: BuildContext) -> ImageProcessor:
        if "processor" not in ctx.cache:
            assert ctx.folder is not None
            try:
                ctx.cache["processor"] = ImageProcessor.from_file(ctx.folder / CONFIG)
            except ValueError as e:
                raise BuildError("export", f"{CONFIG}: {e}") from e
        return ctx.cache["processor"]

    def graph_inputs(self, ctx: BuildContext) -> tuple[IOSpec, ...]:
        size = self.processor(ctx).output_size
        if size is None:
            raise BuildError("export", f"{CONFIG} gives images of varying size (no crop or "
                                       "fixed size): floodway exports one image size")
        assert ctx.folder is not None
        channels = json.loads((ctx.folder / "config.json").read_text()).get("num_channels", 3)
        return (IOSpec("pixel_values", "float32", ("batch", int(channels), *size)),)

    def parity_cases(self, ctx: BuildContext, max_seq_len: int) -> list[Case]:
        """One image, and a batch of up to 3 of different sizes, preprocessed as served."""
        proc, rows = self.processor(ctx), min(3, ctx.build.max_batch_rows)
        return [Case(label, {"pixel_values": proc(sample_images(n, seed=n))}, n)
                for label, n in (("one", 1), ("batch", rows))]

    def extra_checks(self, ctx: BuildContext) -> list[dict[str, Any]]:
        """Our preprocessing vs transformers' image processor (its PIL backend) on sample
        images. Raises BuildError('verify') beyond PREPROCESS_ATOL."""
        from transformers import AutoImageProcessor

        assert ctx.folder is not None
        theirs = AutoImageProcessor.from_pretrained(str(ctx.folder), backend="pil")
        images = sample_images(len(SAMPLE_SIZES), seed=7)
        want = np.stack([np.asarray(theirs(images=[im])["pixel_values"][0]) for im in images])
        got = self.processor(ctx)(images)
        err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
        if not err <= PREPROCESS_ATOL:
            raise BuildError("verify", f"the image preprocessing differs from transformers' "
                                       f"{type(theirs).__name__} by {err:.3g} (shapes "
                                       f"{got.shape} vs {want.shape}; tolerance "
                                       f"{PREPROCESS_ATOL:g})")
        return [{"graph": "preprocess", "case": type(theirs).__name__, "rows": len(images),
                 "outputs": ["pixel_values"], "max_abs_err": err, "atol": PREPROCESS_ATOL,
                 "passed": True}]

    def sample_item(self, model: Any) -> Any:
        """A gray 64x64 RGB image."""
        from PIL import Image

        return Image.new("RGB", (64, 64), (128, 128, 128))

    def prepare(self, model: Any, items: Sequence[Any]) -> dict[str, np.ndarray]:
        """PIL RGB images -> `model.preprocess_images`."""
        return model.preprocess_images(items)


IMAGE_CLASSIFICATION = ImageTask("image-classification", "image",
                                 "AutoModelForImageClassification", ("logits",),
                                 files_dir="processor", labelled=True)

__all__ = ["IMAGE_CLASSIFICATION", "PREPROCESS_ATOL", "SAMPLE_SIZES", "ImageTask",
           "sample_images"]
