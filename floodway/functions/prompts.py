"""`fw.Prompt`: one text-generation request item (`task="text-generation"`).

Wire form (one item of a request's ``inputs``), either a completion prompt or chat messages:

    {"prompt": "Once upon a time", "max_new_tokens": 32, "temperature": 0.7, "seed": 1}
    {"messages": [{"role": "user", "content": "hi"}], "stop": ["\\n"]}

A bare string is not a Prompt item (annotate ``str`` for that); `Loaded.generate` takes a
str, a Prompt, or a dict of its fields. Validation errors name the field and the value;
`unknown_field` says what to send instead of a field fw.Prompt does not have (OpenAI's
names for its fields, e.g. ``max_tokens``, are common).

A message's role is one of `ROLES`; "developer" (OpenAI's newer name for the system role)
is taken as "system", on the native route and the OpenAI-compatible ones alike
(`chat_role`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from floodway.functions.items import bad

MAX_STOPS = 4
MAX_STOP_CHARS = 64
MAX_SEED = 2**63 - 1
# The roles chat templates know (the Hugging Face chat-template convention); other names
# would be rendered as text by some templates and refused by others: refused here, alike.
ROLES = ("system", "user", "assistant")
ROLE_ALIASES = {"developer": "system"}
# What clients written for OpenAI send in place of fw.Prompt's fields.
_INSTEAD = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens",
            "text": "prompt", "input": "prompt", "inputs": "prompt"}


def chat_role(value: Any) -> Any:
    """`value` as one of ROLES ("developer" -> "system"). Raises a PydanticCustomError
    (floodway's bad-item error: a 422 on the native route, a 400 on the OpenAI ones, naming
    ``messages[i].role``) that names the value and the allowed roles."""
    if isinstance(value, str) and value in ROLES:
        return value
    if isinstance(value, str) and value in ROLE_ALIASES:
        return ROLE_ALIASES[value]
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    allowed = ", ".join(repr(r) for r in ROLES)
    raise bad(f"{shown} is not a chat role; allowed: {allowed} ('developer' is taken as "
              "'system')")


def unknown_field(loc: tuple[Any, ...]) -> str:
    """What to say of a field at `loc` (within one Prompt item: ``("max_tokens",)``,
    ``("messages", 0, "name")``) that fw.Prompt does not have: the field to use instead
    where there is one, else the fields there are."""
    name = str(loc[-1]) if loc else ""
    shown = name if len(name) <= 40 else name[:40] + "..."
    if len(loc) > 1:
        return f"unknown field {shown!r}: a message has only 'role' and 'content'"
    if name in _INSTEAD:
        return f"unknown field {shown!r}: use {_INSTEAD[name]!r} (fw.Prompt's name for it)"
    if name == "n":
        return ("unknown field 'n': one item is one answer; send n items (with different "
                "seeds) for n answers")
    if name == "stream":
        return ("unknown field 'stream': a stream is asked for with the request header "
                "'Accept: text/event-stream' (or application/x-ndjson), not per item")
    return f"unknown field {shown!r}; fw.Prompt's fields: {', '.join(Prompt.model_fields)}"


class Message(BaseModel):
    """One chat message: `role` (one of ROLES; "developer" is taken as "system") and its
    `content`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str
    content: str

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, v: Any) -> Any:
        return chat_role(v)


class Prompt(BaseModel):
    """A text-generation request.

    - `prompt` or `messages`: exactly one. Messages are rendered with the model's chat
      template (tokenizer_config.json ``chat_template``), else as ``role: content`` lines
      followed by ``assistant:``.
    - `max_new_tokens`: 1 .. the endpoint's `Generation.max_new_tokens` (None: that
      default); the cap is checked where the endpoint's config is known (a 422 naming it).
      The numbers are strict: an integer field takes a JSON integer only (not "4", true
      or 2.0), a float field a JSON number (an integer too), never a string or a boolean.
    - `temperature`: 0 (greedy: the most likely token) .. 2; `top_p`: in (0, 1], nucleus
      sampling (the smallest set of most likely tokens whose probability reaches top_p);
      `seed`: the same seed gives the same text (None: a fresh one).
    - `stop`: at most 4 strings of 1-64 characters (a str is one); the text is cut just
      before the first one generated, and generation ends (finish_reason "stop").
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    # strict: "4", true and 2.0 are not integers, "0.5" is not a number (a number that is
    # an integer, 1, is a float); as the OpenAI-compatible routes validate theirs.
    max_new_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, strict=True)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, strict=True)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOPS)

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("stop")
    @classmethod
    def _stop_lengths(cls, v: list[str]) -> list[str]:
        for s in v:
            if not 1 <= len(s) <= MAX_STOP_CHARS:
                shown = repr(s) if len(s) <= 40 else repr(s[:37]) + "..."
                raise bad(f"each stop string must have 1 to {MAX_STOP_CHARS} characters; "
                          f"{shown} has {len(s)}")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Prompt:
        if self.prompt is not None and self.messages is not None:
            raise bad("give either 'prompt' or 'messages', not both")
        if self.prompt is None and self.messages is None:
            raise bad("give 'prompt' (text) or 'messages' (a list of {\"role\", "
                      "\"content\"})")
        return self

    @classmethod
    def of(cls, value: Any) -> Prompt:
        """A Prompt from a Prompt, a dict of its fields, or a str (the prompt). Raises
        pydantic.ValidationError naming the field."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(prompt=value)
        if isinstance(value, BaseModel):
            value = value.model_dump()
        return cls.model_validate(value)


__all__ = ["MAX_STOPS", "MAX_STOP_CHARS", "ROLES", "ROLE_ALIASES", "Message", "Prompt",
           "chat_role", "unknown_field"]
