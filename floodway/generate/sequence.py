"""One sequence of the engine: its request, cache, sampler, text and the chunks it yields.

A chunk is a dict ``{"text": <delta>, "tokens": <tokens generated since the last chunk>}``;
the last one also has ``"finish_reason"`` ("stop": an end-of-sequence token or a stop
string; "length": ``max_new_tokens`` reached) and ``"usage"`` ``{"prompt_tokens",
"completion_tokens"}``. The end-of-sequence token counts as a completion token but has no
text; a stop string and what follows it are not sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from floodway.generate.detokenizer import Detokenizer
from floodway.generate.kv import KVCache, KVSpec
from floodway.generate.sampling import Sampler
from floodway.generate.stops import StopText

Deliver = Callable[[Any], bool]     # a chunk dict, or an exception; False: nobody listens


@dataclass(frozen=True)
class Request:
    """A prompt ready to run: its token ids and the decoding settings (already checked)."""

    ids: tuple[int, ...]
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def reservation(self) -> int:
        """Cache positions it needs at most: the prompt and every token it may generate."""
        return len(self.ids) + self.max_new_tokens


class Running:
    """A sequence admitted to the engine (see the module doc for its chunks)."""

    def __init__(self, sid: int, request: Request, deliver: Deliver, tokenizer: Any,
                 eos: Sequence[int]):
        self.id, self.request, self.deliver = sid, request, deliver
        self.eos = frozenset(eos)
        self.sampler = Sampler(request.temperature, request.top_p, request.seed)
        self.detok = Detokenizer(tokenizer, list(request.ids))
        self.stops = StopText(request.stop)
        self.generated: list[int] = []
        self.unreported = 0
        self.finish: str | None = None
        self.cache: KVCache | None = None

    def allocate(self, spec: KVSpec) -> None:
        self.cache = KVCache(spec, self.request.reservation)

    def release(self) -> None:
        self.cache = None

    @property
    def last(self) -> int:
        return self.generated[-1]

    def accept(self, scores: Any) -> dict[str, Any] | None:
        """Sample the next token from `scores` (vocab,) -> the chunk to send, or None when
        its text is still held back."""
        token = self.sampler(scores)
        self.generated.append(token)
        self.unreported += 1
        if token in self.eos:
            self.finish = "stop"
            text = self.stops.push(self.detok.flush())
            text += self.stops.flush()
        else:
            text = self.stops.push(self.detok.push(token))
            if self.stops.stopped:
                self.finish = "stop"
            elif len(self.generated) >= self.request.max_new_tokens:
                text += self.stops.push(self.detok.flush())
                self.finish = "stop" if self.stops.stopped else "length"
                text += self.stops.flush()
        if not text and self.finish is None:
            return None
        chunk: dict[str, Any] = {"text": text, "tokens": self.unreported}
        self.unreported = 0
        if self.finish is not None:
            chunk["finish_reason"] = self.finish
            chunk["usage"] = {"prompt_tokens": len(self.request.ids),
                              "completion_tokens": len(self.generated)}
        return chunk


__all__ = ["Deliver", "Request", "Running"]
