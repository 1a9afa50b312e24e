"""OpenAI's parameter names for floodway's native item fields, on the OpenAI-compatible
routes: an item's validation error (``inputs[0].messages[1].content: ...``) or an input's
failure in its container (``inputs[0].prompt``: a prompt over the model's context) named
as the client sent it (``messages[1].content``, ``prompt``), with OpenAI's status (400 for
the native route's 422). Pure: no I/O.

    item_error(err, param_of)          a RequestError from the items' validation
    input_error(err, param_of, whole)  an EndpointError the input was to blame for, or the
                                       router's refusal of the whole ``inputs``

`param_of(i, field)`: the OpenAI parameter behind `field` of item `i` (the route knows it:
``max_new_tokens`` is ``max_tokens`` or ``max_completion_tokens``, a list of prompts is
``prompt[j]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from floodway.errors import EndpointError, RequestError

# fw.Prompt's fields by the OpenAI parameter that sets them.
PROMPT_PARAMS = {"prompt": "prompt", "messages": "messages", "max_new_tokens": "max_tokens",
                 "temperature": "temperature", "top_p": "top_p", "seed": "seed",
                 "stop": "stop"}
# An item's field: ``inputs[3]``, its field (``.messages``) and the path within that field
# (``[0].content``).
_ITEM_FIELD = re.compile(r"^inputs\[(\d+)\](?:\.(\w+))?((?:\[\d+\]|\.\w+)*)")
# What an item's error from the container says after naming the item: ``inputs[3]: `` and
# the item's field it blames, when it names one (``prompt: ``, `floodway.routers.batch_item`).
_ITEM_SAYS = re.compile(r"inputs\[\d+\]: (?:[A-Za-z_]\w*(?:\.\w+|\[\d+\])*(?: =|:) )?")


def _param(field: str | None, param_of: Callable[[int, str | None], str]) -> str | None:
    """The OpenAI parameter for a native item field (``inputs[0].messages[1].content`` ->
    ``messages[1].content``; ``inputs[2].max_new_tokens`` -> ``max_tokens``), None for a
    field that is not an item's."""
    m = _ITEM_FIELD.match(field or "")
    return None if m is None else param_of(int(m.group(1)), m.group(2)) + m.group(3)


def item_error(err: RequestError, param_of: Callable[[int, str | None], str]) -> RequestError:
    """`err` (from the validation of the items, ``inputs[i].<field>: ...``) renamed to the
    OpenAI parameter `param_of(i, field)` names (with the path within it:
    ``messages[0].content``); any other error as it is. An item's error is a 400 here
    (OpenAI answers bad parameters with 400), not the native route's 422."""
    param = _param(err.field, param_of)
    if param is None:
        return err
    message, field = str(err), err.field or ""
    if message.startswith(field):
        rest = message[len(field):]
    else:
        prefix = re.match(r"^inputs\[\d+\](?:\.\w+)?", message)
        rest = message[prefix.end():] if prefix else ": " + message
    return RequestError(f"{param}{rest}", status=400 if err.status == 422 else err.status,
                        field=param)


def input_error(err: Exception, param_of: Callable[[int, str | None], str],
                whole: str) -> Exception:
    """An input's failure from the container, or a refusal of the whole request's inputs
    (``inputs``: e.g. a sequence larger than the KV cache), renamed to OpenAI's parameter:
    an EndpointError the input was to blame for (4xx, `field` ``inputs[i].<field>``) ->
    the same error naming `param_of(i, field)`, its message what the container said of the
    input; a RequestError naming ``inputs`` -> naming `whole` (``messages``, ``prompt``).
    Anything else is returned as it is."""
    if isinstance(err, RequestError) and err.field == "inputs":
        return RequestError(str(err), status=err.status, field=whole)
    status = getattr(err, "status", 500)
    if not isinstance(err, EndpointError) or not 400 <= status < 500:
        return err
    param = _param(err.field, param_of) or whole
    message = str(err)
    said = list(_ITEM_SAYS.finditer(message))
    told = message[said[-1].end():] if said else message
    return EndpointError(f"{param}: {told}", status=status, field=param, kind=err.kind)


__all__ = ["PROMPT_PARAMS", "input_error", "item_error"]
