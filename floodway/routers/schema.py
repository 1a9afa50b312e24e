"""Wire formats: ``{"inputs": [...]}`` in, ``{"outputs": [...]}`` out, errors as
``{"error": {"type", "message", "field"}}``. The same for every endpoint.

`parse_predict` turns raw body bytes into validated inputs or raises RequestError whose
message names what was wrong (malformed JSON, a missing or unknown field, an empty list, the
index and problem of a bad item). Items are validated against the endpoint's item type
(`floodway.functions.items`: str, text pairs, images, arrays, ...) and returned in their wire
form, which the container decodes into what the endpoint function receives.
"""

from __future__ import annotations

import json
import re
import typing
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from floodway.errors import RequestError
from floodway.functions.items import BAD_ITEM, MODE_KEY, TOO_LARGE, WIRE
from floodway.functions.prompts import Prompt, unknown_field

# Items are verified on the router and kept in their JSON wire form (an image as its base64
# text, an array as {"b64", "dtype", "shape"}): the form that travels to the container.
_WIRE_CONTEXT = {MODE_KEY: WIRE}


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: list[Any]


class PredictResponse(BaseModel):
    outputs: list[Any]


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# A UTF-16 surrogate (U+D800-U+DFFF) as a JSON escape (\\ud800), or as the three bytes
# that encode one UTF-8-style (ED A0-BF xx: not UTF-8, but json.loads decodes a body's bytes
# with "surrogatepass"): the only ways a body can hold a string that is not valid Unicode.
# In UTF-8, ED is a lead byte and only 80-9F follow it, so a body without a match needs no
# walk.
_SURROGATE = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")


def may_hold_surrogates(body: bytes) -> bool:
    """Whether `body` may decode to a string that is not valid Unicode (`check_unicode`)."""
    return _SURROGATE.search(body) is not None


def printable(text: str) -> str:
    """`text` with any lone surrogate as its escape (``\\ud800``): safe in an answer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@lru_cache(maxsize=64)
def _cached_adapter(item_type: Any) -> TypeAdapter:
    return TypeAdapter(item_type)


def _item_adapter(item_type: Any) -> TypeAdapter:
    try:
        return _cached_adapter(item_type)
    except TypeError:   # unhashable Annotated metadata: built each time
        return TypeAdapter(item_type)


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON number (JSON has no NaN or infinities)")


def finite_float(literal: str) -> float:
    """A JSON number with a fraction or exponent as a float; ValueError for one past a
    64-bit float's range (``1e999``): Python would read it as infinity, which JSON cannot
    carry back (the worker pipe would make it null)."""
    value = float(literal)
    if value - value != 0.0:   # inf - inf is nan
        shown = literal if len(literal) <= 40 else literal[:40] + "..."
        raise ValueError(f"{shown} is past a 64-bit float's range (at most about 1.8e308)")
    return value


def _bad_unicode(item: Any) -> tuple[str, bool, UnicodeEncodeError] | None:
    """The first string (or object key) in `item` that is not valid Unicode (a lone
    surrogate) -> (where, relative to the item, e.g. ``".messages[0].content"``; whether it
    is an object's key (then `where` is that object); the error), else None. Walked with a
    stack, not recursion: an item may be nested as deeply as JSON allows."""
    stack: list[tuple[str, Any]] = [("", item)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                return where, False, e
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, dict):
            for k, v in reversed(list(value.items())):
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError as e:
                    return where, True, e
                stack.append((f"{where}.{k}", v))
    return None


def check_unicode(data: Any, *, status: int = 422) -> None:
    """RequestError(`status`) naming the first string in a decoded body `data` that is not
    valid Unicode (a lone surrogate): its path (``inputs[1][0]``, ``messages[0].content``),
    or for an object's key the object's (``inputs[1]``), or at the top level the key itself
    (escaped: ``\\ud800``). Such a string can be neither answered nor sent to a container or
    a job row, so it is refused with the body, before any work."""
    bad = _bad_unicode(data)
    if bad is None:
        return
    where, key, e = bad
    field = where.removeprefix(".") or printable(str(e.object))
    field = field if len(field) <= 80 else field[:77] + "..."
    what = "an object key" if key else "the string"
    raise RequestError(f"{field}: {what} is not valid Unicode ({e.reason} at character "
                       f"{e.start})", status=status, field=field)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (what the client sent, not Python's name)."""
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "number"), (float, "number"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null"


# What a client that sent these next to "inputs" meant, and how to ask for it.
_TOP_LEVEL_HINTS = {
    "stream": "; a stream is asked for with the request header 'Accept: text/event-stream' "
              "(SSE) or 'Accept: application/x-ndjson', on a streaming endpoint",
}


def _precheck(data: dict, max_inputs: int | None) -> None:
    """Refuse what needs no per-item validation first: unknown fields and too many items
    cost one look, not a validation of every key or item (a 4 MiB body of a million empty
    items would otherwise take a second to refuse)."""
    unknown = next((k for k in data if k != "inputs"), None)
    shown = None if unknown is None else unknown if len(unknown) <= 40 else unknown[:40] + "..."
    if "inputs" not in data:
        also = "" if shown is None else f" (and {shown!r} is not a field)"
        raise RequestError(f"missing required field 'inputs'{also}: send "
                           "{\"inputs\": [...]}", status=422, field="inputs")
    if unknown is not None:
        raise RequestError(f"unknown field {shown!r}: the only field is 'inputs'"
                           f"{_TOP_LEVEL_HINTS.get(unknown, '')}", status=422, field=shown)
    items = data.get("inputs")
    if max_inputs is not None and isinstance(items, list) and len(items) > max_inputs:
        raise RequestError(f"'inputs' has {len(items)} items; this endpoint takes at most "
                           f"{max_inputs} per request (split it)", status=413, field="inputs")


def parse_predict(body: bytes, item_type: Any = Any, *,
                  max_inputs: int | None = None) -> list[Any]:
    """Validate a request body; return its inputs, each validated as `item_type` and kept
    as plain JSON values (`floodway.functions.items`: an image as its base64 text, an array
    as ``{"b64", "dtype", "shape"}``, a pair as a list).

    Items are validated in order and the first bad one is the answer: the items after it
    are not looked at.

    Raises RequestError(400) for a body that is not a JSON object (or nested too deeply, or
    holding NaN / Infinity, which are not JSON),
    RequestError(413) for more than `max_inputs` items or an item over its size limit (an
    image's bytes or pixels), RequestError(422) for a missing/unknown field, an empty
    `inputs`, an item of the wrong type (not base64, a corrupt image, an array of another
    shape or dtype, ...), or a string anywhere in an item (a pair's, an object's key) that
    is not valid Unicode (a lone surrogate from a ``\\ud800`` escape). Item errors name the
    item: ``inputs[3]: ...``.
    """
    try:
        data = json.loads(body, parse_constant=_not_json, parse_float=finite_float)
    except (ValueError, UnicodeDecodeError) as e:
        why = str(e)
        if "int_max_str_digits" in why:   # Python's own advice means nothing to a client
            why = "a number has too many digits (at most 4300)"
        raise RequestError(f"request body is not valid JSON: {why}", status=400) from None
    except RecursionError:
        raise RequestError("request body is nested too deeply", status=400) from None
    if not isinstance(data, dict):
        raise RequestError(f'request body must be a JSON object like {{"inputs": [...]}}, '
                           f"got {_json_type(data)}", status=400)
    surrogates = may_hold_surrogates(body)
    if surrogates:
        # Its keys first, so that an unknown one is named (escaped) as not valid Unicode.
        check_unicode({k: None for k in data})
    _precheck(data, max_inputs)
    try:
        req = PredictRequest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = _loc(err["loc"])
        if err["type"] == "missing":
            msg = f"missing required field {field!r}: send {{\"inputs\": [...]}}"
        elif err["type"] == "extra_forbidden":
            msg = f"unknown field {field!r}: the only field is 'inputs'"
        else:
            msg = f"{field}: {err['msg']}"
        raise RequestError(msg, status=422, field=field) from None
    if not req.inputs:
        raise RequestError("'inputs' is empty: send at least one item", status=422,
                           field="inputs")
    if max_inputs is not None and len(req.inputs) > max_inputs:
        raise RequestError(f"'inputs' has {len(req.inputs)} items; this endpoint takes at most "
                           f"{max_inputs} per request (split it)", status=413, field="inputs")
    return validate_items(req.inputs, item_type, check_unicode=surrogates)


def validate_items(inputs: list[Any], item_type: Any, *, check_unicode: bool) -> list[Any]:
    """Each item validated as `item_type`, in order: the first bad one raises, and the items
    after it are never looked at (an image item's check costs a decode of its header). With
    `check_unicode`, each item's strings are checked for lone surrogates first, at any depth
    (they cannot be encoded as UTF-8: not on the worker pipe, nor in a job row)."""
    adapter = _item_adapter(item_type)
    plain = item_type is str or item_type is Any
    out = []
    for i, item in enumerate(inputs):
        bad = _bad_unicode(item) if check_unicode else None
        if bad is not None:
            raise _unicode_error(i, *bad)
        if item_type is Any or (item_type is str and isinstance(item, str)):
            out.append(item)   # nothing to check: no call into pydantic per item
            continue
        try:
            value = adapter.validate_python(item, context=_WIRE_CONTEXT)
        except ValidationError as e:
            raise _item_error(i, e.errors(), item_type) from None
        # Plain JSON again (a pair as a list, a pydantic model as an object): what travels
        # to the container, a job row or a Modal call; the container validates it into T.
        out.append(value if plain else adapter.dump_python(value, mode="json"))
    return out


def _unicode_error(index: int, where: str, key: bool, e: UnicodeEncodeError) -> RequestError:
    """The 422 for a string of item `index` that is not valid Unicode, at `where` within
    the item (`_bad_unicode`): its `field` the string's path (``inputs[0].prompt``), or the
    object's whose key it is."""
    field = f"inputs[{index}]{where}"
    field = field if len(field) <= 80 else field[:77] + "..."
    what = "an object key" if key else "the string"
    return RequestError(f"{field}: {what} is not valid Unicode ({e.reason} at character "
                        f"{e.start})", status=422, field=field)


def _tuple_wanted(item_type: Any) -> str | None:
    """What a fixed-length tuple item looks like on the wire (``tuple[str, str]``: a JSON
    array of 2 items [str, str]), or None for other item types."""
    args = typing.get_args(item_type)
    if typing.get_origin(item_type) is not tuple or not args or ... in args:
        return None
    names = ", ".join(getattr(a, "__name__", str(a)) for a in args)
    return f"a JSON array of {len(args)} items [{names}]"


def _item_error(index: int, errs: list[Any], item_type: Any) -> RequestError:
    """The RequestError for item `index`'s validation errors: the first one, named by the
    item's index (413 for an item over a size limit, else 422). An unknown field of an
    object item is told first (a misnamed field is the likely cause of the rest), with the
    fields to use instead (`_unknown_field`)."""
    errs = sorted(errs, key=lambda e: e["type"] != "extra_forbidden")   # stable
    first = {**errs[0], "loc": (index, *errs[0]["loc"])}
    field = "inputs" + _loc(tuple(first["loc"]))
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    if first["type"] in (BAD_ITEM, TOO_LARGE):   # the message says what came and was expected
        return RequestError(f"{field}: {first['msg']}{more}", field=field,
                            status=413 if first["type"] == TOO_LARGE else 422)
    if first["type"] == "extra_forbidden":
        return RequestError(f"{field}: {_unknown_field(item_type, errs[0]['loc'])}{more}",
                            status=422, field=field)
    pair = _tuple_wanted(item_type)
    if pair and first["type"] in ("missing", "too_long", "tuple_type") \
            and len(first["loc"]) <= 2:
        # pydantic names the missing position ("inputs[1][1]: Field required"): name the item.
        field = f"inputs[{first['loc'][0]}]"
        first = {**first, "msg": f"expected {pair}"}
    got = repr(first.get('input'))
    got = got if len(got) <= 80 else got[:77] + '...'
    return RequestError(f"{field}: {first['msg']}, got {got}{more}", status=422, field=field)


def _unknown_field(item_type: Any, loc: tuple[Any, ...]) -> str:
    """What to say of an object item's field at `loc` (within the item) that its type does
    not have: fw.Prompt says what to send instead; another pydantic model lists its fields."""
    if item_type is Prompt:
        return unknown_field(loc)
    name = str(loc[-1]) if loc else ""
    shown = name if len(name) <= 40 else name[:40] + "..."
    if len(loc) == 1 and isinstance(item_type, type) and issubclass(item_type, BaseModel):
        return f"unknown field {shown!r}; the item's fields: {', '.join(item_type.model_fields)}"
    return f"unknown field {shown!r}"


def error_body(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    return ErrorResponse(error=ErrorDetail(type=kind, message=message, field=field)).model_dump(
        exclude_none=True)
