"""Key/value caches of running sequences, and their packing into one graph call.

Each sequence owns one float32 buffer (layers, 2, heads, reserved, head_dim) sized by its
reservation (prompt + max_new_tokens), filled up to its `length`. A step packs the running
sequences into one padded batch (`floodway.tasks.generation` names the graph's inputs):

- prefill (past length 0): the prompts right-padded to the longest, attention_mask 1 on real
  tokens, position_ids 0..n-1; each prompt's scores are read at its last real position and
  its cache copied from the presents up to its length;
- decode: one token per sequence; the past right-padded to the longest cache, attention_mask
  1 on each sequence's real past and on the new token (which the graph appends at position
  `past`), position_ids = the sequence's own length; the new token's key and value are read
  from the presents' last position.

Padded positions are masked out of attention, so each sequence's scores are those it would
get alone (up to float rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from floodway.tasks.generation import past_names, present_names


@dataclass(frozen=True)
class KVSpec:
    layers: int
    heads: int
    head_dim: int
    vocab_size: int

    @property
    def past(self) -> list[str]:
        return past_names(self.layers)

    @property
    def present(self) -> list[str]:
        return present_names(self.layers)


class KVCache:
    """One sequence's cache: `reserved` positions, the first `length` filled."""

    def __init__(self, spec: KVSpec, reserved: int):
        self.data = np.zeros((spec.layers, 2, spec.heads, reserved, spec.head_dim), np.float32)
        self.length = 0

    @property
    def reserved(self) -> int:
        return self.data.shape[3]


def _past(spec: KVSpec, caches: Sequence[KVCache], width: int) -> dict[str, np.ndarray]:
    batch = np.zeros((spec.layers, 2, len(caches), spec.heads, width, spec.head_dim),
                     np.float32)
    for i, c in enumerate(caches):
        batch[:, :, i, :, :c.length] = c.data[:, :, :, :c.length]
    names = spec.past
    return {names[2 * layer + kv]: batch[layer, kv]
            for layer in range(spec.layers) for kv in (0, 1)}


def prefill_feeds(spec: KVSpec, prompts: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """The graph's inputs for the prefill of `prompts` (token ids, each non-empty)."""
    lens = np.array([len(p) for p in prompts])
    rows, seq = len(prompts), int(lens.max())
    ids = np.zeros((rows, seq), np.int64)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
    return {"input_ids": ids,
            "attention_mask": (np.arange(seq)[None, :] < lens[:, None]).astype(np.int64),
            "position_ids": np.tile(np.arange(seq, dtype=np.int64), (rows, 1)),
            **{n: np.zeros((rows, spec.heads, 0, spec.head_dim), np.float32)
               for n in spec.past}}


def store_prefill(spec: KVSpec, out: dict[str, np.ndarray], caches: Sequence[KVCache],
                  lengths: Sequence[int]) -> np.ndarray:
    """Copy the prefill's presents into `caches` -> each prompt's last scores (rows, vocab)."""
    names = spec.present
    for i, (c, n) in enumerate(zip(caches, lengths, strict=True)):
        for layer in range(spec.layers):
            for kv in (0, 1):
                c.data[layer, kv, :, :n] = out[names[2 * layer + kv]][i, :, :n]
        c.length = n
    logits = out["logits"]
    return logits[np.arange(len(caches)), np.asarray(lengths) - 1]


def decode_feeds(spec: KVSpec, caches: Sequence[KVCache], tokens: Sequence[int]
                 ) -> dict[str, np.ndarray]:
    """The graph's inputs for one decode step: `tokens[i]` follows `caches[i]`."""
    lens = np.array([c.length for c in caches])
    width = int(lens.max())
    mask = np.zeros((len(caches), width + 1), np.int64)
    mask[:, :width] = np.arange(width)[None, :] < lens[:, None]
    mask[:, width] = 1
    return {"input_ids": np.asarray(tokens, np.int64)[:, None], "attention_mask": mask,
            "position_ids": lens.astype(np.int64)[:, None], **_past(spec, caches, width)}


def store_decode(spec: KVSpec, out: dict[str, np.ndarray], caches: Sequence[KVCache]
                 ) -> np.ndarray:
    """Append the step's new key and value to each cache -> the scores (rows, vocab)."""
    names = spec.present
    for i, c in enumerate(caches):
        for layer in range(spec.layers):
            for kv in (0, 1):
                c.data[layer, kv, :, c.length] = out[names[2 * layer + kv]][i, :, -1]
        c.length += 1
    return out["logits"][:, -1]


__all__ = ["KVCache", "KVSpec", "decode_feeds", "prefill_feeds", "store_decode",
           "store_prefill"]
