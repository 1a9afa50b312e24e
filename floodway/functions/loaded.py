"""`Loaded`: what an endpoint function receives as its model.

The contract is numpy in, numpy out, whatever backend the cold-start loader picked
(ONNX Runtime CPU or CUDA, TensorRT, or PyTorch from safetensors), so one endpoint function runs
unchanged on every backend and the serve path never needs torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CHARS_PER_TOKEN_BOUND = 101   # longest WordPiece word (100) + the space after it


@dataclass
class Loaded:
    """A model loaded from built artifacts.

    - `backend`: which artifact path was taken, e.g. ``"onnxruntime-cpu"``.
    - `tokenizer`: a `tokenizers.Tokenizer` with truncation at `max_seq_len` and padding on.
    - `runner`: maps named int64 arrays of shape (rows, seq) to named float32 outputs.
    - `manifest`: the build manifest (a pydantic model), `artifact_dir`: where it was loaded from.
    """

    backend: str
    tokenizer: Any
    runner: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
    input_names: tuple[str, ...]
    max_seq_len: int
    artifact_dir: Path
    manifest: Any = None
    path_taken: tuple[str, ...] = ()      # each load path tried, and what happened
    timings_s: dict[str, float] = field(default_factory=dict)

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Tokenize `texts` into int64 arrays of shape (len(texts), longest), padded with 0s.

        Only the inputs the graph declares are returned (e.g. token_type_ids when it has one).
        Texts are cut to `max_chars` before tokenizing, so a huge input costs no more than a
        long one (the tokenizer would otherwise process all of it, then truncate).
        """
        encs = self.tokenizer.encode_batch([self.clip(t) for t in texts])
        arrays = {
            "input_ids": np.asarray([e.ids for e in encs], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in encs], dtype=np.int64),
            "token_type_ids": np.asarray([e.type_ids for e in encs], dtype=np.int64),
        }
        return {k: v for k, v in arrays.items() if k in self.input_names}

    @property
    def max_chars(self) -> int:
        return self.max_seq_len * CHARS_PER_TOKEN_BOUND

    def clip(self, text: str) -> str:
        """`text` cut so that it still yields at least `max_seq_len` tokens if it had them.

        Whitespace runs are collapsed first (whitespace-splitting tokenizers discard them), and
        no token of a WordPiece/BPE vocabulary spans more than CHARS_PER_TOKEN_BOUND characters
        (BERT maps words over 100 characters to one [UNK]).
        """
        if len(text) <= self.max_chars:
            return text
        return " ".join(text[: self.max_chars * 4].split())[: self.max_chars]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph on `feeds` (named arrays) and return its outputs by name."""
        return self.runner(feeds)
