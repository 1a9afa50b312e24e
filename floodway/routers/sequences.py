"""A streaming endpoint's sequences as the router sees them: what each one costs, the queue
of them that `decide_stream()` reads, the ones running on each container, and the samples
that fit the endpoint's `floodway.core.generation.GenerationEstimator`.

    sequence_cost(item, default_new_tokens) -> SequenceCost(prompt_tokens, max_new_tokens)
    SequenceBook(default_new_tokens, estimator=, active_of=)   the batcher's bookkeeping

An item's prompt tokens are estimated before any tokenizer sees it
(`floodway.core.generation.estimate_prompt_tokens` / `estimate_message_tokens`): a str is a
prompt, a ``{"prompt": ...}`` or ``{"messages": [...]}`` object (an `fw.Prompt` in its wire
form) is read, any other item counts 1 token. Its max_new_tokens is the item's own (an int
``max_new_tokens``), else the endpoint's `Generation.max_new_tokens`; admission has already
refused one over that cap.

What the router measures of each sequence (seconds on the batcher's clock):

- prefill: from its dispatch to its first chunk, less the decode steps that chunk's tokens
  took at the container's step time then (`GenerationModel.step_s`): the model's time to
  first token is prefill + one step per token (`floodway.core.generation`);
- decode steps: the gap between two consecutive chunks of a sequence covers one step per
  token of the later chunk (`floodway.functions.streams.chunk_tokens`), taken with the
  number of sequences active on its container then (`active_of`); a chunk of no tokens is
  no sample, and its gap counts towards the next chunk's;
- per finished sequence (ended with its result, not cancelled or failed): its prompt tokens
  and the tokens it streamed, for what a request costs the warm-pool sizing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from floodway.core.generation import (
    GenerationEstimator,
    estimate_message_tokens,
    estimate_prompt_tokens,
)
from floodway.functions.streams import chunk_tokens
from floodway.routers.decide import by_priority
from floodway.routers.decide_stream import SequenceQueue, StreamRequest


@dataclass(frozen=True)
class SequenceCost:
    """What one sequence asks of a container: its (estimated) prompt tokens and its
    max_new_tokens; `kv_need`, the KV-cache tokens it reserves (prompt + max_new_tokens,
    as the engine reserves them)."""

    prompt_tokens: int
    max_new_tokens: int

    @property
    def kv_need(self) -> int:
        return self.prompt_tokens + self.max_new_tokens


def _plain(item: Any) -> Any:
    """A pydantic item (an `fw.Prompt`) as its wire form; anything else as it is."""
    return item.model_dump() if isinstance(item, BaseModel) else item


def item_prompt_tokens(item: Any) -> int:
    """Estimated prompt tokens of one item (see the module docstring): at least 1."""
    item = _plain(item)
    if isinstance(item, str):
        return estimate_prompt_tokens(item)
    if isinstance(item, Mapping):
        if isinstance(item.get("prompt"), str):
            return estimate_prompt_tokens(item["prompt"])
        messages = item.get("messages")
        if isinstance(messages, list) and all(isinstance(m, Mapping) for m in messages):
            return max(1, estimate_message_tokens(messages))
    return 1


def item_max_new_tokens(item: Any, default: int) -> int:
    """The item's own max_new_tokens (a positive int), else `default`."""
    item = _plain(item)
    n = item.get("max_new_tokens") if isinstance(item, Mapping) else None
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n
    return max(1, int(default))


def sequence_cost(item: Any, default_new_tokens: int) -> SequenceCost:
    """`SequenceCost` of one item of a streaming endpoint whose `Generation.max_new_tokens`
    is `default_new_tokens`."""
    return SequenceCost(item_prompt_tokens(item), item_max_new_tokens(item, default_new_tokens))


def stream_request(items: list[Any], default_new_tokens: int, *, deadline_s: float,
                   priority: int, tenant: str, allow_async: bool) -> StreamRequest:
    """`decide_stream()`'s request for `items` (one sequence each) of a streaming endpoint
    whose `Generation.max_new_tokens` is `default_new_tokens`: the prompt tokens estimated
    from the items, summed, and the largest max_new_tokens among them (a request is
    admitted as one: its longest sequence bounds it)."""
    costs = [sequence_cost(item, default_new_tokens) for item in items]
    return StreamRequest(prompt_tokens=sum(c.prompt_tokens for c in costs),
                         max_new_tokens=max(c.max_new_tokens for c in costs),
                         deadline_s=deadline_s, priority=priority, tenant=tenant,
                         allow_async=allow_async, sequences=len(costs))


class SequenceBook:
    """The batcher's bookkeeping for a streaming endpoint (`floodway.routers.batcher`).

    The batcher tells it, per item (`floodway.routers.batch_item.Item`, whose `cost`,
    `tokens`, `sent_s` and `last_s` it keeps): `queued` / `unqueued` (the item entered or
    left the queue, at priority 0..2), `sent` (to container `slot` at `now_s`), `chunk`
    (one streamed chunk arrived at `now_s`), `ended` (the item is over: `finished` True
    when it ended with its result). It answers `queue()` (`SequenceQueue` for the
    snapshot), `running_on(slot)` (the items in flight on a container) and feeds
    `estimator` (None: measures nothing). `active_of(slot)`: sequences active on a
    container now (default: the items in flight on it, by this book)."""

    def __init__(self, default_new_tokens: int, *,
                 estimator: GenerationEstimator | None = None,
                 active_of: Callable[[Any], int] | None = None):
        self.default_new_tokens = int(default_new_tokens)
        self.estimator, self._active_of = estimator, active_of
        self.sequences_by_priority = [0, 0, 0]
        self.prompt_by_priority = [0, 0, 0]
        self.new_by_priority = [0, 0, 0]
        self.tenant_sequences: Counter[str] = Counter()
        self.running: dict[str, Any] = {}   # item id -> Item, sent and not ended

    def cost(self, value: Any) -> SequenceCost:
        return sequence_cost(value, self.default_new_tokens)

    # ------------------------------------------------------------------ the queue
    def queued(self, item: Any, prio: int) -> None:
        self._count(item, prio, +1)

    def unqueued(self, item: Any, prio: int) -> None:
        self._count(item, prio, -1)

    def _count(self, item: Any, prio: int, sign: int) -> None:
        cost = item.cost
        self.sequences_by_priority[prio] += sign
        self.prompt_by_priority[prio] += sign * cost.prompt_tokens
        self.new_by_priority[prio] += sign * cost.max_new_tokens
        self.tenant_sequences[item.tenant] += sign
        if self.tenant_sequences[item.tenant] <= 0:
            del self.tenant_sequences[item.tenant]

    def queue(self) -> SequenceQueue:
        """The queued sequences by priority, their prompt and max_new tokens, per tenant."""
        return SequenceQueue(by_priority(self.sequences_by_priority),
                             by_priority(self.prompt_by_priority),
                             by_priority(self.new_by_priority), dict(self.tenant_sequences))

    # ------------------------------------------------------------------ in flight
    def sent(self, item: Any, slot: Any, now_s: float) -> None:
        item.sent_s, item.last_s, item.tokens = now_s, None, 0
        self.running[item.id] = item

    def running_on(self, slot: Any) -> list[Any]:
        """The items in flight on container `slot`, in the order they were sent."""
        return [it for it in self.running.values() if it.slot is slot]

    def active(self, slot: Any) -> int:
        if self._active_of is not None:
            return max(1, int(self._active_of(slot)))
        return max(1, len(self.running_on(slot)))

    def chunk(self, item: Any, data: Any, now_s: float) -> None:
        """One chunk of `item` arrived: its tokens counted, a prefill or step sample."""
        k = chunk_tokens(data)
        item.tokens += k
        est = self.estimator
        if est is None or item.id not in self.running:
            return
        if item.last_s is None:         # its first chunk: prefill + k decode steps
            active = self.active(item.slot)
            ttft = now_s - item.sent_s
            est.record_prefill(item.cost.prompt_tokens,
                               max(0.0, ttft - max(k, 1) * est.model.step_s(active)))
            item.last_s = now_s
        elif k > 0:                      # k more steps since the previous chunk
            est.record_step(self.active(item.slot), (now_s - item.last_s) / k)
            item.last_s = now_s

    def ended(self, item: Any, finished: bool) -> None:
        """`item` is over (or lost with its container: `finished` False); a finished one
        is a (prompt, generated tokens) sample."""
        if self.running.pop(item.id, None) is None:
            return
        if finished and self.estimator is not None:
            self.estimator.record_request(item.cost.prompt_tokens, item.tokens)


__all__ = ["SequenceBook", "SequenceCost", "item_max_new_tokens", "item_prompt_tokens",
           "sequence_cost", "stream_request"]
