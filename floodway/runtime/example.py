"""The request `floodway serve --show-example` sends: items of the endpoint's own type.

    example_inputs(fn) -> list of wire-form items | None
    describe(output) -> str

The items are built from the function's ``inputs: list[T]`` annotation
(`floodway.functions.items`), so a pair endpoint gets pairs, an image endpoint a small PNG
and an array endpoint zeros of its shape; None where there is no obvious item (the example is
then skipped with a message rather than sent and refused).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any

from floodway.functions.items import (
    ArraySpec,
    ImageSpec,
    declared_item_type,
    sample_item,
    spec_of,
)

EXAMPLE_TEXTS = ["floodway keeps latency flat through traffic spikes.", "Hello, world!"]
EXAMPLE_PAIRS = [["how do I keep latency flat?", "floodway keeps latency flat through "
                  "traffic spikes."], ["how do I keep latency flat?", "Hello, world!"]]


def example_inputs(fn: Callable[..., Any]) -> list[Any] | None:
    """Two items (one for images and arrays) of `fn`'s declared item type, in their wire
    form; None when the type has no obvious example."""
    t = declared_item_type(fn)
    if t is str or t is Any:
        return list(EXAMPLE_TEXTS)
    if t == tuple[str, str]:
        return [list(p) for p in EXAMPLE_PAIRS]
    spec = spec_of(t)
    if isinstance(spec, ImageSpec):
        buf = io.BytesIO()
        sample_item(fn).save(buf, format="PNG")
        return [base64.b64encode(buf.getvalue()).decode("ascii")]
    if isinstance(spec, ArraySpec):
        return [sample_item(fn).tolist()]
    return None


def describe(output: Any) -> str:
    """A few words on one output: ``384 numbers``, ``a number``, ``an object with keys
    label, score``, ``a list of 5 objects``."""
    if isinstance(output, bool) or output is None:
        return repr(output)
    if isinstance(output, int | float):
        return "a number"
    if isinstance(output, str):
        return "a string"
    if isinstance(output, dict):
        return f"an object with keys {', '.join(map(str, output))}"
    if isinstance(output, list):
        if output and all(isinstance(x, int | float) and not isinstance(x, bool)
                          for x in output):
            return f"{len(output)} numbers"
        if output and all(isinstance(x, dict) for x in output):
            return f"a list of {len(output)} objects"
        return f"a list of {len(output)} items"
    return type(output).__name__


__all__ = ["EXAMPLE_PAIRS", "EXAMPLE_TEXTS", "describe", "example_inputs"]
