"""JSON on the hot path: HTTP responses, the worker pipe and job rows.

    dumps(obj) -> bytes        loads(bytes | str) -> obj

orjson (https://github.com/ijl/orjson) encodes an embedding's list of floats several times
faster than the standard library (benchmarks/burst.py's router profile: stdlib encoding and
decoding of outputs took about a sixth of the router's CPU in a burst), and the router's
event loop is where a burst is decided. Floats keep their shortest round-trip repr, as with
the standard library. Differences, both standard JSON: NaN and infinities encode as null (on
both paths); what orjson refuses (integers beyond 64 bits, non-string keys) falls back to
the standard library, so nothing that encoded before fails now. It imports nothing heavy: a
worker imports it before its model loads.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

FALLBACK_MARK = b" "


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON. Raises TypeError / ValueError only when the standard library
    cannot encode `obj` either."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        # A leading space (valid JSON) marks the standard library's output: `loads` reads it
        # back with the standard library too, since orjson reads integers beyond 64 bits
        # as floats (precision lost).
        return FALLBACK_MARK + json.dumps(_finite(obj), ensure_ascii=False,
                                          separators=(",", ":")).encode()


def _finite(obj: Any) -> Any:
    """`obj` with NaN and infinities as None, as orjson writes them (valid JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def loads(data: bytes | str) -> Any:
    """Parse JSON (from `dumps`, or any JSON). Raises ValueError on malformed input."""
    if data[:1] in (FALLBACK_MARK, " "):
        return json.loads(data)
    return orjson.loads(data)


__all__ = ["dumps", "loads"]
