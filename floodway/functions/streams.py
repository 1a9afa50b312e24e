"""A streamed output as one answer: what a client that did not ask for a stream receives.

    combine(["Hel", "lo"])                                   -> "Hello"
    combine([{"text": "Hel", "tokens": 1},
             {"text": "lo", "tokens": 1, "finish_reason": "stop"}])
                                    -> {"text": "Hello", "tokens": 2, "finish_reason": "stop"}
    combine([1, [2]])                                        -> [1, [2]]
    combine([])                                              -> ""
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def combine(chunks: Sequence[Any]) -> Any:
    """The chunks of one streamed item as one output. All str: joined. All dicts with a
    ``"text"`` key: one dict, ``"text"`` joined, ``"tokens"`` summed where chunks carry it
    (ints), every other key from the last chunk that has it (``finish_reason``, ``usage``);
    keys in order of first appearance. Anything else: the list of chunks. No chunks: ``""``.
    """
    if not chunks:
        return ""
    if all(isinstance(c, str) for c in chunks):
        return "".join(chunks)
    if all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in chunks):
        return _combine_texts(chunks)
    return list(chunks)


def _combine_texts(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    texts: list[str] = []
    tokens, counted = 0, False
    for c in chunks:
        for key, value in c.items():
            if key == "text":
                texts.append(value)
                out.setdefault("text", "")
            elif key == "tokens" and isinstance(value, int) and not isinstance(value, bool):
                tokens, counted = tokens + value, True
                out.setdefault("tokens", 0)
            else:
                out[key] = value   # the last chunk that has it wins
    out["text"] = "".join(texts)
    if counted:
        out["tokens"] = tokens
    return out


def chunk_tokens(chunk: Any) -> int:
    """Tokens a chunk carries: a dict's int ``"tokens"``, else 1 (one chunk, one token)."""
    if isinstance(chunk, dict):
        n = chunk.get("tokens")
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            return n
    return 1


__all__ = ["chunk_tokens", "combine"]
