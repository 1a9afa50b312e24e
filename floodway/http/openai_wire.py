"""OpenAI's wire formats, requests in: the bodies of ``POST /v1/embeddings``,
``/v1/completions`` and ``/v1/chat/completions`` (as the official ``openai`` client v1+
sends them), checked and turned into floodway items. Pure: no I/O, no clock.

    parse_embeddings(body, models=) -> EmbeddingsRequest   embedding_items(req) -> list[str]
    parse_completion(body, models=) -> CompletionRequest   completion_items(req) -> list[dict]
    parse_chat(body, models=)       -> ChatRequest         chat_items(req)       -> list[dict]

(An item's error renamed to OpenAI's parameters: `floodway.http.openai_params`.)

Every refusal is a RequestError(400) whose `field` is OpenAI's parameter name. A field that
would change what is generated and that floodway does not do (``tools``, ``logprobs``,
``response_format`` json, penalties, ...) is refused unless it holds its neutral value; a
few that change nothing here (``user``, ``metadata``, ``store``, ...) are ignored; any
other unknown field is refused, as OpenAI refuses an unrecognized argument, saying what to
send instead where that is known (``max_new_tokens``: ``max_tokens``; ``prompt`` on chat
completions: ``messages``, or the completions route; `HINTS`). A missing ``model`` lists
`models`, the endpoints (as an unknown one does). Chat roles follow fw.Prompt's rule
(`floodway.functions.prompts.chat_role`: "system", "user", "assistant"; "developer" is
"system").

Completion items are `fw.Prompt` objects in their JSON form: ``{"prompt" | "messages",
"max_new_tokens", "temperature", "top_p", "seed", "stop"}``; ``n`` > 1 gives n items per
prompt (choice ``i * n + j`` is prompt i's j-th), with seeds ``seed + j`` when a seed is
given (so that the n choices differ, and each is reproducible). OpenAI takes any int64
seed, fw.Prompt 0 .. 2**63 - 1: the item's seed is ``(seed + j) mod 2**63`` (`item_seed`;
a negative seed, or one so large that ``seed + j`` passes 2**63 - 1, wraps round, the same
way every time). ``stream_options`` without ``stream: true`` is a 400, as OpenAI answers
it. The answers are built by `floodway.http.openai_answers`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from floodway.errors import RequestError
from floodway.functions.items import BAD_ITEM
from floodway.functions.prompts import MAX_SEED, chat_role
from floodway.routers.schema import check_unicode, finite_float, may_hold_surrogates

# OpenAI's own limit on n (the API reference: "n ... between 1 and 128").
MAX_N = 128
# OpenAI's sampling temperature range (0 to 2); its default is 1.0, where floodway's
# fw.Prompt defaults to greedy (0.0): an OpenAI request without one samples at 1.0.
OPENAI_DEFAULT_TEMPERATURE = 1.0


def _neutral_none(v: Any) -> bool:
    return v is None


def _neutral_zero(v: Any) -> bool:
    return v is None or (type(v) in (int, float) and v == 0)


def _neutral_false(v: Any) -> bool:
    return v is None or v is False


def _neutral_empty(v: Any) -> bool:
    return v is None or v == {} or v == []


# Fields that change what is generated, accepted only with the value that changes nothing.
_COMMON_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "frequency_penalty": _neutral_zero, "presence_penalty": _neutral_zero,
    "logit_bias": _neutral_empty,
}
COMPLETION_NEUTRAL = {**_COMMON_NEUTRAL, "logprobs": _neutral_none, "echo": _neutral_false,
                      "suffix": _neutral_none}
CHAT_NEUTRAL = {
    **_COMMON_NEUTRAL, "logprobs": _neutral_false, "top_logprobs": _neutral_zero,
    "tools": _neutral_empty, "functions": _neutral_empty,
    "tool_choice": lambda v: v is None or v == "none",
    "function_call": lambda v: v is None or v == "none",
    "response_format": lambda v: v is None or v == {"type": "text"},
    "modalities": lambda v: v is None or v == ["text"],
    "audio": _neutral_none, "prediction": _neutral_none, "reasoning_effort": _neutral_none,
    "web_search_options": _neutral_none, "verbosity": _neutral_none,
}
# Fields that change nothing floodway does: accepted and ignored.
IGNORED = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls",
                     "safety_identifier", "prompt_cache_key"})
# What to send instead of an unknown field, by route: fw.Prompt's (native) names, and the
# other generation route's input.
_INPUTS_HINT = "this route takes OpenAI's request shape; POST /v1/<model> takes {\"inputs\"}"
HINTS: dict[str, dict[str, str]] = {
    "embeddings": {"inputs": "use input; " + _INPUTS_HINT},
    "completions": {"max_new_tokens": "use max_tokens",
                    "messages": "use prompt, or POST /v1/chat/completions for messages",
                    "inputs": "use prompt; " + _INPUTS_HINT},
    "chat": {"max_new_tokens": "use max_tokens (or max_completion_tokens)",
             "prompt": "use messages, or POST /v1/completions for a prompt",
             "inputs": "use messages; " + _INPUTS_HINT},
}


M = TypeVar("M", bound=BaseModel)


class _Strict(BaseModel):
    # strict: "1" is not a number, 1 is not true (as OpenAI's own validation).
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None   # sent by newer clients; nothing to hide here


class EmbeddingsRequest(_Strict):
    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)


class _Sampling(_Strict):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int | None = Field(default=None, ge=1, le=MAX_N)
    seed: int | None = Field(default=None, ge=-2**63, le=2**63 - 1)   # OpenAI's int64
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None

    @property
    def choices_per_prompt(self) -> int:
        return self.n or 1

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    best_of: int | None = Field(default=None, ge=1)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    role: str                     # fw.Prompt's roles; "developer" becomes "system"
    content: str | list[TextPart] | None = None
    name: str | None = None       # a participant's name: not part of the chat template
    refusal: str | None = None    # an earlier answer's refusal, sent back by clients

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, v: Any) -> Any:
        return chat_role(v)


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


def _shown(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON number (JSON has no NaN or infinities)")


def load_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; RequestError(400) for anything else, and for a string or
    key in it that is not valid Unicode (a lone surrogate), naming where
    (`floodway.routers.schema.check_unicode`: ``messages[0].content``)."""
    try:
        data = json.loads(body, parse_constant=_not_json, parse_float=finite_float)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the request body is not valid JSON: {e}", status=400) from None
    except RecursionError:
        raise RequestError("the request body is nested too deeply", status=400) from None
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object", status=400)
    if may_hold_surrogates(body):
        check_unicode(data, status=400)
    return data


def _screen(data: dict[str, Any], known: frozenset[str],
            neutral: dict[str, Callable[[Any], bool]],
            hints: dict[str, str] | None = None) -> dict[str, Any]:
    """`data` without the ignored fields and the neutral ones; refuses an unsupported
    field with another value (naming it and the value) and an unknown field (saying what
    to send instead when `hints` knows)."""
    out = {}
    for key, value in data.items():
        if key in known:
            out[key] = value
        elif key in neutral:
            if not neutral[key](value):
                raise RequestError(f"{key}: {_shown(value)} is not supported by this server "
                                   "(omit it, or send its default)", status=400, field=key)
        elif key not in IGNORED:
            shown = key if len(key) <= 40 else key[:40] + "..."
            hint = (hints or {}).get(key)
            raise RequestError(f"Unrecognized request argument supplied: {shown}"
                               f"{f' ({hint})' if hint else ''}", status=400, field=shown)
    return out


def _token_ids(value: Any) -> bool:
    """Whether `value` is OpenAI's token-id form of an input: [int, ...] or [[int, ...]]."""
    if not isinstance(value, list) or not value:
        return False
    first = value[0]
    return (isinstance(first, int) and not isinstance(first, bool)) or (
        isinstance(first, list) and all(isinstance(t, int) for t in first))


def _union_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none")
                                      or part.startswith(("list[", "dict[")))


def _validated(model: type[M], data: dict[str, Any], models: Iterable[str] = ()) -> M:
    """`data` as `model`; RequestError(400) naming the first bad field (a missing ``model``
    with the endpoints, `models`, to name)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        # A union's failure names each member tried ("input.str", "input.list[str].1"):
        # the member names are dropped, and the deepest error (the member that matched
        # furthest: a list for a list) is the one told.
        errs = [(tuple(p for p in err["loc"] if not _union_tag(p)), err) for err in e.errors()]
        top = errs[0][0][:1]   # the first field that failed, then its deepest error
        loc, err = max((le for le in errs if le[0][:1] == top), key=lambda le: len(le[0]))
        field = _loc(loc) or None
        if err["type"] == "missing":
            names = ""
            if field == "model":
                names = "; it names the endpoint: one of " + (", ".join(sorted(models))
                                                             or "(none)")
            raise RequestError(f"{field}: a required field is missing{names}", status=400,
                               field=field) from None
        if err["type"] == BAD_ITEM:   # the message names the value and what is allowed
            raise RequestError(f"{field}: {err['msg']}", status=400, field=field) from None
        got = _shown(err.get("input"))
        raise RequestError(f"{field}: {err['msg']}, got {got}", status=400,
                           field=field) from None


def _refuse_token_ids(data: dict[str, Any], field: str) -> None:
    if _token_ids(data.get(field)):
        raise RequestError(f"{field}: token-id arrays are not supported by this server; send "
                           "text (a string or a list of strings)", status=400, field=field)


def _stream_options(req: _Sampling) -> None:
    """``stream_options`` only with ``stream: true`` (as OpenAI answers it)."""
    if req.stream_options is not None and not req.stream:
        raise RequestError("stream_options: only allowed when stream is true (it sets what a "
                           "stream carries)", status=400, field="stream_options")


def parse_embeddings(body: bytes, *, models: Iterable[str] = ()) -> EmbeddingsRequest:
    """An embeddings request; RequestError(400) naming the field otherwise (token-id
    ``input`` is refused: floodway's embedding endpoints take text). `models`: the
    endpoints, listed when ``model`` is missing."""
    data = load_object(body)
    _refuse_token_ids(data, "input")
    req = _validated(EmbeddingsRequest, _screen(data, frozenset(EmbeddingsRequest.model_fields),
                                                {}, HINTS["embeddings"]), models)
    if isinstance(req.input, list) and not req.input:
        raise RequestError("input: an empty list; send at least one string", status=400,
                           field="input")
    return req


def parse_completion(body: bytes, *, models: Iterable[str] = ()) -> CompletionRequest:
    """A completions request (``prompt``: a string or a list of strings)."""
    data = load_object(body)
    _refuse_token_ids(data, "prompt")
    req = _validated(CompletionRequest,
                     _screen(data, frozenset(CompletionRequest.model_fields), COMPLETION_NEUTRAL,
                             HINTS["completions"]), models)
    if isinstance(req.prompt, list) and not req.prompt:
        raise RequestError("prompt: an empty list; send at least one string", status=400,
                           field="prompt")
    _stream_options(req)
    if req.best_of not in (None, req.choices_per_prompt):
        raise RequestError(f"best_of: {req.best_of} is not supported by this server (only "
                           "best_of equal to n)", status=400, field="best_of")
    return req


def parse_chat(body: bytes, *, models: Iterable[str] = ()) -> ChatRequest:
    """A chat completions request (text messages: ``content`` a string or text parts)."""
    data = load_object(body)
    req = _validated(ChatRequest, _screen(data, frozenset(ChatRequest.model_fields), CHAT_NEUTRAL,
                                          HINTS["chat"]), models)
    if req.max_tokens is not None and req.max_completion_tokens is not None \
            and req.max_tokens != req.max_completion_tokens:
        raise RequestError("max_tokens and max_completion_tokens differ; send one of them",
                           status=400, field="max_completion_tokens")
    _stream_options(req)
    return req


def embedding_items(req: EmbeddingsRequest) -> list[str]:
    """The texts to embed, one item per ``input`` entry."""
    return [req.input] if isinstance(req.input, str) else list(req.input)


def _sampling(req: _Sampling, max_tokens: int | None) -> list[dict[str, Any]]:
    """The sampling fields of each of the n items of one prompt, as fw.Prompt fields."""
    base: dict[str, Any] = {"temperature": OPENAI_DEFAULT_TEMPERATURE
                            if req.temperature is None else req.temperature}
    if max_tokens is not None:
        base["max_new_tokens"] = max_tokens
    if req.top_p is not None:
        base["top_p"] = req.top_p
    if req.stop is not None:
        base["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    n = req.choices_per_prompt
    return [base if req.seed is None else {**base, "seed": item_seed(req.seed, j)}
            for j in range(n)]


def item_seed(seed: int, j: int) -> int:
    """fw.Prompt's seed for choice `j` of a request with OpenAI's `seed` (any int64):
    ``(seed + j) mod 2**63``, in fw.Prompt's range 0 .. 2**63 - 1. The same request gives
    the same seeds; a seed from 0 to 2**63 - 1 - j is its own value plus j."""
    return (seed + j) % (MAX_SEED + 1)


def completion_items(req: CompletionRequest) -> list[dict[str, Any]]:
    """fw.Prompt items (wire form): n per prompt, choice ``i * n + j``."""
    prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
    per = _sampling(req, req.max_tokens)
    return [{"prompt": p, **s} for p in prompts for s in per]


def chat_messages(req: ChatRequest) -> list[dict[str, str]]:
    """The messages as fw.Prompt's ``{"role", "content"}``: text parts joined by newlines
    (as vLLM joins them), no content as "", and "developer" (OpenAI's newer name for the
    system role) as "system", which chat templates know (`chat_role`, at parsing)."""
    out = []
    for m in req.messages:
        if isinstance(m.content, list):
            content = "\n".join(p.text for p in m.content)
        else:
            content = m.content or ""
        out.append({"role": m.role, "content": content})
    return out


def chat_items(req: ChatRequest) -> list[dict[str, Any]]:
    """fw.Prompt items (wire form) for one conversation: n of them."""
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None \
        else req.max_tokens
    messages = chat_messages(req)
    return [{"messages": messages, **s} for s in _sampling(req, max_tokens)]


__all__ = ["CHAT_NEUTRAL", "COMPLETION_NEUTRAL", "HINTS", "IGNORED", "MAX_N",
           "OPENAI_DEFAULT_TEMPERATURE", "ChatRequest", "CompletionRequest",
           "EmbeddingsRequest", "Message", "StreamOptions", "chat_items", "chat_messages",
           "completion_items", "embedding_items", "item_seed", "load_object", "parse_chat",
           "parse_completion", "parse_embeddings"]
