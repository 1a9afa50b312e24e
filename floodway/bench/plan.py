"""What a bench run sends: each request of a per-request trace at its time (scaled), with
its inputs.

    plan_requests(trace, inputs, time_scale=1.0, duration_s=None, start_s=0.0) -> list[Planned]

The trace is read by `floodway.sim.read_trace` (the simulator's formats). A request is
sent `(t - t0) / time_scale` seconds after the replay starts, `t0` being the trace's first
arrival plus `start_s` (trace seconds skipped: the replay starts that far into the trace,
at its first arrival from there): `time_scale` 2 replays twice as fast (twice the rate), 0.5
at half the rate. `duration_s` keeps the requests sent in the first that many seconds.
`Planned.index` is the request's row in the trace (0-based, in time order), so a replay of
a slice names the rows it sent.

Inputs (`Inputs`): one item per request. For text items (``str``, or `fw.Prompt`'s prompt)
with a trace that has a ``ContextTokens`` column, the text is about that many tokens long
(`TOKENS_PER_WORD`, at most `max_words` words), else a short fixed text; every text starts
with its request's index ("#17"), so that no two are equal and a response cache answers none of
them. An item given as JSON (`json_item`) is sent as is, by every request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from floodway.errors import FloodwayError
from floodway.sim.trace import Trace

# English text in a WordPiece / BPE vocabulary: about 1.3 tokens a word (all-MiniLM's
# tokenizer on the README's texts: 1.25-1.35).
TOKENS_PER_WORD = 1.3
# The replay mix: texts of 1-200 words; longer ones cost an embedding model its
# window anyway.
MAX_WORDS = 200
SHORT_WORDS = 8
_WORDS = ("a burst of traffic meets a warm pool that batches what it can serve within the "
          "deadline spills the rest to cold containers or async jobs and sheds fast when "
          "neither fits").split()
KINDS = ("text", "prompt", "json")


@dataclass(frozen=True)
class Planned:
    """One request to send: `send_s` seconds after the replay starts, body
    ``{"inputs": inputs}``; `tokens` its trace's ContextTokens (None without)."""

    index: int
    send_s: float
    inputs: list[Any]
    tokens: int | None = None


@dataclass(frozen=True)
class Inputs:
    """How a request's item is made: `kind` "text" (a str item), "prompt" (an fw.Prompt:
    ``{"prompt": text}``, with ``max_new_tokens`` from GeneratedTokens capped at
    `max_new_tokens` when that is given) or "json" (`json_item`, as is)."""

    kind: str = "text"
    json_item: Any = None
    max_words: int = MAX_WORDS
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FloodwayError(f"input kind must be one of {KINDS}, got {self.kind!r}")
        if self.max_words < 1:
            raise FloodwayError(f"--max-words must be >= 1, got {self.max_words}")

    def item(self, index: int, context: int | None, generated: int | None) -> Any:
        if self.kind == "json":
            return self.json_item
        text = text_of(index, context, self.max_words)
        if self.kind == "text":
            return text
        prompt: dict[str, Any] = {"prompt": text}
        if generated is not None and self.max_new_tokens is not None:
            prompt["max_new_tokens"] = max(1, min(generated, self.max_new_tokens))
        return prompt


def text_of(index: int, tokens: int | None, max_words: int = MAX_WORDS) -> str:
    """A text of ceil(`tokens` / TOKENS_PER_WORD) words (SHORT_WORDS when None), 1 to
    `max_words`, the first being "#<index>"."""
    n = SHORT_WORDS if tokens is None else math.ceil(tokens / TOKENS_PER_WORD)
    n = max(1, min(max_words, n))
    words = [_WORDS[i % len(_WORDS)] for i in range(n - 1)]
    return " ".join([f"#{index}", *words])


def plan_requests(trace: Trace, inputs: Inputs, time_scale: float = 1.0,
                  duration_s: float | None = None, start_s: float = 0.0) -> list[Planned]:
    """The replay of `trace` (module docstring). Raises FloodwayError for a time scale or
    duration that is not positive, a negative start, or when no request falls within the
    duration."""
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise FloodwayError(f"--time-scale must be a number > 0, got {time_scale}")
    if duration_s is not None and not duration_s > 0:
        raise FloodwayError(f"--duration-s must be > 0, got {duration_s}")
    if not (start_s >= 0 and math.isfinite(start_s)):
        raise FloodwayError(f"--start-s must be a number >= 0, got {start_s}")
    t = trace.times_s
    first = int(np.searchsorted(t, t[0] + start_s, side="left"))
    if first >= t.size:
        raise FloodwayError(f"--start-s {start_s:g}: the trace ends {t[-1] - t[0]:.1f} s "
                            "after its first arrival")
    offsets = (t - t[first]) / time_scale
    ctx, gen = trace.prompt_tokens, trace.generated_tokens
    out: list[Planned] = []
    for i in range(first, t.size):
        at = float(offsets[i])
        if duration_s is not None and at >= duration_s:
            break                           # times are sorted: the rest are later
        c = None if ctx is None else int(ctx[i])
        g = None if gen is None else int(gen[i])
        out.append(Planned(i, at, [inputs.item(i, c, g)], c))
    if not out:
        raise FloodwayError("no request of the trace falls within --duration-s")
    return out


__all__ = ["KINDS", "MAX_WORDS", "TOKENS_PER_WORD", "Inputs", "Planned", "plan_requests",
           "text_of"]
