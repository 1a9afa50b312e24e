"""`fw.Prompt`: one text-generation request item (`task="text-generation"`).

Wire form (one item of a request's ``inputs``), either a completion prompt or chat messages:

    {"prompt": "Once upon a time", "max_new_tokens": 32, "temperature": 0.7, "seed": 1}
    {"messages": [{"role": "user", "content": "hi"}], "stop": ["\\n"]}

A bare string is not a Prompt item (annotate ``str`` for that); `Loaded.generate` takes a
str, a Prompt, or a dict of its fields. Validation errors name the field and the value.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_STOPS = 4
MAX_STOP_CHARS = 64
MAX_SEED = 2**63 - 1


class Message(BaseModel):
    """One chat message: `role` (e.g. "system", "user", "assistant") and its `content`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str = Field(min_length=1, max_length=64)
    content: str


class Prompt(BaseModel):
    """A text-generation request.

    - `prompt` or `messages`: exactly one. Messages are rendered with the model's chat
      template (tokenizer_config.json ``chat_template``), else as ``role: content`` lines
      followed by ``assistant:``.
    - `max_new_tokens`: 1 .. the endpoint's `Generation.max_new_tokens` (None: that
      default); the cap is checked where the endpoint's config is known (a 422 naming it).
    - `temperature`: 0 (greedy: the most likely token) .. 2; `top_p`: in (0, 1], nucleus
      sampling (the smallest set of most likely tokens whose probability reaches top_p);
      `seed`: the same seed gives the same text (None: a fresh one).
    - `stop`: at most 4 strings of 1-64 characters (a str is one); the text is cut just
      before the first one generated, and generation ends (finish_reason "stop").
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    max_new_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
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
                raise ValueError(f"each stop string must have 1 to {MAX_STOP_CHARS} "
                                 f"characters, got {s[:80]!r} ({len(s)})")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Prompt:
        if (self.prompt is None) == (self.messages is None):
            given = "both" if self.prompt is not None else "neither"
            raise ValueError(f"exactly one of 'prompt' or 'messages' is required; got {given}")
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


__all__ = ["MAX_STOPS", "MAX_STOP_CHARS", "Message", "Prompt"]
