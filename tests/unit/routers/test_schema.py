"""Wire format validation: each bad body gets a 4xx whose message names the problem."""

import base64
import io
import json
import struct
import zlib
from typing import Annotated, Any

import numpy as np
import PIL.Image
import pytest
from pydantic import BaseModel

import floodway as fw
from floodway.errors import RequestError
from floodway.functions import images
from floodway.functions.prompts import Prompt
from floodway.routers.schema import error_body, parse_predict


def err(body: bytes, item_type: Any = str) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_predict(body, item_type)
    return info.value


def test_valid_inputs_pass_through():
    assert parse_predict(b'{"inputs": ["a", "b"]}', str) == ["a", "b"]
    assert parse_predict(b'{"inputs": [[1, 2.5]]}', list[float]) == [[1.0, 2.5]]


@pytest.mark.parametrize("body,status,needle,field", [
    (b'{"inputs": ["a",', 400, "not valid JSON", None),
    (b"\xff\xfe", 400, "not valid JSON", None),
    (b'["a"]', 400, "must be a JSON object", None),
    (b"{}", 422, "missing required field 'inputs'", "inputs"),
    (b'{"input": ["a"]}', 422, "missing required field 'inputs'", "inputs"),
    (b'{"inputs": ["a"], "extra": 1}', 422, "unknown field 'extra'", "extra"),
    (b'{"inputs": "a"}', 422, "inputs: Input should be a valid list", "inputs"),
    (b'{"inputs": []}', 422, "'inputs' is empty", "inputs"),
    # The first bad item is the answer; the items after it are not looked at.
    (b'{"inputs": ["a", 3, null]}', 422, "inputs[1]: Input should be a valid string, got 3",
     "inputs[1]"),
])
def test_bad_bodies(body, status, needle, field):
    e = err(body)
    assert e.status == status
    assert needle in str(e)
    assert e.field == field


def test_long_bad_item_is_truncated_in_message():
    e = err(b'{"inputs": [{"k": "' + b"x" * 500 + b'"}]}')
    assert len(str(e)) < 200 and str(e).endswith("...")


def test_error_body_shape():
    assert error_body("invalid_request", "m", "inputs") == {
        "error": {"type": "invalid_request", "message": "m", "field": "inputs"}}
    assert error_body("unavailable", "m") == {"error": {"type": "unavailable", "message": "m"}}


def test_too_many_inputs_is_413_naming_the_limit():
    with pytest.raises(RequestError) as info:
        parse_predict(b'{"inputs": ["a", "b", "c"]}', str, max_inputs=2)
    assert info.value.status == 413 and "has 3 items" in str(info.value)
    assert "at most 2 per request" in str(info.value)
    assert parse_predict(b'{"inputs": ["a", "b"]}', str, max_inputs=2) == ["a", "b"]


def test_lone_surrogate_is_422_naming_the_item():
    e = err(b'{"inputs": ["ok", "\\ud800"]}')
    assert e.status == 422 and e.field == "inputs[1]" and "not valid Unicode" in str(e)


def test_deep_nesting_is_400():
    e = err(b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert e.status == 400 and "nested too deeply" in str(e)


def test_a_huge_integer_is_a_plain_400():
    from floodway.errors import RequestError
    from floodway.routers.schema import parse_predict

    with pytest.raises(RequestError) as info:
        parse_predict(b'{"inputs": [' + b"9" * 5000 + b"]}", str, max_inputs=8)
    assert info.value.status == 400 and "too many digits" in str(info.value)
    assert "sys.set_int_max_str_digits" not in str(info.value)


def test_too_many_items_are_refused_before_any_item_is_validated():
    # 200,000 items that are not strings: validated one by one they would be a 422 naming
    # inputs[0]; counted first, they are a 413 (and cost one look, not 200,000 checks).
    many = b'{"inputs": [' + b",".join([b"[]"] * 200_000) + b"]}"
    with pytest.raises(RequestError) as e:
        parse_predict(many, str, max_inputs=256)
    assert e.value.status == 413 and "200000 items" in str(e.value)
    keys = b"{" + b",".join(b'"k%d": 1' % i for i in range(50_000)) + b', "inputs": ["a"]}'
    e2 = err(keys)
    assert e2.status == 422 and "unknown field 'k0'" in str(e2) and e2.field == "k0"


def test_a_body_that_is_not_an_object_names_the_json_type():
    assert "got array" in str(err(b'["a"]'))
    assert "got null" in str(err(b"null"))
    assert "got string" in str(err(b'"a"'))


# ---------------------------------------------------------------- item types (wire formats)

def png_declaring(width: int, height: int, rows: int = 8) -> bytes:
    """A PNG whose header declares `width` x `height` 1-bit pixels and whose data holds only
    its first `rows` (Pillow refuses it from the header): a decompression bomb in a few KB."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    row = b"\x00" * (1 + (width + 7) // 8)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0,
                                                               0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * rows, 9)) + chunk(b"IEND", b""))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def image_file(fmt: str = "PNG", size=(32, 24), noise: bool = False) -> bytes:
    img = PIL.Image.effect_noise(size, 60) if noise else PIL.Image.new("RGB", size, 90)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def body(*items) -> bytes:
    return json.dumps({"inputs": list(items)}).encode()


def refused(items: tuple, item_type: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_predict(body(*items), item_type)
    return info.value


GOOD = b64(image_file())


def test_good_images_pass_as_their_base64_text():
    jpeg, gif = b64(image_file("JPEG")), b64(image_file("GIF"))
    wrapped = "\n".join(GOOD[i:i + 76] for i in range(0, len(GOOD), 76))   # `base64 FILE`
    got = parse_predict(body(GOOD, "data:image/png;base64," + GOOD, jpeg, wrapped,
                             GOOD.rstrip("=")), fw.Image)
    assert got == [GOOD, GOOD, jpeg, GOOD, GOOD]
    if "WEBP" in images.formats():
        webp = b64(image_file("WEBP"))
        assert parse_predict(body(webp), fw.Image) == [webp]
    e = refused((GOOD, gif), fw.Image)   # a real image, but not a format we open
    assert (e.status, e.field) == (422, "inputs[1]") and "not a PNG, JPEG" in str(e)


@pytest.mark.parametrize("item,status,needle", [
    (3, 422, "expected base64 text of a PNG, JPEG"),
    (["a"], 422, "got array"),
    ("not base64 at all!", 422, "not valid base64"),
    (b64(b"plain text, not an image"), 422, "not a PNG, JPEG"),
    ("data:text/plain;base64," + GOOD, 422, "a data URL must read data:image/"),
    # Headers cut short; a body cut short decodes (and fails alone) in the container.
    (b64(image_file("JPEG", (64, 64))[:300]), 422, "a corrupt or truncated image"),
    (b64(png_declaring(50_000, 50_000)), 413, "declares 2,500,000,000 pixels; the limit is "
                                              "40,000,000 (a decompression bomb?)"),
    (b64(png_declaring(8_000, 6_000)), 413, "8000x6000 = 48,000,000 pixels; the limit is "
                                            "40,000,000"),
])
def test_bad_images_are_refused_naming_the_item(item, status, needle):
    e = refused((GOOD, GOOD, GOOD, item), fw.Image)
    assert (e.status, e.field) == (status, "inputs[3]")
    assert str(e).startswith("inputs[3]: ") and needle in str(e)


def test_the_decompression_bomb_is_a_few_kb_that_pillow_itself_refuses():
    bomb = png_declaring(50_000, 50_000)
    assert len(bomb) < 4096
    with pytest.raises(PIL.Image.DecompressionBombError):
        PIL.Image.open(io.BytesIO(bomb))


def test_image_limits_are_configurable():
    small = Annotated[PIL.Image.Image, fw.ImageSpec(max_encoded_bytes=100, max_pixels=500)]
    e = refused((b64(image_file(size=(10, 10))), b64(image_file(size=(400, 300)))), small)
    assert (e.status, e.field) == (413, "inputs[1]")
    assert "the image is" in str(e) and "bytes; the limit is 100" in str(e)
    e = refused((b64(image_file(size=(30, 30))),), Annotated[fw.Image, fw.ImageSpec(
        max_pixels=500)])
    assert e.status == 413 and "30x30 = 900 pixels; the limit is 500" in str(e)


def test_text_pairs():
    # Validated, then kept as JSON (a list): the container hands the function tuples.
    assert parse_predict(body(["q", "p"], ["a", "b"]), tuple[str, str]) == [["q", "p"],
                                                                             ["a", "b"]]
    for item, needle in ((["q"], "expected a JSON array of 2 items [str, str], got ['q']"),
                         (["q", "p", "x"], "2 items [str, str], got ['q', 'p', 'x']"),
                         ("q p", "2 items [str, str], got 'q p'"),
                         ({"q": "p"}, "2 items [str, str]")):
        e = refused((["ok", "ok"], item), tuple[str, str])
        assert (e.status, e.field) == (422, "inputs[1]") and needle in str(e)
    e = refused((["ok", "ok"], ["q", 3]), tuple[str, str])
    assert (e.status, e.field) == (422, "inputs[1][1]") and "valid string" in str(e)


GRID = fw.Array[np.float32, (2, 3)]


def test_arrays_pass_in_their_b64_form():
    (got,) = parse_predict(body([[1, 2, 3], [4, 5.5, 6]]), GRID)
    assert got["dtype"] == "float32" and got["shape"] == [2, 3]
    assert np.frombuffer(base64.b64decode(got["b64"]), "<f4").tolist() == [1, 2, 3, 4, 5.5, 6]
    assert parse_predict(body(got), GRID) == [got]   # the b64 form is taken as it is
    rows = fw.Array[np.uint8, (None, 2)]
    assert parse_predict(body([[1, 2]] * 5), rows)[0]["shape"] == [5, 2]


@pytest.mark.parametrize("item,needle", [
    ("text", 'a nested list of numbers or {"b64", "dtype", "shape"}, got string'),
    ([[1, 2, 3], [4, 5]], "got a ragged nested list"),
    ([[1, 2, 3]], "got shape (1, 3)"),
    ([1, 2, 3, 4, 5, 6], "got shape (6,)"),
    ([[1, 2, 3], [4, "5", 6]], "got strings"),
    ([[1, 2, 3], [4, None, 6]], "got nulls"),
    ([[1, 2, 3], [4, 5, 1e39]], "beyond float32's range"),
    ({"b64": b64(bytes(24)), "dtype": "float64", "shape": [2, 3]}, "got dtype 'float64'"),
    ({"b64": b64(bytes(20)), "dtype": "float32", "shape": [2, 3]}, "'b64' holds 20 bytes"),
    ({"b64": b64(bytes(24)), "dtype": "float32", "shape": [3, 2]}, "got shape (3, 2)"),
    ({"b64": "%%%", "dtype": "float32", "shape": [2, 3]}, "'b64' is not valid base64"),
    ({"data": [1]}, "got an object with keys ['data']"),
])
def test_bad_arrays_are_422_naming_the_item_and_what_was_expected(item, needle):
    e = refused(([[0, 0, 0], [0, 0, 0]], item), GRID)
    assert (e.status, e.field) == (422, "inputs[1]")
    assert str(e).startswith("inputs[1]: expected a float32 array of shape (2, 3)")
    assert needle in str(e)


def test_structured_items_travel_as_plain_json():
    class Query(BaseModel):
        text: str
        top_k: int = 3

    got = parse_predict(body({"text": "q"}, {"text": "r", "top_k": "5"}), Query)
    assert got == [{"text": "q", "top_k": 3}, {"text": "r", "top_k": 5}]
    assert json.loads(json.dumps(got)) == got
    mixed = tuple[fw.Image, str]
    assert parse_predict(body(["data:image/png;base64," + GOOD, "caption"]), mixed) == [
        [GOOD, "caption"]]
    e = refused(([GOOD, "ok"], ["%%%", "bad"]), mixed)
    assert (e.status, e.field) == (422, "inputs[1][0]") and "not valid base64" in str(e)


def test_integer_arrays_take_integers_in_range_only():
    ints = fw.Array[np.uint8, (3,)]
    assert parse_predict(body([0, 255, 7]), ints)[0]["b64"] == b64(bytes([0, 255, 7]))
    assert "got non-integer numbers" in str(refused(([1, 2.5, 3],), ints))
    assert "got 256, out of uint8's range [0, 255]" in str(refused(([1, 256, 3],), ints))
    assert "got booleans" in str(refused(([True, False, True],), ints))
    flags = fw.Array[np.bool_, (2,)]
    assert parse_predict(body([True, False]), flags)[0]["b64"] == b64(b"\x01\x00")


@pytest.mark.parametrize("item_type, raw, field", [
    (tuple[str, str], b'[["ok", "b"], ["\\ud800", "b"]]', "inputs[1][0]"),
    (Any, b'["ok", {"\\udc00": 1}]', "inputs[1]"),             # a key: the object holding it
    (Any, b'["ok", {"k": ["x", "\\udfff"]}]', "inputs[1].k[1]"),
    (dict[str, Any], b'[{"k": 1}, {"a": {"b": "\\ud83d"}}]', "inputs[1].a.b"),
    (Prompt, b'[{"prompt": "a"}, {"messages": [{"role": "user", "content": "x\\ud800"}]}]',
     "inputs[1].messages[0].content"),
])
def test_a_lone_surrogate_at_any_depth_is_422_naming_the_string(item_type, raw, field):
    e = err(b'{"inputs": ' + raw + b"}", item_type)
    assert (e.status, e.field) == (422, field) and "not valid Unicode" in str(e)
    assert str(e).startswith(field + ": ")
    assert str(e).count("inputs[") == 1   # the path is told once, in the field
    # A surrogate pair (an emoji written as two escapes) is valid Unicode, at any depth.
    assert parse_predict(b'{"inputs": [{"k": ["\\ud83d\\ude00"]}]}', Any) == [{"k": ["\U0001F600"]}]


def test_items_are_validated_in_order_and_the_first_bad_one_stops_the_rest():
    seen = []

    def check(x):
        seen.append(x)
        if x == "bad":
            raise ValueError("bad item")
        return x

    from pydantic import AfterValidator

    checked = Annotated[str, AfterValidator(check)]
    e = err(body("a", "bad", "expensive", "later"), checked)
    assert (e.status, e.field) == (422, "inputs[1]") and "bad item" in str(e)
    assert seen == ["a", "bad"]   # the items after the first bad one were never validated
    # A surrogate in a later item does not hide an earlier bad item, nor the reverse.
    e = err(b'{"inputs": ["a", "bad", "\\ud800"]}', checked)
    assert e.field == "inputs[1]"
    e = err(b'{"inputs": ["a", "\\ud800", "bad"]}', checked)
    assert e.field == "inputs[1]" and "not valid Unicode" in str(e)


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(literal):
    e = err(b'{"inputs": [[1.0, ' + literal + b"]]}", list[float])
    assert e.status == 400 and "not valid JSON" in str(e)
    assert literal.lstrip(b"-").decode() in str(e)


def test_a_misspelled_inputs_names_both_fields():
    with pytest.raises(RequestError) as info:
        parse_predict(b'{"input": ["a"]}')
    assert info.value.status == 422 and info.value.field == "inputs"
    assert str(info.value) == ("missing required field 'inputs' (and 'input' is not a field): "
                               'send {"inputs": [...]}')


def test_a_number_past_a_floats_range_is_a_400_not_an_infinity():
    for body in (b'{"inputs": [1e999]}', b'{"inputs": [-1e999]}', b'{"inputs": [[1, 2e400]]}'):
        with pytest.raises(RequestError) as e:
            parse_predict(body, Any, max_inputs=8)
        assert e.value.status == 400 and "past a 64-bit float's range" in str(e.value)
    assert parse_predict(b'{"inputs": [1.5e300, -0.0]}', float, max_inputs=8) == [1.5e300, 0.0]
