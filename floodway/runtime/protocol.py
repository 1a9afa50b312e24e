"""The messages between the router and a container's worker process.

Newline-delimited JSON (`floodway.codec`): a line holds one message, an object tagged by
``"type"``, or (`encode_all`) a JSON array of the messages known at the same moment. Each
message is a frozen dataclass; `encode`/`encode_all` and `decode`/`decode_all` are the only
way to or from bytes.

    router -> worker
      Batch       {"type": "batch", "id": 3, "items": [["r1:0", "text"], ...],
                   "deadlines": [81234.5, ...]}               ("deadlines" optional)
      Ping        {"type": "ping"}
      Cancel      {"type": "cancel", "batch_id": 3, "item_id": "r1:0"}
    worker -> router
      Phase       {"type": "phase", "phase": "warming"}
      Ready       {"type": "ready", "timings_s": {"imports": 0.4, ...},
                   "backend": "onnxruntime-cpu", "torch": false, "pid": 4242}
      Failed      {"type": "failed", "error": "ImportError: ...",
                   "traceback": "Traceback ..."}   (then the worker exits 1; "traceback" optional)
      Pong        {"type": "pong"}
      ItemResult  {"type": "item", "batch_id": 3, "item_id": "r1:0", "output": [0.1, ...]}
      ItemError   {"type": "item_error", "batch_id": 3, "item_id": "r1:0", "message": "...",
                   "traceback": "Traceback ..."}           ("traceback" optional: for the log)
      Chunk       {"type": "chunk", "batch_id": 3, "item_id": "r1:0", "seq": 0, "data": ...}
      BatchDone   {"type": "done", "batch_id": 3, "compute_s": 0.012, "rows": 32}
      Load        {"type": "load", "active_sequences": 3, "kv_cache_tokens": 1200,
                   "kv_cache_capacity": 8192}                            (streaming)

Order within a batch: every item gets exactly one ItemResult or ItemError (after its Chunks, if
it streams; chunks of an item carry seq 0, 1, 2, ...), and the batch's BatchDone comes last.
Results travel with their item ids, so the router maps them back by id, never by position.
A streaming worker runs its items concurrently: Cancel ends one item early (its ItemError
``"Cancelled: ..."``; an unknown or finished one is ignored), and Load reports its running
sequences whenever their count (or the KV cache in use) changes. A batch worker runs one
batch at a time: it skips (never runs) an item of a batch not started yet that a Cancel
named or whose deadline passed (`Batch.deadlines`), answering its ItemError `DROPPED_CANCELLED`
or `DROPPED_DEADLINE`; its BatchDone counts the rows that ran (0: none did).

Cost: a batch that runs whole goes out as one line (its item events and BatchDone). For 32
items of 384 floats that is 0.6% more bytes than one untyped result message per batch, and
the router reads and decodes it in ~10% more time (~0.46 vs ~0.42 ms, the floats dominate;
the rest is building and checking 33 messages); one line per item would cost ~20% more.
A line holds at most `MAX_LINE_BYTES` (the router's read limit): the worker writes a batch
whose outputs are larger on several lines (`encode_lines`), and one output too large for a
line fails its item alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, overload

from floodway.codec import FALLBACK_MARK, dumps, loads
from floodway.errors import ProtocolError

ItemId = str | int
# The longest line the router reads from a worker (its stream limit), newline included.
MAX_LINE_BYTES = 256 * 1024 * 1024
# One item's encoded result at most: the rest of a line's message is far below the 1 MiB left.
MAX_OUTPUT_BYTES = MAX_LINE_BYTES - 1024 * 1024
_NUMBER = (int, float)
_OUTPUT = object   # any JSON value


@dataclass(frozen=True, slots=True)
class Batch:
    """Run `items` ((item_id, input) pairs) as one batch; `id` is unique per container and
    grows. `deadlines` (optional): each item's deadline in `time.monotonic()` seconds, which
    on Linux is CLOCK_MONOTONIC, one clock for every process of the machine (the router and
    its workers share it); an item not started by then is skipped."""

    TYPE: ClassVar[str] = "batch"
    id: int
    items: tuple[tuple[ItemId, Any], ...]
    deadlines: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class Ping:
    """Answer Pong at once (between batches): a liveness check of an idle worker."""

    TYPE: ClassVar[str] = "ping"


@dataclass(frozen=True, slots=True)
class Cancel:
    """Item `item_id` of batch `batch_id` is no longer wanted (its client left): a streamed
    sequence stops; a batch item not started yet is skipped."""

    TYPE: ClassVar[str] = "cancel"
    batch_id: int
    item_id: ItemId


@dataclass(frozen=True, slots=True)
class Phase:
    """The worker entered a cold-start phase (``"warming"``: artifacts loaded, warm-up runs)."""

    TYPE: ClassVar[str] = "phase"
    phase: str


@dataclass(frozen=True, slots=True)
class Ready:
    """Warm-up done; `timings_s` maps each cold-start phase to its seconds."""

    TYPE: ClassVar[str] = "ready"
    timings_s: dict[str, float]
    backend: str
    torch: bool
    pid: int


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker could not start (or read a malformed line); it exits with code 1.
    `traceback`: where the user's code raised (e.g. its `load=` hook), for the server log."""

    TYPE: ClassVar[str] = "failed"
    error: str
    traceback: str | None = field(default=None, compare=False)   # diagnostics, not the event


@dataclass(frozen=True, slots=True)
class Pong:
    TYPE: ClassVar[str] = "pong"


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One item's output (any JSON value)."""

    TYPE: ClassVar[str] = "item"
    batch_id: int
    item_id: ItemId
    output: Any


@dataclass(frozen=True, slots=True)
class ItemError:
    """One item failed alone; `message` is ``"ExceptionType: text"`` (what the client is
    told). `traceback`: where the endpoint function raised, for the server log only (None
    for an item the input was to blame for, or one skipped)."""

    TYPE: ClassVar[str] = "item_error"
    batch_id: int
    item_id: ItemId
    message: str
    traceback: str | None = field(default=None, compare=False)   # diagnostics, not the event


@dataclass(frozen=True, slots=True)
class Chunk:
    """Part `seq` (0, 1, ...) of a streaming item's output; its ItemResult or ItemError
    still ends the item."""

    TYPE: ClassVar[str] = "chunk"
    batch_id: int
    item_id: ItemId
    seq: int
    data: Any


@dataclass(frozen=True, slots=True)
class BatchDone:
    """The batch is answered: `rows` items, `compute_s` seconds inside the endpoint function."""

    TYPE: ClassVar[str] = "done"
    batch_id: int
    compute_s: float
    rows: int


@dataclass(frozen=True, slots=True)
class Load:
    """A streaming container's sequences: how many run now, and the KV-cache tokens they
    hold of its capacity (0 and 0 where no built-in engine keeps a cache)."""

    TYPE: ClassVar[str] = "load"
    active_sequences: int
    kv_cache_tokens: int
    kv_cache_capacity: int


# The ItemError of an item a batch worker skipped (see the module): the router counts it as
# dropped, not failed. Whole messages, so that no function's error reads as one.
DROPPED_CANCELLED = "Dropped: cancelled (its caller left before it started)"
DROPPED_DEADLINE = "Dropped: deadline (it passed before the item started)"

ToWorker = Batch | Ping | Cancel
FromWorker = Phase | Ready | Failed | Pong | ItemResult | ItemError | Chunk | BatchDone | Load
ItemEvent = ItemResult | ItemError | Chunk
Message = ToWorker | FromWorker

TO_WORKER: tuple[type[ToWorker], ...] = (Batch, Ping, Cancel)
FROM_WORKER: tuple[type[FromWorker], ...] = (Phase, Ready, Failed, Pong, ItemResult, ItemError,
                                             Chunk, BatchDone, Load)
M = TypeVar("M", bound=Message)   # the message classes a decode expects

# Per message type: each field with the JSON types it may hold (bool is no int here).
_SCHEMA: dict[type[Message], tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    Batch: (("id", int), ("items", list), ("deadlines", list)),
    Ping: (),
    Cancel: (("batch_id", int), ("item_id", (str, int))),
    Phase: (("phase", str),),
    Ready: (("timings_s", dict), ("backend", str), ("torch", bool), ("pid", int)),
    Failed: (("error", str), ("traceback", str)),
    Pong: (),
    ItemResult: (("batch_id", int), ("item_id", (str, int)), ("output", _OUTPUT)),
    ItemError: (("batch_id", int), ("item_id", (str, int)), ("message", str),
                ("traceback", str)),
    Chunk: (("batch_id", int), ("item_id", (str, int)), ("seq", int), ("data", _OUTPUT)),
    BatchDone: (("batch_id", int), ("compute_s", _NUMBER), ("rows", int)),
    Load: (("active_sequences", int), ("kv_cache_tokens", int), ("kv_cache_capacity", int)),
}
_BY_TAG: dict[str, type[Message]] = {cls.TYPE: cls for cls in _SCHEMA}
_NAMES: dict[type, tuple[str, ...]] = {cls: tuple(n for n, _ in f) for cls, f in _SCHEMA.items()}
# What decode checks, per class: the exact key set (with "type") and the typed fields.
_KEYS: dict[type, frozenset[str]] = {cls: frozenset(("type", *n)) for cls, n in _NAMES.items()}
# Fields that may be absent (None when they are, and left out by `encode` when None).
_OPTIONAL: dict[type, frozenset[str]] = {Batch: frozenset({"deadlines"}),
                                         Failed: frozenset({"traceback"}),
                                         ItemError: frozenset({"traceback"})}
_TYPED: dict[type, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    cls: tuple((n, k) for n, k in f if k is not _OUTPUT) for cls, f in _SCHEMA.items()}


def _as_object(msg: Message) -> dict[str, Any]:
    names = _NAMES.get(type(msg))
    if names is None:
        raise TypeError(f"not a protocol message: {type(msg).__name__}")
    obj = {"type": msg.TYPE}
    for name in names:
        value = getattr(msg, name)
        if value is not None or name not in _OPTIONAL.get(type(msg), ()):
            obj[name] = value
    return obj


def encode(msg: Message) -> bytes:
    """One message as a JSON line (ending in a newline). Raises TypeError for an object that
    is not a message, or a field that JSON cannot hold."""
    return dumps(_as_object(msg)) + b"\n"


def encode_all(msgs: Sequence[Message]) -> bytes:
    """Messages known at the same moment as one line: the message itself when there is one,
    else a JSON array of them, in order (one read and one parse on the other side). Raises
    TypeError as `encode`, ValueError for no messages."""
    if not msgs:
        raise ValueError("no messages to encode")
    if len(msgs) == 1:
        return encode(msgs[0])
    return dumps([_as_object(m) for m in msgs]) + b"\n"


def encode_lines(msgs: Sequence[Message], *, max_line_bytes: int = MAX_LINE_BYTES,
                 max_output_bytes: int = MAX_OUTPUT_BYTES) -> list[bytes]:
    """Messages known at the same moment as lines of at most `max_line_bytes` each (newline
    included), in order: one line as `encode_all` writes it when they fit, else consecutive
    messages share a line while it fits (a large output gets a line of its own). An
    ItemResult whose message is over `max_output_bytes` goes as an ItemError for its item,
    ``"ContractError: output too large (N bytes > cap)"``, as does one whose output JSON
    cannot encode (a lone surrogate in a string). Raises ValueError for no
    messages or another message over the line limit, TypeError as `encode`."""
    if not msgs:
        raise ValueError("no messages to encode")
    parts = []
    for m in msgs:
        part = _item_part(m, max_output_bytes) if isinstance(m, ItemResult) \
            else dumps(_as_object(m))
        if len(part) + 1 > max_line_bytes:
            raise ValueError(f"a {m.TYPE!r} message of {len(part)} bytes is over the line "
                             f"limit of {max_line_bytes}")
        parts.append(part)
    lines: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for part in parts:
        # A line of k >= 2 messages: "[" + k parts + (k - 1) commas + "]\n" = size + 2.
        if group and size + len(part) + 1 + 2 > max_line_bytes:
            lines.append(_line(group))
            group, size = [], 0
        group.append(part)
        size += len(part) + 1
    lines.append(_line(group))
    return lines


def _item_part(m: ItemResult, max_output_bytes: int) -> bytes:
    """An ItemResult's encoding; its item's ItemError's when the output is over
    `max_output_bytes` or JSON cannot encode it (a string that is not valid Unicode)."""
    try:
        part = dumps(_as_object(m))
    except (TypeError, ValueError) as e:
        why = str(e).encode("utf-8", "backslashreplace").decode()[:200]
        why = f"output cannot be encoded as JSON ({type(e).__name__}: {why})"
    else:
        if len(part) <= max_output_bytes:
            return part
        why = f"output too large ({len(part)} bytes > {max_output_bytes})"
    return dumps(_as_object(ItemError(m.batch_id, m.item_id, f"ContractError: {why}")))


def _line(parts: list[bytes]) -> bytes:
    if len(parts) == 1:
        return parts[0] + b"\n"
    # A part the standard library wrote (marked) marks the line: `loads` reads it alike.
    mark = FALLBACK_MARK if any(p[:1] == FALLBACK_MARK for p in parts) else b""
    return mark + b"[" + b",".join(parts) + b"]\n"


_ANY: tuple[type[Message], ...] = (*TO_WORKER, *FROM_WORKER)


@overload
def decode(line: bytes | str) -> Message: ...


@overload
def decode(line: bytes | str, expect: tuple[type[M], ...]) -> M: ...


def decode(line: bytes | str, expect: tuple[type, ...] = _ANY) -> Any:
    """One JSON line holding one message -> the message, which must be one of `expect`
    (TO_WORKER on the worker's side). Raises ProtocolError naming what is wrong."""
    obj = _parse(line)
    if not isinstance(obj, dict):
        raise ProtocolError(f"not a JSON object: {_clip(line)}")
    return _message(obj, expect, line)


@overload
def decode_all(line: bytes | str) -> list[Message]: ...


@overload
def decode_all(line: bytes | str, expect: tuple[type[M], ...]) -> list[M]: ...


def decode_all(line: bytes | str, expect: tuple[type, ...] = _ANY) -> list[Any]:
    """One JSON line from `encode` or `encode_all` -> its messages, in order, each one of
    `expect` (FROM_WORKER on the router's side). Raises ProtocolError naming what is wrong."""
    obj = _parse(line)
    if isinstance(obj, dict):
        return [_message(obj, expect, line)]
    if not isinstance(obj, list) or not obj:
        raise ProtocolError(f"not a JSON object or a non-empty array of them: {_clip(line)}")
    for o in obj:
        if not isinstance(o, dict):
            raise ProtocolError(f"an array element is not a JSON object: {_clip(line)}")
    return [_message(o, expect, line) for o in obj]


def _parse(line: bytes | str) -> Any:
    try:
        return loads(line)
    except ValueError as e:
        raise ProtocolError(f"not a JSON line ({e}): {_clip(line)}") from None


def _message(obj: dict[str, Any], expect: tuple[type, ...], line: bytes | str) -> Message:
    """The message `obj` holds (consumed), checked against its schema."""
    tag = obj.get("type")
    cls = _BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {tag!r} (known: {', '.join(_BY_TAG)}): "
                            f"{_clip(line)}")
    if cls not in expect:
        raise ProtocolError(f"a {tag!r} message is not expected here")
    optional = _OPTIONAL.get(cls, frozenset())
    if obj.keys() != _KEYS[cls] and not (_KEYS[cls] - optional <= obj.keys() <= _KEYS[cls]):
        missing = sorted(_KEYS[cls] - optional - obj.keys())
        extra = sorted(obj.keys() - _KEYS[cls])
        raise ProtocolError(f"{tag!r} message: missing fields {missing}, unexpected {extra}")
    for name, kinds in _TYPED[cls]:
        if name not in obj:
            continue
        value = obj[name]
        if not isinstance(value, kinds) or (value.__class__ is bool and kinds is not bool):
            raise ProtocolError(f"{tag!r} message: field {name!r} = {_clip(repr(value))} is "
                                f"not {_kind_names(kinds)}")
    del obj["type"]
    if cls is Load and min(obj["active_sequences"], obj["kv_cache_tokens"],
                           obj["kv_cache_capacity"]) < 0:
        raise ProtocolError(f"'load' message: a negative count: {_clip(line)}")
    if cls is Batch:
        obj["items"] = _items(obj["items"])
        if "deadlines" in obj:
            obj["deadlines"] = _deadlines(obj["deadlines"], len(obj["items"]))
    elif cls is BatchDone:
        obj["compute_s"] = float(obj["compute_s"])
    return cls(**obj)


def _items(raw: list) -> tuple[tuple[ItemId, Any], ...]:
    for pair in raw:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str | int)
                and not isinstance(pair[0], bool)):
            raise ProtocolError(f"'batch' message: an item is not an [item_id, input] pair: "
                                f"{_clip(repr(pair))}")
    return tuple((i, x) for i, x in raw)


def _deadlines(raw: list, rows: int) -> tuple[float, ...]:
    if len(raw) != rows or not all(isinstance(t, _NUMBER) and t.__class__ is not bool
                                   for t in raw):
        raise ProtocolError(f"'batch' message: deadlines must be {rows} numbers, one per "
                            f"item: {_clip(repr(raw))}")
    return tuple(float(t) for t in raw)


def _kind_names(kinds: type | tuple[type, ...]) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(k.__name__ for k in kinds)


def _clip(text: bytes | str, limit: int = 200) -> str:
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    text = text.rstrip("\n")
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["DROPPED_CANCELLED", "DROPPED_DEADLINE", "FROM_WORKER", "TO_WORKER", "Batch",
           "BatchDone", "Cancel", "Chunk", "Failed", "FromWorker", "ItemError", "ItemEvent",
           "ItemId", "ItemResult", "Load", "Message", "Phase", "Ping", "Pong", "Ready",
           "ToWorker", "decode", "decode_all", "encode", "encode_all", "encode_lines",
           "MAX_LINE_BYTES", "MAX_OUTPUT_BYTES"]
