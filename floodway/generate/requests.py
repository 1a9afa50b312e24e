"""From a prompt item to a `Request` the engine runs: validated, rendered (chat messages),
tokenized, with its limits applied.

- ``max_new_tokens``: None takes the endpoint's default; above the endpoint's cap it is
  refused (422 naming the field); it is then cut to what the context has room for (the
  model's positions and the engine's cache capacity, minus the prompt), so a long prompt
  ends with finish_reason "length" sooner rather than failing;
- a prompt with no room left for one token is refused (422 naming ``prompt``); an empty
  prompt starts from the model's beginning-of-sequence token, as `transformers` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floodway.errors import RequestError
from floodway.generate.chat import read_template, render
from floodway.generate.sequence import Request


@dataclass(frozen=True)
class RequestLimits:
    """`max_new_tokens`: the default and cap of a request's; `context_tokens`: the most
    positions one sequence may fill (prompt + generated)."""

    max_new_tokens: int
    context_tokens: int


def to_prompt(value: Any) -> Any:
    """A `floodway.functions.prompts.Prompt` from a Prompt, a dict of its fields or a str.
    Raises RequestError (422) naming the first bad field and its value."""
    from pydantic import ValidationError

    from floodway.functions.prompts import Prompt

    try:
        return Prompt.of(value)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "prompt"
        shown = repr(err.get("input"))[:80]
        raise RequestError(f"{where} = {shown} is not allowed: {err.get('msg')}", status=422,
                           field=where) from None


class Tokenize:
    """Prompt text -> token ids with the build's tokenizer (no padding, no truncation), and
    chat messages -> text with its chat template."""

    def __init__(self, tokenizer_dir: Path, bos: int | None):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.template, self.specials = read_template(tokenizer_dir / "tokenizer_config.json")
        self.bos = bos

    def ids(self, prompt: Any) -> list[int]:
        text = (prompt.prompt if prompt.prompt is not None else
                render([m.model_dump() for m in prompt.messages], self.template, self.specials))
        ids = self.tokenizer.encode(text).ids
        if not ids:
            if self.bos is None:
                raise RequestError("prompt = '' is not allowed: this model has no "
                                   "beginning-of-sequence token to start from", status=422,
                                   field="prompt")
            ids = [self.bos]
        return ids


def make_request(value: Any, tok: Tokenize, limits: RequestLimits) -> Request:
    """`value` (see `to_prompt`) -> a Request. Raises RequestError (422) naming the field."""
    p = to_prompt(value)
    cap = limits.max_new_tokens
    max_new = p.max_new_tokens if p.max_new_tokens is not None else cap
    if max_new > cap:
        raise RequestError(f"max_new_tokens = {max_new} is not allowed: at most {cap} (the "
                           "endpoint's Generation.max_new_tokens)", status=422,
                           field="max_new_tokens")
    ids = tok.ids(p)
    room = limits.context_tokens - len(ids)
    if room < 1:
        where = "prompt" if p.prompt is not None else "messages"
        raise RequestError(f"{where}: {len(ids)} tokens is too long: at most "
                           f"{limits.context_tokens - 1} tokens leave room for an answer",
                           status=422, field=where)
    return Request(ids=tuple(ids), max_new_tokens=min(max_new, room),
                   temperature=p.temperature, top_p=p.top_p, seed=p.seed, stop=tuple(p.stop))


__all__ = ["RequestLimits", "Tokenize", "make_request", "to_prompt"]
