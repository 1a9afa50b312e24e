"""OpenAI's wire formats, answers out: floodway outputs as OpenAI objects. Pure: ids and
times are arguments.

    embeddings_answer(model, outputs, encoding_format=, dimensions=)   -> {"object": "list", ...}
    output_type(ep), no_embeddings(R)        R of ``-> list[R]``; whether R cannot embed
    generated(model, output)                 -> Generated (text, finish_reason, token counts)
    completion_answer(kind, ...)             -> a "text_completion" / "chat.completion"
    StreamAnswer(kind, ...)                  -> the chunks of a streamed one, event by event
    models_answer(names, created)            -> GET /v1/models
    model_object(name, created)              -> GET /v1/models/{model}

Embedding outputs: a list of numbers per input, or an object ``{"embedding": [...],
"tokens": <int>}``. Generation outputs: the built-in engine's chunks (``{"text", "tokens",
"finish_reason", "usage": {"prompt_tokens", "completion_tokens"}}``), combined for a
buffered answer (`floodway.functions.streams.combine`), or plain strings from an engine of
the user's own.

Token counts (``usage``) are the endpoint's own, never estimated here: an embedding's
``prompt_tokens`` is the sum of the outputs' ``"tokens"`` when every output carries one,
else 0 (a plain vector says nothing of its tokens). A completion's ``prompt_tokens`` is
counted once per prompt (as OpenAI counts it with n > 1), from the engine's ``usage``;
``completion_tokens`` is the sum over the choices of the engine's ``usage`` (else the
output's summed ``"tokens"``); an engine that yields plain strings reports 0 for both.
"""

from __future__ import annotations

import base64
import collections.abc
import struct
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from floodway.errors import EndpointError, RequestError
from floodway.functions.endpoint import Endpoint

Kind = Literal["completion", "chat"]
OBJECT = {"completion": "text_completion", "chat": "chat.completion"}
CHUNK_OBJECT = {"completion": "text_completion", "chat": "chat.completion.chunk"}
ID_PREFIX = {"completion": "cmpl-", "chat": "chatcmpl-"}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _vector(model: str, i: int, output: Any) -> tuple[list[float], int | None]:
    """An embedding output -> (its numbers, its token count or None); RequestError 400
    naming ``model`` when it is not an embedding."""
    tokens = None
    if isinstance(output, dict) and "embedding" in output:
        tokens = _count(output.get("tokens"))
        output = output["embedding"]
    if not (isinstance(output, list) and output and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in output)):
        # Not a 5xx, though the endpoint is to blame: the openai client retries every 5xx
        # (and 408, 409, 429) twice, which would run the model twice more for the same
        # answer. The request named a model that does not embed: a 400 naming "model".
        raise RequestError(f"model {model!r} is not an embedding model: it answered "
                           f"input[{i}] with {type(output).__name__}, not an embedding (a "
                           "non-empty list of numbers, or an object with one as "
                           f"\"embedding\"); POST /v1/{model} serves it", status=400,
                           field="model")
    return output, tokens


_SCALARS = (str, bytes, bool, int, float, complex, type(None))
_SEQUENCES = (list, tuple, collections.abc.Sequence, set, frozenset)
_MAPPINGS = (dict, collections.abc.Mapping)


def output_type(ep: Endpoint) -> Any:
    """R of a non-streaming ``fn(...) -> list[R]``; None otherwise (any output)."""
    if ep.streaming:
        return None
    try:
        ret = typing.get_type_hints(ep.fn, include_extras=True).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: described as any output
        return None
    args = typing.get_args(ret)
    return args[0] if typing.get_origin(ret) is list and args else None


def _not_a_number(t: Any) -> bool:
    """Whether a vector's element type `t` is known not to be a number (bool is not one)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return _not_a_number(args[0])
    if origin in (Union, types.UnionType):
        return all(_not_a_number(a) for a in args)
    if t in (int, float):
        return False
    return t in _SCALARS or origin in (*_SEQUENCES, *_MAPPINGS) or t in (*_SEQUENCES, *_MAPPINGS)


def no_embeddings(r: Any) -> bool:
    """Whether outputs of type `r` (R of ``-> list[R]``) can never be embeddings as
    `embeddings_answer` takes them: text or a number, a sequence of anything but numbers,
    a mapping whose values are never one, a TypedDict or pydantic model without an
    ``embedding`` field that is one. False where it cannot be told (None: no annotation,
    Any, a bare ``dict``, an array or tensor type, a class of its own)."""
    origin, args = typing.get_origin(r), typing.get_args(r)
    if origin is Annotated:
        return no_embeddings(args[0])
    if origin in (Union, types.UnionType):
        return all(no_embeddings(a) for a in args)
    if r in _SCALARS:
        return True
    if origin in _SEQUENCES:
        items = [a for a in args if a is not Ellipsis]
        return any(_not_a_number(a) for a in items)
    if origin in _MAPPINGS:
        return len(args) == 2 and no_embeddings(args[1])
    fields = _fields(r)
    if fields is None:
        return False
    return "embedding" not in fields or no_embeddings(fields["embedding"])


def _fields(r: Any) -> dict[str, Any] | None:
    """The fields of a TypedDict or pydantic model `r` with their types; None for another
    type."""
    if typing.is_typeddict(r):
        try:
            return typing.get_type_hints(r)
        except Exception:  # noqa: BLE001 - unresolvable: cannot be told
            return None
    model_fields = getattr(r, "model_fields", None) if isinstance(r, type) else None
    if isinstance(model_fields, dict):
        return {name: f.annotation for name, f in model_fields.items()}
    return None


def b64_float32(vector: list[float]) -> str:
    """`vector` as OpenAI's base64 encoding: little-endian float32, base64 of the bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def embeddings_answer(model: str, outputs: list[Any], *,
                      encoding_format: Literal["float", "base64"] = "float",
                      dimensions: int | None = None) -> dict[str, Any]:
    """The embeddings answer for one output per input (``data[i]`` for input i). Raises
    RequestError(400, ``dimensions``) when `dimensions` is not the size the endpoint
    answers (floodway does not shorten embeddings), EndpointError for an output that is not
    an embedding."""
    data: list[dict[str, Any]] = []
    counts: list[int] = []
    unknown = False   # an output without its token count: no usage
    for i, output in enumerate(outputs):
        vector, tokens = _vector(model, i, output)
        if dimensions is not None and dimensions != len(vector):
            raise RequestError(f"dimensions: {dimensions} is not supported by model "
                               f"{model!r}, whose embeddings have {len(vector)} dimensions "
                               "(omit it, or send that)", status=400, field="dimensions")
        data.append({"object": "embedding", "index": i,
                     "embedding": b64_float32(vector) if encoding_format == "base64"
                     else vector})
        if tokens is None:
            unknown = True
        else:
            counts.append(tokens)
    prompt = sum(counts) if counts and not unknown else 0
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}


@dataclass(frozen=True)
class Generated:
    """One choice's generation: its text, why it ended, and the engine's token counts
    (None: not reported)."""

    text: str
    finish_reason: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _text_of(model: str, data: Any) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, dict) and isinstance(data.get("text"), str):
        return data["text"]
    raise EndpointError(f"endpoint {model!r} yielded {type(data).__name__} chunks, not text "
                        "(a string, or an object with a \"text\" string)")


def _finish(data: Any) -> str | None:
    reason = data.get("finish_reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else None


def _usage(data: Any) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of an output or chunk, None where not told."""
    if not isinstance(data, dict):
        return None, None
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    completion = _count(usage.get("completion_tokens"))
    return _count(usage.get("prompt_tokens")), \
        completion if completion is not None else _count(data.get("tokens"))


def generated(model: str, output: Any) -> Generated:
    """A combined generation output as a `Generated` (finish_reason "stop" when the
    endpoint did not say); EndpointError when it is not text."""
    prompt, completion = _usage(output)
    return Generated(_text_of(model, output), _finish(output) or "stop", prompt, completion)


def usage_of(choices: list[Generated], n: int) -> dict[str, int]:
    """OpenAI's usage for `choices` (n per prompt, in order): prompt tokens once per
    prompt, completion tokens of every choice (0 where the endpoint told none)."""
    prompt = sum(max((g.prompt_tokens or 0) for g in choices[i:i + n])
                 for i in range(0, len(choices), n))
    completion = sum(g.completion_tokens or 0 for g in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def completion_answer(kind: Kind, *, answer_id: str, created: int, model: str,
                      choices: list[Generated], n: int) -> dict[str, Any]:
    """A buffered answer: ``choices[i]`` for item i (``text``, or an assistant
    ``message``), and ``usage``."""
    out = []
    for i, g in enumerate(choices):
        choice: dict[str, Any] = {"index": i}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": g.text, "refusal": None}
        else:
            choice["text"] = g.text
        out.append({**choice, "logprobs": None, "finish_reason": g.finish_reason})
    return {"id": answer_id, "object": OBJECT[kind], "created": created, "model": model,
            "choices": out, "usage": usage_of(choices, n)}


class StreamAnswer:
    """The chunks of one streamed answer, from the endpoint's events in arrival order:
    `chunk(i, data)` per chunk of item (choice) i, `end(i, output)` when it ends, then
    `usage()` for ``stream_options.include_usage``. Each returns the OpenAI chunk object to
    send, or None when there is nothing new to tell. A chat choice's first chunk carries
    ``delta.role`` "assistant"; its finish_reason comes with its last chunk (or, when the
    endpoint's chunks carry none, in a chunk of its own at its end)."""

    def __init__(self, kind: Kind, *, answer_id: str, created: int, model: str, n_items: int,
                 n: int, include_usage: bool):
        self.kind, self.model, self.n, self.include_usage = kind, model, n, include_usage
        self.head = {"id": answer_id, "object": CHUNK_OBJECT[kind], "created": created,
                     "model": model}
        self.started = [False] * n_items
        self.finished = [False] * n_items
        self.counts: list[Generated] = [Generated("", "stop")] * n_items

    def _chunk(self, index: int, text: str, finish: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if not self.started[index]:
                delta["role"] = "assistant"
            if text or not self.started[index]:
                delta["content"] = text
            choice: dict[str, Any] = {"index": index, "delta": delta}
        else:
            choice = {"index": index, "text": text}
        self.started[index] = True
        out = {**self.head, "choices": [{**choice, "logprobs": None, "finish_reason": finish}]}
        if self.include_usage:
            out["usage"] = None   # as OpenAI: null on every chunk but the last
        return out

    def chunk(self, index: int, data: Any) -> dict[str, Any] | None:
        """The chunk for item `index`'s chunk `data` (a str, or a dict with "text")."""
        text, finish = _text_of(self.model, data), _finish(data)
        if self.finished[index] or (not text and finish is None and self.started[index]):
            return None
        self.finished[index] = finish is not None
        return self._chunk(index, text, finish)

    def end(self, index: int, output: Any) -> dict[str, Any] | None:
        """Item `index` ended with the combined `output`: its finish chunk, unless its
        chunks already carried one."""
        g = generated(self.model, output)
        self.counts[index] = Generated("", g.finish_reason, g.prompt_tokens,
                                       g.completion_tokens)
        if self.finished[index]:
            return None
        self.finished[index] = True
        return self._chunk(index, "", g.finish_reason)

    def usage(self) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        return {**self.head, "choices": [], "usage": usage_of(self.counts, self.n)}


def model_object(name: str, created: int) -> dict[str, Any]:
    """One endpoint as OpenAI's model object, owned by "floodway"."""
    return {"id": name, "object": "model", "created": created, "owned_by": "floodway"}


def models_answer(names: list[str], created: int) -> dict[str, Any]:
    """``GET /v1/models``: every endpoint as a model (`model_object`)."""
    return {"object": "list", "data": [model_object(name, created) for name in names]}


def openai_error(message: str, kind: str, param: str | None = None,
                 code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


__all__ = ["CHUNK_OBJECT", "ID_PREFIX", "OBJECT", "Generated", "Kind", "StreamAnswer",
           "b64_float32", "completion_answer", "embeddings_answer", "generated",
           "model_object", "models_answer", "openai_error", "usage_of"]
