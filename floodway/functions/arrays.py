"""Array items (`ArraySpec`, `fw.Array[dtype, shape]`): a nested JSON list of numbers, or
``{"b64", "dtype", "shape"}`` (the little-endian C-order bytes), checked against the declared
dtype and shape. `WIRE` (the router) keeps the b64 form, which carries the exact values
in about a quarter of the JSON text of a float32 nested list; `DECODE` (the container)
builds the `np.ndarray`.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

import numpy as np

from floodway.functions.items import DECODE, ArraySpec, bad

B64_KEYS = frozenset({"b64", "dtype", "shape"})
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "non-integer numbers",
               "c": "complex numbers", "U": "strings", "S": "strings",
               "O": "nulls, mixed values or integers beyond 64 bits"}
# Which inferred numpy kinds each declared kind takes (JSON integers fit a float dtype).
_TAKES = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def _json_kind(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string",
            dict: "object"}.get(type(value), "null")


def _fits(shape: tuple[int, ...], spec: ArraySpec) -> bool:
    return len(shape) == len(spec.shape) and all(
        want is None or want == got for want, got in zip(spec.shape, shape, strict=True))


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def from_nested(value: Any, spec: ArraySpec) -> np.ndarray:
    """A nested list (or a number, for shape ()) -> an array of `spec`. Raises `bad` naming
    what was expected: for a ragged list, another shape, values of another kind, or values
    out of the dtype's range."""
    want = spec.describe()
    if not isinstance(value, list | int | float) or (isinstance(value, bool)
                                                    and spec.dtype != "bool"):
        raise bad(f"expected {want}: a nested list of numbers or "
                  f'{{"b64", "dtype", "shape"}}, got {_json_kind(value)}')
    try:
        arr = np.array(value)
    except (ValueError, OverflowError):
        raise bad(f"expected {want}, got a ragged nested list (rows of different "
                  "lengths)") from None
    if not _fits(arr.shape, spec):
        raise bad(f"expected {want}, got shape {_fmt(arr.shape)}")
    target = np.dtype(spec.dtype)
    if arr.size and arr.dtype.kind not in _TAKES[target.kind]:
        raise bad(f"expected {want}, got {_KIND_NAMES.get(arr.dtype.kind, arr.dtype.name)}")
    if arr.size and target.kind in "iu":
        info = np.iinfo(target)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise bad(f"expected {want}, got {lo if lo < info.min else hi}, out of "
                      f"{spec.dtype}'s range [{info.min}, {info.max}]")
    with np.errstate(over="ignore"):
        out = arr.astype(target)
    if target.kind == "f" and arr.size and bool((np.isinf(out) & np.isfinite(arr)).any()):
        raise bad(f"expected {want}, got a value beyond {spec.dtype}'s range "
                  f"(+-{np.finfo(target).max:g})")
    return out


def _b64_parts(value: dict, spec: ArraySpec) -> tuple[tuple[int, ...], bytes, str]:
    """(shape, raw bytes, base64 text) of a b64 item, checked against `spec`."""
    want = spec.describe()
    if value.keys() != B64_KEYS:
        raise bad(f'expected {want} as {{"b64", "dtype", "shape"}} or a nested list, got '
                  f"an object with keys {sorted(map(str, value))[:6]}")
    text, dtype, shape = value["b64"], value["dtype"], value["shape"]
    if dtype != spec.dtype:
        raise bad(f"expected {want}, got dtype {str(dtype)[:20]!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 0 for d in shape)):
        raise bad(f"expected {want}, got 'shape' {str(shape)[:40]}: a list of sizes")
    if not _fits(tuple(shape), spec):
        raise bad(f"expected {want}, got shape {_fmt(tuple(shape))}")
    if not isinstance(text, str):
        raise bad(f"expected {want}: 'b64' must be base64 text, got {_json_kind(text)}")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(f"expected {want}: 'b64' is not valid base64 ({e})") from None
    need = math.prod(shape) * np.dtype(spec.dtype).itemsize
    if len(raw) != need:
        raise bad(f"expected {want}: 'b64' holds {len(raw):,} bytes, shape "
                  f"{_fmt(tuple(shape))} of {spec.dtype} takes {need:,}")
    if spec.dtype == "bool" and raw.translate(None, b"\x00\x01"):
        raise bad(f"expected {want}: bool bytes must be 0 or 1")
    return tuple(shape), raw, text


def from_b64(value: dict, spec: ArraySpec) -> np.ndarray:
    """A ``{"b64", "dtype", "shape"}`` item -> a writable array of `spec` (native byte
    order). Raises `bad` as `from_nested`, and for bytes that do not fill the shape."""
    shape, raw, _ = _b64_parts(value, spec)
    little = np.dtype(spec.dtype).newbyteorder("<")
    arr = np.frombuffer(bytearray(raw), dtype=little).reshape(shape)
    return arr if arr.dtype == np.dtype(spec.dtype) else arr.astype(spec.dtype)


def to_wire(arr: np.ndarray) -> dict[str, Any]:
    """`arr` as the ``{"b64", "dtype", "shape"}`` wire form (little-endian, C order)."""
    little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return {"b64": base64.b64encode(little.tobytes()).decode("ascii"),
            "dtype": arr.dtype.name, "shape": list(arr.shape)}


def validate(value: Any, spec: ArraySpec, mode: str) -> Any:
    """One array item: `DECODE` -> the np.ndarray; otherwise (`WIRE`) the item checked ->
    its ``{"b64", "dtype", "shape"}`` form. Raises PydanticCustomError (`bad`)."""
    if isinstance(value, dict):
        if mode == DECODE:
            return from_b64(value, spec)
        shape, _, text = _b64_parts(value, spec)
        return {"b64": text, "dtype": spec.dtype, "shape": list(shape)}
    arr = from_nested(value, spec)
    return arr if mode == DECODE else to_wire(arr)


__all__ = ["B64_KEYS", "from_b64", "from_nested", "to_wire", "validate"]
