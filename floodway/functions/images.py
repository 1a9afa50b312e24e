"""Image items: `Image` (the annotation) and `validate`, which the router runs to verify an
item (`WIRE`: from the file's header only; the base64 text goes on) and the container runs to
decode it (`DECODE`: a PIL image in mode RGB, upright).

The order of the checks keeps a hostile item cheap: the base64 text's size, then the file's
header (its format, and width x height against the pixel limit; no pixel decoded), then the
pixels summed over the request (router) or the batch (container) in a `pixel_tally`, and
only in the container the full decode, where a corrupt or truncated image fails its own item
alone. Pillow opens PNG, JPEG and WebP only (`Image.open(formats=...)`), never its other
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

from floodway.functions.items import DECODE, ImageSpec, bad, tally_pixels, too_large

Image = Annotated[PIL.Image.Image, ImageSpec()]

EXIF_ORIENTATION = 0x0112   # the EXIF tag that says how a camera held the image
# Pillow's modes of grayscale wider than 8 bits (a 16-bit PNG opens as "I" or "I;16").
WIDE_GRAY = ("I", "I;16", "I;16B", "I;16L")
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


def open_header(raw: bytes, spec: ImageSpec) -> PIL.Image.Image:
    """The image in `raw`, opened from its header only (no pixel decoded). Raises
    `too_large` when it declares more than `spec.max_pixels`, `bad` when it is not one of
    `formats()` or its header is broken."""
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
    return img


def _charge(img: PIL.Image.Image, spec: ImageSpec, mode: str) -> None:
    """Count `img`'s pixels in the current `pixel_tally` (a request's on the router, a
    batch's in the container). Raises `too_large` (and closes `img`) past its limit."""
    w, h = img.size
    total = tally_pixels(w * h)
    limit = spec.batch_pixels if mode == DECODE else spec.request_pixels
    if total is None or total <= limit:
        return
    img.close()
    if mode == DECODE:
        raise too_large(f"the images of this batch would hold {total:,} pixels decoded with "
                        f"this {w}x{h} one; the limit is {limit:,} (ImageSpec."
                        "max_batch_pixels): send it again in a smaller request")
    raise too_large(f"the request's images hold {total:,} pixels up to this {w}x{h} one; "
                    f"the limit per request is {limit:,} (ImageSpec.max_request_pixels): "
                    "split the request")


def load(img: PIL.Image.Image, spec: ImageSpec) -> PIL.Image.Image:
    """`img` (from `open_header`) fully decoded. Raises `bad` when it is corrupt or
    truncated, `too_large` for a decompression bomb."""
    try:
        img.load()
    except PIL.Image.DecompressionBombError as e:
        raise _bomb(e, spec) from None
    except Exception as e:  # noqa: BLE001 - truncated or corrupt data, whatever the decoder
        w, h = img.size
        raise bad(f"a corrupt or truncated {img.format} image of {w}x{h} "
                  f"({type(e).__name__}: {e})") from None
    return img


def open_verified(raw: bytes, spec: ImageSpec) -> PIL.Image.Image:
    """The image in `raw`, fully decoded: `open_header`, then `load`."""
    return load(open_header(raw, spec), spec)


def upright_rgb(img: PIL.Image.Image) -> PIL.Image.Image:
    """`img` turned per its EXIF orientation (`ImageOps.exif_transpose`) and converted to
    RGB (alpha dropped, palettes and grayscale expanded, 16-bit grayscale scaled to 8 bits
    first: Pillow's own conversion clips it); no copy when it already is RGB."""
    if img.getexif().get(EXIF_ORIENTATION, 1) != 1:
        img = ImageOps.exif_transpose(img)
    if img.mode in WIDE_GRAY:
        img = _gray8(img)
    return img if img.mode == "RGB" else img.convert("RGB")


def _gray8(img: PIL.Image.Image) -> PIL.Image.Image:
    """A 16-bit (or 32-bit integer) grayscale image as 8-bit "L": the top byte of each
    16-bit value (x >> 8, as an 8-bit export of a 16-bit image keeps it)."""
    import numpy as np

    arr = np.asarray(img)
    if img.mode == "I":   # 32-bit signed ints: PNG's 16-bit gray opens as "I" in Pillow
        arr = np.clip(arr, 0, 65535)
    return PIL.Image.fromarray((arr.astype(np.uint32) >> 8).astype(np.uint8), "L")


def validate(value: Any, spec: ImageSpec, mode: str) -> Any:
    """One image item: `DECODE` -> the PIL image in RGB; otherwise (`WIRE`) the item
    verified from its header -> its plain base64 text. Raises PydanticCustomError (`bad`,
    `too_large`)."""
    raw, text = file_bytes(value, spec)
    img = open_header(raw, spec)
    _charge(img, spec, mode)
    if mode == DECODE:
        return upright_rgb(load(img, spec))
    img.close()
    return text


def encode(img: PIL.Image.Image, fmt: str = "PNG") -> str:
    """`img` as base64 text of a `fmt` file: an image item's wire form (clients, tests)."""
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode("ascii")


__all__ = ["EXIF_ORIENTATION", "WIDE_GRAY", "Image", "encode", "file_bytes", "formats", "load",
           "open_header", "open_verified", "upright_rgb", "validate"]
