"""Calling the user's endpoint function, as the batch worker (`floodway.runtime.worker`), the
streaming worker (`floodway.runtime.stream_worker`) and the Modal class all do: its inputs
decoded from their wire form (`decode_inputs`), its outputs as JSON values (`to_jsonable`),
what it raised as an item's message (`error_text`) and, for the server log, its traceback
(`error_trace`), and what ends the worker rather than an item (`is_fatal`).

Only the standard library is imported at the top: a container's cold start pays for what it
imports (`floodway.functions.items` and `floodway.runtime.protocol` load where first needed).
"""

from __future__ import annotations

import numbers
import os


class ContractError(Exception):
    """The endpoint function broke its contract (output count, or an output JSON cannot
    carry)."""


def is_fatal(e: BaseException) -> bool:
    """What the worker lets end it: Ctrl-C (and a generator's close). Anything else the
    function raises, SystemExit included, fails its items, not the container."""
    return isinstance(e, KeyboardInterrupt | GeneratorExit)


_PLAIN = (str, int, float, bool, type(None))
_PLAIN_TYPES = frozenset(_PLAIN)


def to_jsonable(value):
    """An output as plain JSON values: numpy arrays and scalars (anything with `tolist`) as
    lists and numbers, tuples as lists, dicts (str or int keys) and lists walked. Raises
    ContractError for what JSON cannot carry."""
    if type(value) in _PLAIN_TYPES:
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        kind = getattr(getattr(value, "dtype", None), "kind", "f")
        if kind == "O":   # an object array: its elements walked
            return to_jsonable(tolist())
        if kind not in "biufU":
            raise ContractError(f"returned an array of dtype {value.dtype}, which JSON cannot "
                                "carry (numbers, booleans or strings)")
        return tolist()
    if isinstance(value, list | tuple):
        if _PLAIN_TYPES.issuperset(map(type, value)):   # the common case, at C speed: no walk
            return value if isinstance(value, list) else list(value)
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, _PLAIN):   # a subclass, e.g. a str or int enum
        return value
    raise ContractError(f"returned a {type(value).__name__}, which JSON cannot carry (allowed: "
                        "numbers, strings, booleans, None, lists, dicts, numpy arrays)")


def _key(k) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, numbers.Integral):   # as json.dumps writes int keys (numpy's too)
        return str(int(k))
    raise ContractError(f"returned a dict with a {type(k).__name__} key (JSON keys are strings)")


def error_text(e: BaseException) -> str:
    """An item's ItemError message, ``"Type: message"`` (valid UTF-8 whatever the message
    holds, a lone surrogate escaped); ``"InputError: message"`` for a
    `floodway.errors.RequestError` (e.g. the built-in engine refusing a prompt too long for
    its context): the input was to blame, and the router answers it as a client error
    (`floodway.routers.batch_item.item_failed`)."""
    from floodway.errors import RequestError

    kind = "InputError" if isinstance(e, RequestError) else type(e).__name__
    return f"{kind}: {e}".encode("utf-8", "backslashreplace").decode("utf-8")


# The most characters of a traceback a worker sends for the server log (the last ones kept:
# where it raised).
MAX_TRACEBACK_CHARS = 16_000
# Frames of these files lead into the user's code (floodway calling it; asyncio and the
# thread pool carrying a streaming function's steps): left out of its traceback.
_CALLER_DIRS = (os.path.dirname(os.__file__),)


def error_trace(e: BaseException) -> str | None:
    """The traceback of what the user's code raised, as Python prints it, for the server log
    (never for the client): the frames that led into the user's code are left out, and the
    text is cut to its last MAX_TRACEBACK_CHARS. The message alone for a ContractError
    (floodway's own check of what the function returned); None for a FloodwayError (e.g. the
    input was to blame: its message says all)."""
    from floodway.errors import FloodwayError

    if isinstance(e, ContractError):
        return error_text(e)
    if isinstance(e, FloodwayError):
        return None
    import traceback

    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None and _caller_frame(tb.tb_frame):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "Traceback (cut to its last lines):\n..." + text[-MAX_TRACEBACK_CHARS:]
    return text


def _caller_frame(frame) -> bool:
    name = frame.f_code.co_filename
    return (name.startswith(_CALLER_DIRS) and "site-packages" not in name) \
        or os.path.dirname(name) == _RUNTIME_DIR


_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))


def decode_inputs(fn, batch_id: int, items: list) -> tuple[list, list]:
    """(items with each input as `fn` receives it, ItemErrors of those that do not decode).
    Inputs arrive in their wire form (`floodway.routers.schema.parse_predict`); an image is
    decoded and an array built here, in the container (`floodway.functions.items`): a
    corrupt image fails alone, and so does each image past the batch's decoded-pixel limit
    (`ImageSpec.max_batch_pixels`, summed in a `pixel_tally`)."""
    from floodway.functions.items import item_decoder, pixel_tally

    decode = item_decoder(fn)
    if decode is None:
        return items, []
    from floodway.runtime.protocol import ItemError

    ok, failed = [], []
    with pixel_tally():
        for item_id, x in items:
            try:
                ok.append((item_id, decode(x)))
            except BaseException as e:  # noqa: BLE001 - a bad item fails alone
                if is_fatal(e):
                    raise
                why = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
                # The input was bad, not the function (which never saw it).
                failed.append(ItemError(batch_id, item_id, f"InputError: {why}"))
    return ok, failed


__all__ = ["MAX_TRACEBACK_CHARS", "ContractError", "decode_inputs", "error_text", "error_trace",
           "is_fatal", "to_jsonable"]
