"""Image items: the router reads headers only, the container decodes (a truncated image
fails there), and 16-bit grayscale is scaled to 8 bits, not clipped."""

from __future__ import annotations

import base64
import io

import numpy as np
import PIL.Image
import pytest
from pydantic_core import PydanticCustomError

from floodway.functions.images import validate
from floodway.functions.items import BAD_ITEM, DECODE, WIRE, ImageSpec


def test_a_16_bit_grayscale_png_is_scaled_to_8_bits():
    values = np.array([[0, 256, 32768, 65535]], dtype=np.uint16)
    buf = io.BytesIO()
    PIL.Image.fromarray(values).save(buf, format="PNG")
    opened = PIL.Image.open(io.BytesIO(buf.getvalue()))
    assert opened.mode.startswith("I")   # a 16-bit PNG, as Pillow opens it
    img = validate(base64.b64encode(buf.getvalue()).decode(), ImageSpec(), DECODE)
    assert img.mode == "RGB"
    assert np.asarray(img)[0, :, 0].tolist() == [0, 1, 128, 255]
    assert (np.asarray(img) == np.asarray(img)[..., :1]).all()   # gray: R = G = B


def test_an_8_bit_grayscale_png_is_unchanged():
    buf = io.BytesIO()
    PIL.Image.fromarray(np.array([[0, 7, 128, 255]], dtype=np.uint8)).save(buf, format="PNG")
    img = validate(base64.b64encode(buf.getvalue()).decode(), ImageSpec(), DECODE)
    assert np.asarray(img)[0, :, 1].tolist() == [0, 7, 128, 255]


def _file(fmt: str, size: tuple[int, int], noise: bool = False) -> bytes:
    img = PIL.Image.effect_noise(size, 60) if noise else PIL.Image.new("RGB", size, 90)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize("raw,needle", [
    (_file("PNG", (32, 24))[:-40], "a corrupt or truncated PNG image of 32x24"),
    (_file("JPEG", (64, 64), noise=True)[:-900], "a corrupt or truncated JPEG image of 64x64"),
])
def test_a_truncated_image_passes_the_router_and_fails_its_decode(raw, needle):
    """The router reads headers only (whole here); the container's decode finds the missing
    data, and that item fails alone (`floodway.runtime.calling.decode_inputs`)."""
    text = base64.b64encode(raw).decode()
    assert validate(text, ImageSpec(), WIRE) == text
    with pytest.raises(PydanticCustomError) as e:
        validate(text, ImageSpec(), DECODE)
    assert e.value.type == BAD_ITEM and needle in str(e.value)


def test_a_broken_header_is_still_refused_by_the_router():
    raw = _file("JPEG", (64, 64))[:300]
    with pytest.raises(PydanticCustomError, match="a corrupt or truncated image"):
        validate(base64.b64encode(raw).decode(), ImageSpec(), WIRE)
