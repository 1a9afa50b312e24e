"""Text tasks: feature-extraction, text-classification (texts or text pairs, as cross-encoders
take them) and token-classification. Inputs are the tokenizer's int64 arrays
(input_ids, attention_mask and, where the model takes it, token_type_ids), shaped
(batch, seq); serving tokenizes with the `tokenizers` library only.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from floodway.tasks.base import BuildContext, Case, IOSpec, Task

CHARS_PER_TOKEN_BOUND = 101   # longest WordPiece word (100) + the space after it
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "config.json", "sentence_bert_config.json")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_SAMPLE = ("Cold starts should cost a process start and a file read, nothing more. "
           "Warm pools absorb the rest of the burst while the router keeps the deadline. ")
_PAIRS = [("how do warm pools help?", "They keep containers ready before the burst arrives."),
          ("a", "b")]


def clip(text: str, max_chars: int) -> str:
    """`text` cut so that it still yields at least as many tokens as `max_chars` allows.

    Whitespace runs are collapsed first (whitespace-splitting tokenizers discard them), and
    no token of a WordPiece/BPE vocabulary spans more than CHARS_PER_TOKEN_BOUND characters
    (BERT maps words over 100 characters to one [UNK]).
    """
    if len(text) <= max_chars:
        return text
    return " ".join(text[: max_chars * 4].split())[:max_chars]


def _arrays(encs: list[Any], names: Sequence[str]) -> dict[str, np.ndarray]:
    arrays = {
        "input_ids": lambda: np.asarray([e.ids for e in encs], dtype=np.int64),
        "attention_mask": lambda: np.asarray([e.attention_mask for e in encs], dtype=np.int64),
        "token_type_ids": lambda: np.asarray([e.type_ids for e in encs], dtype=np.int64),
    }
    return {k: make() for k, make in arrays.items() if k in names}


def encode(tokenizer: Any, texts: Sequence[str], names: Sequence[str], max_chars: int,
           ) -> dict[str, np.ndarray]:
    """Texts -> the named int64 arrays (len(texts), longest), padded with the pad id."""
    return _arrays(tokenizer.encode_batch([clip(t, max_chars) for t in texts]), names)


def encode_pairs(tokenizer: Any, pairs: Sequence[Sequence[str]], names: Sequence[str],
                 max_chars: int) -> dict[str, np.ndarray]:
    """(first, second) pairs -> the named int64 arrays, each pair one row: the tokenizer's
    pair template (BERT: ``[CLS] a [SEP] b [SEP]``, token_type_ids 0 then 1), truncated
    longest-first to the sequence cap. Raises ValueError for an item that is not a pair."""
    rows = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(
                isinstance(t, str) for t in pair):
            raise ValueError(f"item {i} is not a pair of strings: {type(pair).__name__}")
        rows.append((clip(pair[0], max_chars), clip(pair[1], max_chars)))
    return _arrays(tokenizer.encode_batch(rows), names)


def read_max_seq_len(folder: Path, default: int) -> int:
    """`default`, capped by the model's own sequence limits: sentence_bert_config.json's
    ``max_seq_length`` and tokenizer_config.json's ``model_max_length`` (where sensible)."""
    out = default
    cfg = folder / "sentence_bert_config.json"
    if cfg.is_file():
        out = min(out, int(json.loads(cfg.read_text()).get("max_seq_length", out)))
    tok = folder / "tokenizer_config.json"
    if tok.is_file():
        limit = json.loads(tok.read_text()).get("model_max_length")
        if isinstance(limit, int) and 0 < limit < 1_000_000:   # "no limit" is stored as 1e30
            out = min(out, limit)
    return out


@dataclass(frozen=True)
class TextTask(Task):
    pairs: bool = False          # parity also runs text pairs (cross-encoders take them)

    def required_files(self) -> tuple[tuple[str, ...], ...]:
        return (("config.json",), ("tokenizer.json", "vocab.txt"))

    def publish_files(self) -> tuple[str, ...]:
        return TOKENIZER_FILES

    def max_seq_len(self, ctx: BuildContext) -> int:
        assert ctx.folder is not None
        return read_max_seq_len(ctx.folder, ctx.build.max_seq_len)

    def graph_inputs(self, ctx: BuildContext) -> tuple[IOSpec, ...]:
        params = inspect.signature(ctx.model().forward).parameters
        names = [n for n in INPUTS if n != "token_type_ids" or "token_type_ids" in params]
        return tuple(IOSpec(n, "int64", ("batch", "seq")) for n in names)

    def example_inputs(self, ctx: BuildContext) -> tuple[np.ndarray, ...]:
        # token_type_ids 0: a model with one token type has no index 1
        return tuple(np.zeros((2, 8), np.int64) if s.name == "token_type_ids"
                     else np.ones((2, 8), np.int64) for s in self.graph_inputs(ctx))

    def output_axes(self, ctx: BuildContext) -> dict[str, dict[int, str]]:
        axes = {0: "batch", 1: "seq"} if self.per_token else {0: "batch"}
        return {o: dict(axes) for o in self.outputs}

    def parity_cases(self, ctx: BuildContext, max_seq_len: int) -> list[Case]:
        """Batch 1, a padded batch of mixed lengths, a full-length batch (and text pairs)."""
        from floodway.build.prefetch import make_tokenizer

        assert ctx.folder is not None
        tok = make_tokenizer(ctx.folder, max_seq_len)
        names = [s.name for s in self.graph_inputs(ctx)]
        chars = max_seq_len * CHARS_PER_TOKEN_BOUND
        rows = max(1, min(4, ctx.build.max_batch_rows))
        long_text = _SAMPLE * (max_seq_len // 20 + 1)
        texts = [("one", ["hello"], False),
                 ("padded", ["a", "a somewhat longer sentence about warm pools", _SAMPLE]
                  [: max(1, min(3, ctx.build.max_batch_rows))], True),
                 ("long", [long_text] * rows, False)]
        cases = []
        for label, batch, padded in texts:
            feeds = encode(tok, batch, names, chars)
            cases.append(_case(label, feeds, padded))
        if self.pairs:
            pairs = (_PAIRS + [("warm pools", long_text)])[: max(1, min(3, rows))]
            cases.append(_case("pairs", encode_pairs(tok, pairs, names, chars), True))
        return cases

    def prepare(self, model: Any, items: Sequence[Any]) -> dict[str, np.ndarray]:
        """Strings -> `model.encode`; (first, second) pairs -> `model.encode_pairs`."""
        if items and isinstance(items[0], (tuple, list)):
            return model.encode_pairs(items)
        return model.encode(items)


def _case(label: str, feeds: dict[str, np.ndarray], padded: bool) -> Case:
    rows, seq = feeds["input_ids"].shape
    return Case(label, feeds, rows, seq_len=seq, padded=padded, mask=feeds["attention_mask"])


FEATURE_EXTRACTION = TextTask("feature-extraction", "text", "AutoModel",
                              ("last_hidden_state",), per_token=True, files_dir="tokenizer")
TEXT_CLASSIFICATION = TextTask("text-classification", "text",
                               "AutoModelForSequenceClassification", ("logits",),
                               files_dir="tokenizer", labelled=True, pairs=True)
TOKEN_CLASSIFICATION = TextTask("token-classification", "text",
                                "AutoModelForTokenClassification", ("logits",), per_token=True,
                                files_dir="tokenizer", labelled=True)

__all__ = ["CHARS_PER_TOKEN_BOUND", "FEATURE_EXTRACTION", "TEXT_CLASSIFICATION",
           "TOKENIZER_FILES", "TOKEN_CLASSIFICATION", "TextTask", "clip", "encode",
           "encode_pairs", "read_max_seq_len"]
