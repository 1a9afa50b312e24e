"""Item types: what one element of a request's ``inputs`` may be, and what the endpoint
function then receives. The annotation T of ``fn(model, inputs: list[T])`` picks it:

    annotation                          wire form (one item)                  the function gets
    str                                 "text"                                str
    tuple[str, str]                     ["query", "passage"]                  tuple[str, str]
    fw.Image                            "<base64 PNG/JPEG/WebP>" or a         PIL.Image.Image,
                                        data URL "data:image/png;base64,..."  mode RGB
    fw.Array[np.float32, (3, 224, 224)] a nested list of numbers, or          np.ndarray of that
                                        {"b64", "dtype", "shape"}             dtype and shape
    Any (or no annotation)              any JSON value                        that value

(also int, float, bool, Literal, unions, lists, tuples and ``dict[str, ...]`` of these, and
pydantic models). Each item is validated by pydantic in two modes (`MODE_KEY` in the
validation context): `WIRE` on the router, which verifies every item (an image from its
header) and keeps a JSON form of it (`ImageSpec`: the base64 text; `ArraySpec`: the
``{"b64", "dtype", "shape"}`` form) so that it travels unchanged through the worker pipe, job
rows and Modal calls; `DECODE` in the container (`item_decoder`), which turns that form into
what the function receives (an image decoded there). A bad item raises PydanticCustomError
of type `BAD_ITEM` (422) or `TOO_LARGE` (413) whose message says what was expected.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from floodway.errors import FloodwayError

if TYPE_CHECKING:
    from pydantic_core import PydanticCustomError, core_schema

# pydantic is imported only where an item type other than str / Any is validated: a text
# endpoint's container (which imports this module with its app) never pays for it.

# Pillow's own decompression-bomb threshold, PIL.Image.MAX_IMAGE_PIXELS (1024 * 1024 * 1024
# // 4 // 3 = 89,478,485 pixels: about 0.25 GB as 24-bit RGB). Pillow warns above it and
# refuses above twice it; a limit of ours may not exceed it, so Pillow never warns about an
# image we accept (tests/unit/functions/test_items.py checks the value against Pillow's).
PILLOW_MAX_IMAGE_PIXELS = 89_478_485
# Defaults: 40 megapixels (a 7296x5472 photo; 120 MB decoded as RGB), 10 MiB of PNG/JPEG/WebP.
MAX_IMAGE_PIXELS = 40_000_000
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGE_BYTES_CAP = 1024 * 1024 * 1024
# The images of one request (on the router) and of one batch (decoded in the container) may
# hold this many times an image's pixel limit together, by default: 160 megapixels, about
# 0.64 GB as Pillow holds RGB (4 bytes a pixel).
IMAGES_PIXELS_FACTOR = 4
MAX_SUM_PIXELS_CAP = 1 << 40

MODE_KEY = "floodway_mode"
WIRE, DECODE = "wire", "decode"
BAD_ITEM, TOO_LARGE = "floodway_bad_item", "floodway_too_large"

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")


class ItemTypeError(FloodwayError, TypeError):
    """An item type was spelled wrong (`Array[...]`, `ArraySpec`, `ImageSpec` arguments)."""


def bad(message: str) -> PydanticCustomError:
    """A 422 for one item: `message` says what was expected."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError(BAD_ITEM, "{why}", {"why": message})


def too_large(message: str) -> PydanticCustomError:
    """A 413 for one item (an image over its byte or pixel limit)."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError(TOO_LARGE, "{why}", {"why": message})


def _mode(info: core_schema.ValidationInfo) -> str:
    ctx = info.context
    return ctx.get(MODE_KEY, DECODE) if isinstance(ctx, dict) else DECODE


@dataclass(frozen=True)
class ImageSpec:
    """An image item (`fw.Image` is ``Annotated[PIL.Image.Image, ImageSpec()]``).

    Wire form: base64 text of a PNG, JPEG or WebP file (WebP where Pillow was built with it),
    or a data URL ``data:image/<png|jpeg|webp>;base64,<text>``. `max_encoded_bytes`: the
    decoded file's size limit (the request body's `Route.max_body_bytes` applies first);
    `max_pixels`: width x height, checked from the header before any pixel is decoded, at
    most PILLOW_MAX_IMAGE_PIXELS; `max_request_pixels`: the sum over a request's images (None:
    IMAGES_PIXELS_FACTOR x max_pixels). Over a limit, or not base64, not an image (from its
    header): the router refuses the request (413; 422) naming the item. The container decodes
    each image: a corrupt or truncated one, or one past `max_batch_pixels` decoded in its
    batch (None: IMAGES_PIXELS_FACTOR x max_pixels), fails alone (an item error). The
    function receives a `PIL.Image.Image` in mode RGB, turned upright per its EXIF
    orientation (as `transformers.image_utils.load_image` does), 16-bit grayscale scaled to
    8 bits. Raises ItemTypeError for a limit outside its range.
    """

    max_encoded_bytes: int = MAX_IMAGE_BYTES
    max_pixels: int = MAX_IMAGE_PIXELS
    max_request_pixels: int | None = None
    max_batch_pixels: int | None = None

    def __post_init__(self) -> None:
        for name, top in (("max_encoded_bytes", MAX_IMAGE_BYTES_CAP),
                          ("max_pixels", PILLOW_MAX_IMAGE_PIXELS),
                          ("max_request_pixels", MAX_SUM_PIXELS_CAP),
                          ("max_batch_pixels", MAX_SUM_PIXELS_CAP)):
            v = getattr(self, name)
            if v is None and name.endswith(("request_pixels", "batch_pixels")):
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
                raise ItemTypeError(f"ImageSpec.{name}: an integer in [1, {top}] (not {v!r})")

    @property
    def request_pixels(self) -> int:
        """The pixels a request's images may hold together (checked on the router)."""
        return self.max_request_pixels or IMAGES_PIXELS_FACTOR * self.max_pixels

    @property
    def batch_pixels(self) -> int:
        """The pixels a batch's images may hold decoded together (in the container)."""
        return self.max_batch_pixels or IMAGES_PIXELS_FACTOR * self.max_pixels

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        from pydantic_core import core_schema

        return core_schema.with_info_plain_validator_function(self._validate)

    def _validate(self, value: Any, info: core_schema.ValidationInfo) -> Any:
        from floodway.functions import images

        return images.validate(value, self, _mode(info))


_TALLY: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "floodway_pixel_tally", default=None)


@contextlib.contextmanager
def pixel_tally() -> Iterator[None]:
    """A scope over which image items' pixels are summed (`tally_pixels`): one request's
    validation on the router, one batch's decoding in the container."""
    token = _TALLY.set([0])
    try:
        yield
    finally:
        _TALLY.reset(token)


def tally_pixels(n: int) -> int | None:
    """Add `n` pixels to the current `pixel_tally` -> the sum so far; None outside one."""
    tally = _TALLY.get()
    if tally is None:
        return None
    tally[0] += n
    return tally[0]


@dataclass(frozen=True)
class ArraySpec:
    """A numeric array item of `dtype` (one of DTYPES, or a numpy type such as np.float32)
    and `shape` (a tuple of sizes; None: any size on that axis; an int: one axis).

    Wire forms: a nested list of numbers (a float dtype takes integers too; an integer dtype
    takes integers in its range only; bool takes true/false), or ``{"b64": <base64 of the
    little-endian C-order bytes>, "dtype": <dtype>, "shape": [...]}``. A ragged list, another
    shape or dtype, or a number out of the dtype's range: 422. The function receives a
    writable `np.ndarray` of exactly `dtype` and a matching shape.
    Raises ItemTypeError for an unknown dtype or a malformed shape.
    """

    dtype: Any
    shape: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _dtype_name(self.dtype))
        object.__setattr__(self, "shape", _shape(self.shape))

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        from pydantic_core import core_schema

        return core_schema.with_info_plain_validator_function(self._validate)

    def _validate(self, value: Any, info: core_schema.ValidationInfo) -> Any:
        from floodway.functions import arrays

        return arrays.validate(value, self, _mode(info))

    def describe(self) -> str:
        dims = ", ".join("*" if d is None else str(d) for d in self.shape)
        article = "an" if self.dtype.startswith("int") else "a"
        return (f"{article} {self.dtype} array of shape "
                f"({dims}{',' if len(self.shape) == 1 else ''})")


def _dtype_name(dtype: Any) -> str:
    import numpy as np

    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        shown = getattr(dtype, "__name__", repr(dtype))
        raise ItemTypeError(f"an array dtype, one of {', '.join(DTYPES)} (not {shown})")
    return name


def _shape(shape: Any) -> tuple[int | None, ...]:
    dims = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else shape
    ok = isinstance(dims, tuple | list) and all(
        d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in dims)
    if not ok:
        raise ItemTypeError(f"an array shape, a tuple of sizes (ints >= 0, or None for any "
                            f"size), e.g. (3, 224, 224) or (None, 80) (not {shape!r})")
    return tuple(dims)


class Array:
    """``Array[dtype, shape]`` is ``Annotated[np.ndarray, ArraySpec(dtype, shape)]``, e.g.
    ``inputs: list[fw.Array[np.float32, (3, 224, 224)]]``. Spell it with `Annotated` where a
    static type checker must read it. Raises ItemTypeError for anything but [dtype, shape]."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise ItemTypeError("fw.Array is an annotation: fw.Array[np.float32, (3, 224, 224)]")

    def __class_getitem__(cls, params: Any) -> Any:
        import numpy as np

        if not isinstance(params, tuple) or len(params) != 2:
            raise ItemTypeError(f"fw.Array[dtype, shape], e.g. fw.Array[np.float32, (3, 224, "
                                f"224)] (not fw.Array[{params!r}])")
        return Annotated[np.ndarray, ArraySpec(*params)]


ITEM_TYPES = ("str, tuple[str, str], fw.Image, fw.Array[dtype, shape], int, float, bool, "
              "Literal, Any, or lists, tuples, dict[str, ...] and pydantic models of these")
_SCALARS = (str, int, float, bool, type(None), None)
_UNIONS = (typing.Union, types.UnionType)


def spec_of(t: Any) -> ImageSpec | ArraySpec | None:
    """The ImageSpec or ArraySpec an annotation carries (the last one of an Annotated), or
    None."""
    if typing.get_origin(t) is Annotated:
        found = [m for m in t.__metadata__ if isinstance(m, ImageSpec | ArraySpec)]
        return found[-1] if found else None
    return None


def carries(t: Any, kind: type) -> bool:
    """Whether `t` holds a `kind` (ImageSpec or ArraySpec) item, here or nested
    (``tuple[fw.Image, str]``)."""
    if isinstance(spec_of(t), kind):
        return True
    args = () if typing.get_origin(t) is typing.Literal else typing.get_args(t)
    return any(carries(a, kind) for a in args)


def decodes_images(t: Any) -> bool:
    """Whether validating `t` decodes images (here or nested: ``tuple[fw.Image, str]``):
    work bounded by the pixel limit, not by the body's size."""
    return carries(t, ImageSpec)


def problem(t: Any) -> str | None:
    """Why `t` cannot be an item type (a JSON value validated into it), or None if it can."""
    if t is Any or t in _SCALARS or spec_of(t) is not None:
        return None
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return problem(args[0])
    if origin is typing.Literal:
        odd = [a for a in args if not isinstance(a, str | int | float | bool | type(None))]
        return f"Literal values must be JSON scalars, not {odd[0]!r}" if odd else None
    if origin in _UNIONS or origin in (list, tuple):
        return next((p for p in map(problem, (a for a in args if a is not ...)) if p), None)
    if origin is dict:
        if args and args[0] is not str:
            return f"dict keys must be str (JSON object keys), not {args[0]!r}"
        return problem(args[1]) if args else None
    if t in (list, tuple, dict):
        return None
    return _class_problem(t)


def _class_problem(t: Any) -> str | None:
    if inspect.isclass(t) and (issubclass(t, enum.Enum) or dataclasses.is_dataclass(t)
                               or typing.is_typeddict(t)):
        return None
    if inspect.isclass(t) and "pydantic" in sys.modules:
        from pydantic import BaseModel  # a pydantic model's module imported pydantic

        if issubclass(t, BaseModel):
            return None
    name = f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', repr(t))}"
    if name == "numpy.ndarray":
        return "a numpy array needs its dtype and shape: fw.Array[np.float32, (3, 224, 224)]"
    if name == "PIL.Image.Image":
        return "an image item is fw.Image (base64 PNG/JPEG/WebP on the wire)"
    if t in (bytes, bytearray):
        return "bytes do not travel in JSON: use fw.Image, fw.Array or base64 text (str)"
    return f"{getattr(t, '__name__', repr(t))} has no JSON wire form"


def check(t: Any) -> str | None:
    """`problem(t)`, then whether pydantic can build a validator for ``list[t]``."""
    why = problem(t)
    if why is None and not _needs_no_decoding(t):
        from pydantic import TypeAdapter

        try:
            TypeAdapter(list[t])
        except Exception as e:  # noqa: BLE001 - any failure to build is the same problem
            why = f"pydantic cannot validate it ({type(e).__name__}: {e})"
    return why


def declared_item_type(fn: Callable[..., Any]) -> Any:
    """T of ``fn(model, inputs: list[T])`` (of ``item: T`` for a generator function) with
    its Annotated metadata; Any without one (or when annotations cannot be resolved)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - validated at decorator time; here only a best effort
        return Any
    ann = hints.get(params[1].name, Any) if len(params) >= 2 else Any
    if typing.get_origin(ann) is list and typing.get_args(ann):
        return typing.get_args(ann)[0]
    return ann if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) else Any


def _needs_no_decoding(t: Any) -> bool:
    return t is Any or t is str


def _decoder(t: Any) -> Callable[[Any], Any] | None:
    if _needs_no_decoding(t):
        return None
    from pydantic import TypeAdapter

    adapter = TypeAdapter(t)
    context = {MODE_KEY: DECODE}
    return functools.partial(adapter.validate_python, context=context)


@functools.lru_cache(maxsize=64)
def _decoder_of(fn: Callable[..., Any]) -> Callable[[Any], Any] | None:
    return _decoder(declared_item_type(fn))


def item_decoder(fn: Callable[..., Any]) -> Callable[[Any], Any] | None:
    """For the container: a function turning one item's wire form (as `parse_predict`
    returned it) into what `fn` receives (an image decoded, an array built, a pair a tuple);
    None when items pass unchanged (str, Any). Cached per `fn`. The decoder raises
    pydantic's ValidationError for an item that does not fit."""
    try:
        return _decoder_of(fn)
    except TypeError:   # an unhashable callable: no cache
        return _decoder(declared_item_type(fn))


def sample_item(fn: Callable[..., Any]) -> Any:
    """A decoded item of `fn`'s declared type for a warm-up, or None where there is no
    obvious one: ``"warm-up"`` for str, a pair of them for tuple[str, str], a 224x224 gray RGB
    image for an image, zeros for an array (None axes of size 1)."""
    t = declared_item_type(fn)
    spec = spec_of(t)
    if t is str or t is Any:
        return "warm-up"
    if t == tuple[str, str]:
        return ("warm-up", "warm-up")
    if isinstance(spec, ImageSpec):
        import PIL.Image

        return PIL.Image.new("RGB", (224, 224), (128, 128, 128))
    if isinstance(spec, ArraySpec):
        import numpy as np

        return np.zeros(tuple(1 if d is None else d for d in spec.shape), dtype=spec.dtype)
    return None


__all__ = ["BAD_ITEM", "DECODE", "DTYPES", "ITEM_TYPES", "MAX_IMAGE_BYTES", "MAX_IMAGE_PIXELS",
           "MODE_KEY", "PILLOW_MAX_IMAGE_PIXELS", "TOO_LARGE", "WIRE", "Array", "ArraySpec",
           "ImageSpec", "ItemTypeError", "bad", "carries", "check", "declared_item_type",
           "decodes_images", "item_decoder", "pixel_tally", "problem", "sample_item", "spec_of",
           "tally_pixels", "too_large"]
