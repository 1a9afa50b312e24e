"""What the batcher queues and where it sends it: an `Item` (one input of a request, with
its future), the `Slot` protocol a container meets, and the item event tags it hears."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# The wire types of the item events that end an item (floodway.runtime.protocol's TYPE).
ITEM_RESULT, ITEM_ERROR = "item", "item_error"


def why(e: BaseException) -> str:
    """``"ExceptionType: text"``, fit for a JSON answer: a string the error quotes (a lone
    surrogate from an input) escaped, the text clipped to 200 characters."""
    text = str(e).encode("utf-8", "backslashreplace").decode("utf-8")
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(e).__name__}: {text}"


class BatchResultLike(Protocol):
    outputs: dict[str, Any]
    errors: dict[str, str]
    rows: int
    compute_s: float


class Slot(Protocol):
    """What the batcher needs of a container: a free slot and `submit`."""

    id: Any

    def submit(self, items: list[tuple[str, Any]],
               on_item: Callable[[Any], None] | None = None) -> asyncio.Future:
        """Send a batch; the future resolves to its BatchResultLike. `on_item` hears each
        item's event as it arrives: an object with `item_id` and its wire `TYPE`
        (`ITEM_RESULT` with `output`, `ITEM_ERROR` with `message`, or another, e.g. a
        streamed chunk, that does not end the item)."""
        ...


@dataclass(order=True)
class Item:
    sort_key: tuple[int, int]
    id: str = field(compare=False)
    value: Any = field(compare=False)
    request: str = field(compare=False)
    tenant: str = field(compare=False)
    deadline_s: float = field(compare=False)
    enqueued_s: float = field(compare=False)
    future: asyncio.Future = field(compare=False)
    tries: int = field(default=0, compare=False)
    queued: bool = field(default=True, compare=False)
