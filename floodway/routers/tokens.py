"""What one input costs a batch, known at admission: its tokens, estimated in the router.

    item_tokens(item, max_seq_len) -> int          one input (a text, a pair, another item)
    TokenCost.of(endpoint) -> TokenCost | None      an endpoint's estimator (None: not text)
    row_tokens(endpoint, items) -> int              a request's longest input (decide())
    batch_tokens(batching) -> int                   a batch's padded-token budget

An encoder's batch is padded to its longest input: it costs ``rows x longest`` tokens of
work (`floodway.routers.service.ServiceTime`), so a 200-word text costs many times a 5-word
one and pads every batch it joins. The router estimates each text's tokens instead of
tokenizing it: ``ceil(UTF-8 bytes / BYTES_PER_TOKEN)`` plus the tokenizer's special tokens
(`SPECIAL_TOKENS`, `PAIR_SPECIAL_TOKENS`), at most the build's `max_seq_len` (longer inputs
are truncated in the container, `floodway.tasks.text`); a pair sums its two texts. Why an
estimate: the router holds no tokenizer (the build's lives in the container, and loading it
costs the router memory and start time for each endpoint), tokenizing every input twice
costs CPU on the admission path (all-MiniLM-L6-v2's tokenizer: about 270 us for a
130-word text on one core, the estimate 0.5 us), and what the estimate feeds is itself
fitted: the service line is fitted on these same estimates
(`floodway.core.estimators.ServiceEstimator`), so a ratio off by a constant factor is
absorbed by the fitted cost per token; only the cap and the grouping of lengths see its
error (prose of plain short words runs denser, about 5.9 bytes a token: that 130-word text
is 128 tokens, estimated 188). Bytes rather than characters: a CJK character is one token
or more (3 UTF-8 bytes), an ASCII letter a fraction of one.

Other items (images, arrays, objects) cost one row each: their cost is per row, and their
batches are cut by rows alone.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from floodway.config import Batching, Build

# UTF-8 bytes per token of English prose for the WordPiece and BPE vocabularies floodway's
# text tasks use: measured with all-MiniLM-L6-v2's tokenizer (WordPiece, 30k) at 3.8 bytes a
# token on this project's issue text and 4.5 on the Zen of Python; technical text with code
# and paths is denser (2.2-3.2). 4 is the prose middle (OpenAI's rule of thumb too).
BYTES_PER_TOKEN = 4.0
# Special tokens a BERT-style tokenizer adds: [CLS] text [SEP]; [CLS] a [SEP] b [SEP].
SPECIAL_TOKENS = 2
PAIR_SPECIAL_TOKENS = 3
# The default token budget per batch row (`batch_tokens`): texts up to this long batch by
# rows alone, as before tokens were counted (about 90 English words).
BATCH_TOKENS_PER_ROW = 128


def text_tokens(text: str) -> int:
    """Estimated tokens of `text` without special tokens: ceil(UTF-8 bytes / 4), >= 0."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def item_tokens(item: Any, max_seq_len: int) -> int:
    """Estimated tokens of one input as the model sees it: a str, its tokens plus
    `SPECIAL_TOKENS`; a pair of str (a list or tuple of two), both texts plus
    `PAIR_SPECIAL_TOKENS`; at most `max_seq_len` (at least 1). Any other item: 1 (a row)."""
    if isinstance(item, str):
        n = text_tokens(item) + SPECIAL_TOKENS
    elif isinstance(item, (list, tuple)) and len(item) == 2 \
            and isinstance(item[0], str) and isinstance(item[1], str):
        n = text_tokens(item[0]) + text_tokens(item[1]) + PAIR_SPECIAL_TOKENS
    else:
        return 1
    return max(1, min(n, int(max_seq_len)))


def batch_tokens(batching: Batching) -> int:
    """The padded-token budget of one batch: `Batching.max_batch_tokens`, else
    max_batch_rows x `BATCH_TOKENS_PER_ROW`."""
    if batching.max_batch_tokens is not None:
        return int(batching.max_batch_tokens)
    return batching.max_batch_rows * BATCH_TOKENS_PER_ROW


class TextEndpoint(Protocol):
    """What `TokenCost.of` reads of an endpoint (`floodway.functions.endpoint.Endpoint`)."""

    @property
    def input_type(self) -> Any: ...

    @property
    def build(self) -> Build: ...

    @property
    def batching(self) -> Batching: ...


def takes_text(item_type: Any) -> bool:
    """Whether items of `item_type` are texts: str or a pair of str (`Annotated` kept)."""
    if typing.get_origin(item_type) is typing.Annotated:
        item_type = typing.get_args(item_type)[0]
    return item_type is str or item_type == tuple[str, str]


@dataclass(frozen=True)
class TokenCost:
    """An endpoint's token estimate of its inputs (`item_tokens` capped at `max_seq_len`)
    and its batches' token budget."""

    max_seq_len: int
    max_batch_tokens: int

    @classmethod
    def of(cls, endpoint: TextEndpoint) -> TokenCost | None:
        """The estimator of an endpoint taking text; None for any other, or one whose
        `Batching.token_aware` is False (cost by rows)."""
        if not takes_text(endpoint.input_type) or not endpoint.batching.token_aware:
            return None
        return cls(endpoint.build.max_seq_len, batch_tokens(endpoint.batching))

    def __call__(self, item: Any) -> int:
        return item_tokens(item, self.max_seq_len)


def row_tokens(endpoint: TextEndpoint, items: Iterable[Any]) -> int:
    """The estimated tokens of the longest of `items` (a request's inputs: the row length
    its batch is padded to, `floodway.routers.decide.Request.row_tokens`); 0 for an
    endpoint that does not take text (or no items)."""
    cost = TokenCost.of(endpoint)
    return 0 if cost is None else max((cost(it) for it in items), default=0)


__all__ = ["BATCH_TOKENS_PER_ROW", "BYTES_PER_TOKEN", "PAIR_SPECIAL_TOKENS", "SPECIAL_TOKENS",
           "TextEndpoint", "TokenCost", "batch_tokens", "item_tokens", "row_tokens",
           "takes_text", "text_tokens"]
