"""What the batcher queues and where it sends it: an `Item` (one input of a request, with
its future), the `Slot` protocol a container meets, and the item event tags it hears."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from floodway.codec import dumps
from floodway.errors import EndpointError

# The wire types of the item events that end an item (floodway.runtime.protocol's TYPE),
# and of a streamed chunk, which does not.
ITEM_RESULT, ITEM_ERROR, ITEM_CHUNK = "item", "item_error", "chunk"
# The ItemError messages of an item the worker skipped, never ran (floodway.runtime.
# protocol's DROPPED_CANCELLED and DROPPED_DEADLINE) -> why: a drop, not a failure.
DROPS = {"Dropped: cancelled (its caller left before it started)": "cancelled",
         "Dropped: deadline (it passed before the item started)": "deadline"}


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
               on_item: Callable[[Any], None] | None = None, *,
               left_s: list[float] | None = None) -> asyncio.Future:
        """Send a batch; the future resolves to its BatchResultLike (`rows`: those that
        ran). `on_item` hears each item's event as it arrives: an object with `item_id` and
        its wire `TYPE` (`ITEM_RESULT` with `output`, `ITEM_ERROR` with `message`,
        `ITEM_CHUNK` with `data`: a streamed chunk, which does not end the item). `left_s`
        (not for a streaming endpoint): each item's seconds to its deadline, as of now; an
        item not started by then is skipped (its ItemError one of `DROPS`)."""
        ...

    def cancel_item(self, item_id: str) -> bool:
        """Item `item_id` in flight is no longer wanted: a streamed sequence stops, a batch
        item not started yet is skipped (`DROPS`); its batch still ends with the worker's
        answer. False when it is not in flight here. (Optional for a batch endpoint's
        container.)"""
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
    # A streamed sequence: who hears its chunks, how many went out, where it runs now.
    on_chunk: Callable[[Any], None] | None = field(default=None, compare=False)
    chunks: int = field(default=0, compare=False)
    slot: Any = field(default=None, compare=False)
    # Its cost (`floodway.routers.sequences.SequenceCost`), the tokens it streamed, when it
    # was sent and when its last chunk with tokens came (None: no chunk yet), for the
    # endpoint's `SequenceBook`.
    cost: Any = field(default=None, compare=False)
    tokens: int = field(default=0, compare=False)
    sent_s: float = field(default=0.0, compare=False)
    last_s: float | None = field(default=None, compare=False)
    # Its estimated tokens (`floodway.routers.tokens`; 1 for an item that is not text): the
    # row length a batch holding it is padded to.
    length: int = field(default=1, compare=False)


class SentBatch:
    """A batch's result (a BatchResultLike: its attributes are read through) with what the
    batcher sent: `padded_tokens`, rows x its longest item's tokens (0: not text)."""

    __slots__ = ("padded_tokens", "result")

    def __init__(self, result: BatchResultLike, padded_tokens: int):
        self.result, self.padded_tokens = result, padded_tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


def padded(batch: list[Item]) -> int:
    """Padded tokens of `batch`: its rows x its longest item's estimated tokens."""
    return len(batch) * max((it.length for it in batch), default=0)


def unsendable(batch: list[Item], error: Exception, endpoint: str,
               log: logging.Logger) -> list[Item]:
    """A batch a container refused with `error` before sending it (its encoding for the
    worker pipe failed, or anything else) -> the items to queue again. The items the pipe
    cannot carry (`floodway.codec.dumps` raises) fail alone and the others go back; when no
    item is to blame, every item of the batch fails with `error`."""
    bad = {}
    for it in batch:
        try:
            dumps(it.value)
        except (TypeError, ValueError) as e:
            bad[it.id] = e
    if not bad:
        log.error("batch of %d rows could not be sent to a container of %r: %s",
                  len(batch), endpoint, why(error))
    for it in batch:
        if it.future.done() or (bad and it.id not in bad):
            continue
        cause = why(bad.get(it.id, error))
        it.future.set_exception(EndpointError(
            f"endpoint {endpoint!r}: input {it.id} could not be sent to a container "
            f"({cause})" if bad else f"endpoint {endpoint!r}: its batch could not be "
            f"sent to a container ({cause})"))
    return [it for it in batch if bad and it.id not in bad]


# The worker's name for an item that failed on its input, not in the function: one that
# did not decode, or a `floodway.errors.RequestError` the model raised (the built-in engine
# refusing a prompt too long for its context). Only this prefix: a user's function raising
# some other class named RequestError (httpx has one) is not a client error.
INPUT_ERROR = "InputError: "
# An input error's text starts with the field it blames when it names one:
# "prompt: 602 tokens is too long", "max_new_tokens = 129 is not allowed".
_FIELD = re.compile(r"^([A-Za-z_]\w*(?:\.\w+|\[\d+\])*)(?: =|:) ")


def _index(item_id: str) -> str:
    """An item id's input index (``"r3:2"`` -> ``"2"``)."""
    return item_id.rsplit(":", 1)[-1]


def item_failed(endpoint: str, item_id: str, message: str) -> EndpointError:
    """The error of item `item_id` (``<request>:<index>``) that the worker ended with
    `message` (``"Type: text"``): an EndpointError with status 422 and `field`
    ``inputs[i]`` (``inputs[i].<field>`` when the text names one) when the input was to
    blame (`INPUT_ERROR`), else status 500."""
    if message.startswith(INPUT_ERROR):
        text = message[len(INPUT_ERROR):]
        where = f"inputs[{_index(item_id)}]"
        m = _FIELD.match(text)
        return EndpointError(f"endpoint {endpoint!r}: {where}: {text}", status=422,
                             field=f"{where}.{m.group(1)}" if m else where, kind="input_error")
    return EndpointError(f"endpoint {endpoint!r} raised {message}")


def answer(batch: list[Item], result: BatchResultLike, endpoint: str) -> None:
    """Resolve each item of `batch` not resolved yet from its batch's `result`, by id."""
    for it in batch:
        if it.future.done():
            continue
        if it.id in result.outputs:
            it.future.set_result(result.outputs[it.id])
        elif it.id in result.errors:
            it.future.set_exception(item_failed(endpoint, it.id, result.errors[it.id]))
        else:
            it.future.set_exception(EndpointError(f"endpoint {endpoint!r} returned "
                                                  f"no output for item {it.id}"))


def hear(it: Item, event: Any, endpoint: str) -> None:
    """One item event for `it` (not done): a streamed chunk to its `on_chunk`, or its
    result / error resolving its future."""
    if event.TYPE == ITEM_CHUNK:
        it.chunks += 1
        if it.on_chunk is not None:
            it.on_chunk(event.data)
    elif event.TYPE == ITEM_RESULT:
        it.future.set_result(event.output)
    elif event.TYPE == ITEM_ERROR:
        it.future.set_exception(item_failed(endpoint, it.id, event.message))


def early(items: dict[str, Item], endpoint: str, sequences: Any,
          now: Callable[[], float]) -> Callable[[Any], None]:
    """A batch's `on_item` listener: resolve an item as soon as its own result or error
    arrives, before the rest of its batch (a small request in a large batch is answered
    when its row is). A streamed chunk goes to the item's `on_chunk` (`hear`), and to the
    endpoint's `SequenceBook` (`sequences`, when there is one) at `now()`."""
    def on_item(event: Any) -> None:
        it = items.get(event.item_id)
        if it is None or it.future.done():
            return   # a chunk of a cancelled sequence reaches no one
        if event.TYPE == ITEM_ERROR and event.message in DROPS:
            return   # skipped by the worker: settled when its batch ends
        if event.TYPE == ITEM_CHUNK and sequences is not None:
            sequences.chunk(it, event.data, now())
        hear(it, event, endpoint)
    return on_item


def retried(batch: list[Item], error: Exception) -> list[Item]:
    """A batch lost with its container -> the items to retry (once each): those retried
    already, and those whose stream had begun (a client holds its first chunks), fail
    with `error`."""
    retry = [it for it in batch if it.tries == 0 and not it.chunks]
    for it in batch:
        if (it.tries > 0 or it.chunks) and not it.future.done():
            it.future.set_exception(error)
    for it in retry:
        it.tries += 1
    return retry


# Lengths within this factor of each other batch together without further question: a row
# is padded to at most twice its own tokens (the padding a power-of-two bucketing of lengths
# also accepts).
GROUP_FACTOR = 2.0


# An item is near its deadline (never passed over for length) within this many batches'
# seconds of it, each the size of the batch being cut with it in: that batch, then its own.
# Sized by the batch at hand, not a full one: a full batch of long texts on a CPU takes
# longer than a 1.5 s deadline, which made every item "near" and turned grouping off under
# load (benchmarks/goodput.py: padded batches at 55 ms a row against 22 ms in small ones).
NEAR_BATCHES = 2
# A batch of job rows takes at most this share of the route's sync deadline (by the service
# fit): a sync request that finds every container on a job batch still meets its deadline
# (decide() plans within 85% of it). Long job batches made the router spill every sync
# request behind them (benchmarks/goodput.py); short ones cost the drain a little
# batching efficiency. The local pool and the simulator both bound job batches by it.
JOB_BATCH_SHARE = 0.25


def joins(rows: int, longest: int, shortest: int, length: int,
          batch_s: Callable[[int, int], float]) -> bool:
    """Whether an item of `length` tokens joins a batch of `rows` rows whose lengths span
    [`shortest`, `longest`]: the span stays within `GROUP_FACTOR`, or joining adds no more
    seconds than the item would cost in a batch of its own (`batch_s(rows, padded
    tokens)`: the endpoint's fitted line). So short texts of any length batch together while
    a batch's fixed cost dominates, and a long text does not pad a batch of short ones."""
    hi, lo = max(longest, length), min(shortest, length)
    if hi <= GROUP_FACTOR * lo:
        return True
    more = batch_s(rows + 1, (rows + 1) * hi) - batch_s(rows, rows * longest)
    return more <= batch_s(1, length) + 1e-12   # a tie (to float noise) joins


def group(head: Item, queue: Iterable[Item], now: float, *, max_rows: int,
          max_tokens: int | None, batch_s: Callable[[int, int], float], near_s: float,
          prio: Callable[[Item], int], max_low_s: float | None = None
          ) -> tuple[list[Item], list[Item]]:
    """The batch `head` (the queue's first item, taken) starts, and the items found past
    their deadline: (batch, expired). `queue`: the other queued items in priority order.

    Items are taken in that order while the batch has fewer than `max_rows` rows and its
    padded tokens (rows x longest) stay within `max_tokens` (None: no token cut). An item
    that would pad the batch (`joins` says no) or does not fit the token budget is passed
    over, to head a batch of its own length, unless it is near its deadline: within
    `near_s` plus `NEAR_BATCHES` batches the size of the one being cut with it in (the
    batch being cut, then its own); such an item is taken when it fits, else the batch ends
    there (it heads the next one), so no item near its deadline is ever passed over.
    Nothing is taken below the priority of an item passed over, and a batch headed by sync
    work takes no low-priority item (the batcher's top-up rule). A batch headed by
    low-priority work (jobs) also stays within `max_low_s` seconds by `batch_s` (None: no
    bound; its head always goes): a sync request that arrives while it runs waits for no
    more than that."""
    batch, expired = [head], []
    longest = shortest = head.length
    passed: int | None = None   # the highest priority passed over
    for it in queue:
        p = prio(it)
        if len(batch) >= max_rows or (p == 0 and prio(head) > 0) \
                or (passed is not None and p < passed):
            break
        if it.future.done():
            continue
        if it.deadline_s <= now:
            expired.append(it)
            continue
        hi = max(longest, it.length)
        fits = (max_tokens is None or (len(batch) + 1) * hi <= max_tokens) and \
            (max_low_s is None or p > 0 or batch_s(len(batch) + 1, (len(batch) + 1) * hi)
             <= max_low_s)
        urgent = it.deadline_s - now <= \
            near_s + NEAR_BATCHES * batch_s(len(batch) + 1, (len(batch) + 1) * hi)
        if fits and (urgent or joins(len(batch), longest, shortest, it.length, batch_s)):
            batch.append(it)
            longest, shortest = hi, min(shortest, it.length)
        elif urgent:
            break
        else:
            passed = p if passed is None else max(passed, p)
    return batch, expired
