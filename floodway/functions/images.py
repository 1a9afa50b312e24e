"""Image items: `Image` (the annotation) and `validate`, which the router runs to verify an
item (`WIRE`: the image is decoded once, then dropped; the base64 text goes on) and the
container runs to decode it (`DECODE`: a PIL image in mode RGB, upright).

The order of the checks keeps a hostile item cheap: the base64 text's size, then the file's
header (width x height against the pixel limit, before any pixel is decoded), then the full
decode. Pillow opens PNG, JPEG and WebP only (`Image.open(formats=...)`), never its other
decoders.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import re
from typing import Annotated, Any

import PIL.Image
from PIL import ImageOps, UnidentifiedImageError, features

from floodway.functions.items import DECODE, ImageSpec, bad, too_large

Image = Annotated[PIL.Image.Image, ImageSpec()]

EXIF_ORIENTATION = 0x0112   # the EXIF tag that says how a camera held the image
_PIXELS_RE = re.compile(r"\((\d+) pixels\)")   # in Pillow's DecompressionBombError message
_WS_RE = re.compile(r"\s")


@functools.cache
def formats() -> tuple[str, ...]:
    """The Pillow formats an image item may be: PNG and JPEG, and WebP where Pillow was
    built with libwebp (`PIL.features.check("webp")`)."""
    return ("PNG", "JPEG", "WEBP") if features.check("webp") else ("PNG", "JPEG")


def _names() -> str:
    f = [n if n != "WEBP" else "WebP" for n in formats()]
    return ", ".join(f[:-1]) + " or " + f[-1]


def _wanted() -> str:
    return f"base64 text of a {_names()} file, or a data URL data:image/...;base64,..."


def _base64_text(value: Any) -> str:
    """The base64 text of an item: a data URL's payload, without whitespace (`base64 FILE`
    wraps its lines), with the padding some encoders leave out."""
    if not isinstance(value, str):
        kind = {bool: "boolean", int: "number", float: "number", list: "array",
                dict: "object"}.get(type(value), "null")
        raise bad(f"expected {_wanted()}, got {kind}")
    text = value
    if text.startswith("data:"):
        head, sep, payload = text.partition(",")
        if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
            raise bad(f"a data URL must read data:image/<png|jpeg|webp>;base64,<text>, got "
                      f"{head[:40]!r}")
        text = payload
    if _WS_RE.search(text):
        text = _WS_RE.sub("", text)
    if len(text) % 4:
        text += "=" * (-len(text) % 4)
    return text


def file_bytes(value: Any, spec: ImageSpec) -> tuple[bytes, str]:
    """(the image file's bytes, its plain base64 text) of an item. Raises `too_large` over
    `spec.max_encoded_bytes`, `bad` for what is not base64."""
    text = _base64_text(value)
    size = len(text) // 4 * 3 - text[-2:].count("=")
    if size > spec.max_encoded_bytes:
        raise too_large(f"the image is {size:,} bytes; the limit is "
                        f"{spec.max_encoded_bytes:,}")
    altchars = b"-_" if ("-" in text or "_" in text) else None   # URL-safe base64
    try:
        raw = base64.b64decode(text, altchars=altchars, validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(f"not valid base64 ({e}): expected {_wanted()}") from None
    if not raw:
        raise bad(f"an empty image: expected {_wanted()}")
    return raw, text


def _bomb(e: Exception, spec: ImageSpec) -> Exception:
    m = _PIXELS_RE.search(str(e))
    declared = f"{int(m.group(1)):,} pixels" if m else "more pixels than Pillow opens"
    return too_large(f"the image declares {declared}; the limit is {spec.max_pixels:,} "
                     "(a decompression bomb?)")


def open_verified(raw: bytes, spec: ImageSpec) -> PIL.Image.Image:
    """The image in `raw`, fully decoded. Raises `too_large` when its header declares more
    than `spec.max_pixels`, `bad` when it is not one of `formats()` or is corrupt or
    truncated."""
    try:
        img = PIL.Image.open(io.BytesIO(raw), formats=formats())
    except PIL.Image.DecompressionBombError as e:
        raise _bomb(e, spec) from None
    except UnidentifiedImageError:
        raise bad(f"not a {_names()} image ({len(raw):,} bytes starting {raw[:8]!r})") \
            from None
    except Exception as e:  # noqa: BLE001 - a plugin may raise anything on a broken header
        raise bad(f"a corrupt or truncated image ({type(e).__name__}: {e})") from None
    w, h = img.size
    if w * h > spec.max_pixels:
        img.close()
        raise too_large(f"the image is {w}x{h} = {w * h:,} pixels; the limit is "
                        f"{spec.max_pixels:,}")
    try:
        img.load()
    except PIL.Image.DecompressionBombError as e:
        raise _bomb(e, spec) from None
    except Exception as e:  # noqa: BLE001 - truncated or corrupt data, whatever the decoder
        raise bad(f"a corrupt or truncated {img.format} image of {w}x{h} "
                  f"({type(e).__name__}: {e})") from None
    return img


def upright_rgb(img: PIL.Image.Image) -> PIL.Image.Image:
    """`img` turned per its EXIF orientation (`ImageOps.exif_transpose`) and converted to
    RGB (alpha dropped, palettes and grayscale expanded); no copy when it already is."""
    if img.getexif().get(EXIF_ORIENTATION, 1) != 1:
        img = ImageOps.exif_transpose(img)
    return img if img.mode == "RGB" else img.convert("RGB")


def validate(value: Any, spec: ImageSpec, mode: str) -> Any:
    """One image item: `DECODE` -> the PIL image in RGB; otherwise (`WIRE`) the item
    verified -> its plain base64 text. Raises PydanticCustomError (`bad`, `too_large`)."""
    raw, text = file_bytes(value, spec)
    img = open_verified(raw, spec)
    if mode == DECODE:
        return upright_rgb(img)
    img.close()
    return text


def encode(img: PIL.Image.Image, fmt: str = "PNG") -> str:
    """`img` as base64 text of a `fmt` file: an image item's wire form (clients, tests)."""
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode("ascii")


__all__ = ["EXIF_ORIENTATION", "Image", "encode", "file_bytes", "formats", "open_verified",
           "upright_rgb", "validate"]
