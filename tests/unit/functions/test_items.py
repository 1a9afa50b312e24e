"""Item types: the annotations an endpoint may declare, refused ones named at decorator time,
and what the container decodes each wire form into."""

from __future__ import annotations

import base64
import io
import typing
from typing import Annotated, Any

import numpy as np
import PIL.Image
import pytest

import floodway as fw
from floodway.functions import arrays, images
from floodway.functions.items import (
    MAX_IMAGE_PIXELS,
    PILLOW_MAX_IMAGE_PIXELS,
    ArraySpec,
    ImageSpec,
    ItemTypeError,
    item_decoder,
    sample_item,
    spec_of,
)

app = fw.App("items")
MODEL = None   # no task: any item type (a task's own items: test_task_items.py)


def endpoint(fn, name=None):
    return app.endpoint(model=MODEL, name=name or f"ep{len(app.endpoints)}")(fn)


def test_our_pixel_limits_stay_under_pillows_own():
    assert PILLOW_MAX_IMAGE_PIXELS == PIL.Image.MAX_IMAGE_PIXELS
    assert MAX_IMAGE_PIXELS <= PILLOW_MAX_IMAGE_PIXELS
    with pytest.raises(ItemTypeError, match="max_pixels: an integer in"):
        ImageSpec(max_pixels=PILLOW_MAX_IMAGE_PIXELS + 1)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ItemTypeError):
            ImageSpec(max_encoded_bytes=bad)


def test_array_spellings():
    t = fw.Array[np.float32, (3, None)]
    assert typing.get_origin(t) is Annotated and typing.get_args(t)[0] is np.ndarray
    assert spec_of(t) == ArraySpec("float32", (3, None)) == ArraySpec(np.dtype("f4"), [3, None])
    assert spec_of(fw.Array["uint8", 5]).shape == (5,)
    assert spec_of(t).describe() == "a float32 array of shape (3, *)"
    assert spec_of(fw.Array[np.int64, ()]).describe() == "an int64 array of shape ()"
    for bad in ((np.complex64, (3,)), (np.float32, (3.5,)), (np.float32, (-1,)), ("f4",),
                (object, (1,))):
        with pytest.raises(ItemTypeError):
            fw.Array[bad]
    with pytest.raises(ItemTypeError, match="an annotation"):
        fw.Array()


def test_fw_image_is_a_pil_image_with_the_default_limits():
    assert typing.get_args(fw.Image)[0] is PIL.Image.Image
    assert spec_of(fw.Image) == ImageSpec()
    tighter = Annotated[fw.Image, ImageSpec(max_pixels=100)]
    assert spec_of(tighter) == ImageSpec(max_pixels=100)   # the last spec wins


def test_item_types_are_accepted_at_decorator_time_and_keep_their_spec():
    def pairs(model, inputs: list[tuple[str, str]]) -> list[float]: ...
    def pics(model, inputs: list[fw.Image]) -> list[dict]: ...
    def grids(model, inputs: list[fw.Array[np.float32, (3, 224, 224)]]) -> list: ...
    def typed(model, inputs: list[Annotated[np.ndarray, fw.ArraySpec("int64", (None,))]]): ...
    def texts(model, inputs: list[str]): ...
    def anything(model, inputs): ...
    def nested(model, inputs: list[dict[str, list[int | None]]]): ...

    got = {f.__name__: endpoint(f).input_type
           for f in (pairs, pics, grids, typed, texts, anything, nested)}
    assert got["pairs"] == tuple[str, str] and got["texts"] is str and got["anything"] is Any
    assert spec_of(got["pics"]) == ImageSpec()
    assert spec_of(got["grids"]) == ArraySpec("float32", (3, 224, 224))
    assert spec_of(got["typed"]) == ArraySpec("int64", (None,))


LAZY = '''
from __future__ import annotations
import numpy as np
import PIL.Image
import floodway as fw

def fn(model, rows: {ann}) -> list:
    return rows
'''


@pytest.mark.parametrize("ann,why", [
    ("list[set]", "set has no JSON wire form"),
    ("list[bytes]", "bytes do not travel in JSON"),
    ("list[np.ndarray]", "needs its dtype and shape: fw.Array["),
    ("list[PIL.Image.Image]", "an image item is fw.Image"),
    ("list[dict[int, str]]", "dict keys must be str"),
    ("list[tuple[str, set]]", "set has no JSON wire form"),
    ("list[fw.Array[np.complex64, (3,)]]", "an array dtype, one of bool"),
    ("list[fw.Array[np.float32]]", "fw.Array[dtype, shape]"),
])
def test_unsupported_item_types_are_refused_naming_endpoint_and_field(ann, why):
    ns: dict = {}
    exec(LAZY.format(ann=ann), ns)   # lazy annotations: evaluated by the decorator
    with pytest.raises(fw.ConfigError) as info:
        app.endpoint(model=MODEL, name="refused")(ns["fn"])
    msg = str(info.value)
    assert "endpoint 'refused': function.rows = " in msg and why in msg
    assert "refused" not in app.endpoints


def png(img: PIL.Image.Image, fmt="PNG", **save) -> str:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **save)
    return base64.b64encode(buf.getvalue()).decode()


def test_the_container_decodes_images_to_upright_rgb():
    def pics(model, inputs: list[fw.Image]): ...

    decode = item_decoder(pics)
    for mode in ("RGBA", "L", "P", "RGB"):
        out = decode(png(PIL.Image.new(mode, (6, 4))))
        assert isinstance(out, PIL.Image.Image) and out.mode == "RGB" and out.size == (6, 4)
    sideways = PIL.Image.new("RGB", (6, 4), (200, 10, 10))
    exif = sideways.getexif()
    exif[images.EXIF_ORIENTATION] = 6   # "rotate 90 CW to view"
    out = decode(png(sideways, "JPEG", exif=exif.tobytes()))
    assert out.size == (4, 6)


def test_the_container_decodes_arrays_pairs_and_leaves_text_alone():
    def grids(model, inputs: list[fw.Array[np.float16, (2, None)]]): ...
    def pairs(model, inputs: list[tuple[str, str]]): ...
    def texts(model, inputs: list[str]): ...
    def anything(model, inputs): ...

    wire = arrays.to_wire(np.arange(6, dtype=np.float16).reshape(2, 3))
    arr = item_decoder(grids)(wire)
    assert arr.dtype == np.float16 and arr.shape == (2, 3) and arr.flags.writeable
    assert arr.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert item_decoder(grids)([[1, 2], [3, 4]]).dtype == np.float16   # nested lists too
    assert item_decoder(pairs)(["q", "p"]) == ("q", "p")
    assert item_decoder(texts) is None and item_decoder(anything) is None


def test_sample_items_for_a_warm_up():
    def pics(model, inputs: list[fw.Image]): ...
    def grids(model, inputs: list[fw.Array[np.uint8, (None, 3)]]): ...
    def pairs(model, inputs: list[tuple[str, str]]): ...
    def models(model, inputs: list[dict[str, int]]): ...

    assert sample_item(pics).mode == "RGB"
    assert sample_item(grids).shape == (1, 3) and sample_item(grids).dtype == np.uint8
    assert sample_item(pairs) == ("warm-up", "warm-up")
    assert sample_item(models) is None
