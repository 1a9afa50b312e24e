"""`Loaded`: what an endpoint function receives as its model when floodway opens the build.

The contract is numpy in, numpy out, whatever backend the cold-start loader picked
(ONNX Runtime CPU or CUDA, TensorRT, or PyTorch from safetensors), so one endpoint function runs
unchanged on every backend and the serve path never needs torch. The preprocessing of the
build's task (`floodway.tasks`) comes with it, so that an endpoint function stays short:

    feeds = model.prepare(items)          # texts, text pairs, images or arrays, per the task
    logits = model.run(feeds)["logits"]
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from floodway.tasks.text import CHARS_PER_TOKEN_BOUND
from floodway.tasks.text import clip as _clip
from floodway.tasks.text import encode as _encode
from floodway.tasks.text import encode_pairs as _encode_pairs

__all__ = ["CHARS_PER_TOKEN_BOUND", "Loaded"]


@dataclass
class Loaded:
    """A model loaded from built artifacts.

    - `backend`: which artifact path was taken, e.g. ``"onnxruntime-cpu"``.
    - `task`: the build's task, e.g. ``"text-classification"`` (`floodway.tasks`).
    - `tokenizer`: for text tasks, a `tokenizers.Tokenizer` with truncation at `max_seq_len`
      and padding on (else None); `image_processor`: for image tasks, the
      `floodway.tasks.image_processing.ImageProcessor` of the model's
      preprocessor_config.json (else None).
    - `runner`: maps the named input arrays to the named float32 outputs.
    - `labels`: class names by output index, for classification tasks (the config's id2label).
    - `manifest`: the build manifest (`ManifestView`), `artifact_dir`: where it was loaded from.
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
    task: str = "feature-extraction"
    image_processor: Any = None
    labels: tuple[str, ...] = ()
    _generation: dict[str, Any] = field(default_factory=dict, repr=False)
    _engine: Any = field(default=None, repr=False)

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Tokenize `texts` into int64 arrays of shape (len(texts), longest), padded.

        Only the inputs the graph declares are returned (e.g. token_type_ids when it has one).
        Texts are cut to `max_chars` before tokenizing, so a huge input costs no more than a
        long one (the tokenizer would otherwise process all of it, then truncate).
        """
        return _encode(self.tokenizer, texts, self.input_names, self.max_chars)

    def encode_pairs(self, pairs: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
        """Tokenize (first, second) text pairs, one row each, as cross-encoders take them:
        the tokenizer's pair template (BERT: ``[CLS] a [SEP] b [SEP]``, token_type_ids 0
        then 1), truncated longest-first at `max_seq_len`. Shapes as `encode`. Raises
        ValueError for an item that is not a pair of strings."""
        return _encode_pairs(self.tokenizer, pairs, self.input_names, self.max_chars)

    def preprocess_images(self, images: Sequence[Any]) -> dict[str, np.ndarray]:
        """PIL RGB images -> ``{"pixel_values": float32 (N, 3, H, W)}``: resized, cropped,
        rescaled and normalized as the model's preprocessor_config.json says (numpy and
        Pillow; matches transformers' image processor). Raises ValueError on a build whose
        task takes no images."""
        if self.image_processor is None:
            raise ValueError(f"this build's task ({self.task}) takes no images")
        return {"pixel_values": self.image_processor(images)}

    def prepare(self, items: Sequence[Any]) -> dict[str, np.ndarray]:
        """Request items -> the graph's named inputs, as the build's task prepares them:
        texts (`encode`), text pairs (`encode_pairs`), PIL images (`preprocess_images`), or
        numpy arrays stacked into a batch (a user's module; a dict per item when its graph
        has several inputs)."""
        from floodway import tasks

        return tasks.get(self.task).prepare(self, items)

    @property
    def max_chars(self) -> int:
        return self.max_seq_len * CHARS_PER_TOKEN_BOUND

    def clip(self, text: str) -> str:
        """`text` cut so that it still yields at least `max_seq_len` tokens if it had them
        (`floodway.tasks.text.clip`)."""
        return _clip(text, self.max_chars)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph on `feeds` (named arrays) and return its outputs by name."""
        return self.runner(feeds)

    # ------------------------------------------------------------ text generation
    def configure_generation(self, max_sequences: int = 8, kv_cache_tokens: int | None = None,
                             max_new_tokens: int = 256,
                             on_load: Callable[[tuple[int, int, int]], None] | None = None,
                             ) -> None:
        """Set the text-generation engine's limits before its first use (the worker passes
        the endpoint's `fw.Generation`; unset, these defaults apply): `max_sequences`
        running at once, `kv_cache_tokens` cache positions reserved together (None:
        max_sequences x `max_seq_len`), `max_new_tokens` (a request's default and cap).
        `on_load((active, kv_tokens, kv_capacity))` is called on the engine's thread after a
        step that changed them. Raises RuntimeError once the engine runs."""
        if self._engine is not None:
            raise RuntimeError("the generation engine is already running; configure it "
                               "before the first generate()")
        self._generation = {"max_sequences": max_sequences, "kv_cache_tokens": kv_cache_tokens,
                            "max_new_tokens": max_new_tokens, "on_load": on_load}

    def engine(self) -> Any:
        """The build's `floodway.generate.engine.Engine`, made on first call. Raises
        ArtifactError for a build that is not text-generation."""
        if self._engine is None:
            from floodway.generate.factory import engine_for

            self._engine = engine_for(self, **self._generation)
        return self._engine

    def generate(self, prompt: Any) -> AsyncIterator[dict[str, Any]]:
        """Generate from `prompt` (`fw.Prompt`, a dict of its fields, or a str: the prompt)
        on the container's continuous-batching engine -> an async iterator of chunks
        ``{"text": delta, "tokens": n}``; the last also has ``"finish_reason"`` ("stop" or
        "length") and ``"usage"`` ``{"prompt_tokens", "completion_tokens"}``. Closing it
        early cancels the sequence. Raises RequestError (422) naming the field for a bad
        prompt, ArtifactError for a build of another task."""
        return self.engine().stream(prompt)

    def generation_load(self) -> tuple[int, int, int]:
        """(running sequences, cache tokens they reserved, cache capacity in tokens). Before
        the engine's first use: (0, 0, the configured capacity), or (0, 0, 0) for a build
        that does not generate."""
        if self._engine is not None:
            return self._engine.load()
        if self.task != "text-generation":
            return 0, 0, 0
        g = self._generation
        cap = g.get("kv_cache_tokens") or g.get("max_sequences", 8) * self.max_seq_len
        return 0, 0, cap

    def generation_stats(self) -> dict[str, float]:
        """The engine's counters since it started (`floodway.generate.stats.Stats`: steps,
        prompt and completion tokens, seconds in prefill and decode calls, sequences
        finished by reason, cancelled, failed); {} before its first use."""
        return self._engine.stats.snapshot() if self._engine is not None else {}
