"""Rendering chat messages into one prompt text.

With the model's own template (tokenizer_config.json ``chat_template``, a Jinja2 template as
`transformers`' ``apply_chat_template`` renders it: variables ``messages``,
``add_generation_prompt``, the special tokens, and ``raise_exception``), in Jinja2's
immutable sandbox (a template comes with the model's files and may not touch Python
objects beyond its data). Without one: ``role: content`` lines, then ``assistant:``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from floodway.errors import RequestError

FALLBACK = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" \
           "{% if add_generation_prompt %}assistant:{% endif %}"


def read_template(tokenizer_config: Path) -> tuple[str | None, dict[str, str]]:
    """(chat_template or None, special tokens by name) of a tokenizer_config.json."""
    if not tokenizer_config.is_file():
        return None, {}
    cfg = json.loads(tokenizer_config.read_text())
    template = cfg.get("chat_template")
    if isinstance(template, list):       # named templates: take "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    specials = {k: v if isinstance(v, str) else (v or {}).get("content", "")
                for k, v in cfg.items() if k in ("bos_token", "eos_token", "pad_token",
                                                 "unk_token")}
    return (template if isinstance(template, str) else None), specials


def _raise(message: str) -> None:
    raise RequestError(f"messages: the chat template refused them: {message}", status=422,
                       field="messages")


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def render(messages: Sequence[dict[str, str]], template: str | None,
           specials: dict[str, str] | None = None) -> str:
    """The prompt text of `messages` (each {"role", "content"}), ending where the assistant's
    answer begins. Raises RequestError (422, field "messages") when the template refuses
    them or fails."""
    try:
        return _compile(template or FALLBACK).render(
            messages=[dict(m) for m in messages], add_generation_prompt=True,
            **(specials or {}))
    except RequestError:
        raise
    except Exception as e:  # noqa: BLE001 - a template error is the request's problem
        raise RequestError(f"messages: the chat template failed: {type(e).__name__}: {e}",
                           status=422, field="messages") from e


__all__ = ["FALLBACK", "read_template", "render"]
