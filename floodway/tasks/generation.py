"""The text-generation task: decoder-only models (``AutoModelForCausalLM``) exported with
their key/value cache as graph inputs and outputs, so that the serving engine
(`floodway.generate`) runs one graph call per decode step.

One graph serves the prefill (past length 0) and every decode step (past length > 0):

    inputs   input_ids (batch, seq) int64, attention_mask (batch, total) int64 (1: a real
             position of past + seq), position_ids (batch, seq) int64,
             past_key_values.{i}.key / .value (batch, heads, past, head_dim) float32
    outputs  logits (batch, seq, vocab) float32,
             present.{i}.key / .value (batch, heads, total, head_dim) float32
             (past followed by this call's positions), total = past + seq

The manifest records what the engine needs beyond the graph (`generation_info`): layers,
heads, head_dim, vocab size, the end-of-sequence ids and the longest context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from floodway.tasks.base import BuildContext, Case, IOSpec, Task

FIXED_INPUTS = ("input_ids", "attention_mask", "position_ids")
PUBLISH = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
           "generation_config.json", "config.json")
# Example sizes for the exporter: all different, so that the tracer cannot confuse two axes.
_EXAMPLE = {"batch": 2, "seq": 5, "past": 3}
_PROMPTS = ("Warm pools absorb a burst of traffic while", "a",
            "The key and value cache of every sequence grows by one position per step.")


def past_names(layers: int) -> list[str]:
    return [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def present_names(layers: int) -> list[str]:
    return [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def _config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def model_dims(folder: Path) -> dict[str, int]:
    """layers, heads, head_dim, vocab_size, max_positions of a transformers config.json
    (GPT-2's n_* names or the Llama-style ones)."""
    c = _config(folder)
    layers = c.get("n_layer", c.get("num_hidden_layers"))
    heads = c.get("n_head", c.get("num_attention_heads"))
    hidden = c.get("n_embd", c.get("hidden_size"))
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or hidden // heads
    positions = c.get("n_positions", c.get("max_position_embeddings", 2048))
    return {"layers": int(layers), "heads": int(kv_heads), "head_dim": int(head_dim),
            "vocab_size": int(c["vocab_size"]), "max_positions": int(positions)}


def special_ids(folder: Path) -> tuple[list[int], int | None]:
    """(end-of-sequence ids, beginning-of-sequence id) from generation_config.json, else
    config.json."""
    out: dict[str, Any] = {}
    for name in ("config.json", "generation_config.json"):   # the latter wins
        if (folder / name).is_file():
            d = json.loads((folder / name).read_text())
            out.update({k: d[k] for k in ("eos_token_id", "bos_token_id")
                        if d.get(k) is not None})
    eos = out.get("eos_token_id", [])
    eos = [int(e) for e in (eos if isinstance(eos, list) else [eos])]
    bos = out.get("bos_token_id")
    return eos, None if bos is None else int(bos)


@dataclass(frozen=True)
class GenerationTask(Task):
    def required_files(self) -> tuple[tuple[str, ...], ...]:
        return (("config.json",), ("tokenizer.json",))

    def publish_files(self) -> tuple[str, ...]:
        return PUBLISH

    def max_seq_len(self, ctx: BuildContext) -> int:
        """The longest context (prompt + generated tokens): `Build.max_seq_len`, capped by
        the model's positions and tokenizer_config.json's ``model_max_length``."""
        from floodway.tasks.text import read_max_seq_len

        assert ctx.folder is not None
        cap = min(ctx.build.max_seq_len, model_dims(ctx.folder)["max_positions"])
        return read_max_seq_len(ctx.folder, cap)

    def dims(self, ctx: BuildContext) -> dict[str, int]:
        assert ctx.folder is not None
        return model_dims(ctx.folder)

    def graph_inputs(self, ctx: BuildContext) -> tuple[IOSpec, ...]:
        d = self.dims(ctx)
        return (IOSpec("input_ids", "int64", ("batch", "seq")),
                IOSpec("attention_mask", "int64", ("batch", "total")),
                IOSpec("position_ids", "int64", ("batch", "seq")),
                *(IOSpec(n, "float32", ("batch", d["heads"], "past", d["head_dim"]))
                  for n in past_names(d["layers"])))

    def output_names(self, ctx: BuildContext) -> tuple[str, ...]:
        return ("logits", *present_names(self.dims(ctx)["layers"]))

    def output_axes(self, ctx: BuildContext) -> dict[str, dict[int, str]]:
        axes: dict[str, dict[int, str]] = {"logits": {0: "batch", 1: "seq"}}
        axes.update({n: {0: "batch", 2: "total"} for n in present_names(self.dims(ctx)["layers"])})
        return axes

    def example_inputs(self, ctx: BuildContext) -> tuple[np.ndarray, ...]:
        b, s, p = _EXAMPLE["batch"], _EXAMPLE["seq"], _EXAMPLE["past"]
        d = self.dims(ctx)
        rng = np.random.default_rng(0)
        past = [rng.standard_normal((b, d["heads"], p, d["head_dim"])).astype(np.float32)
                for _ in past_names(d["layers"])]
        return (np.ones((b, s), np.int64), np.ones((b, p + s), np.int64),
                np.tile(np.arange(p, p + s, dtype=np.int64), (b, 1)), *past)

    def graph(self, model: Any, names: Sequence[str], outputs: Sequence[str], *,
              keywords: bool = True) -> Any:
        from floodway.build.kv_export import kv_graph_module

        return kv_graph_module(model, len(outputs) // 2)

    def parity_cases(self, ctx: BuildContext, max_seq_len: int) -> list[Case]:
        """A padded prefill (past length 0) of three prompts, then one decode step on its
        real past (right-padded, masked), as the engine packs them."""
        from floodway.build.export import torch_outputs
        from floodway.build.prefetch import make_tokenizer

        assert ctx.folder is not None
        tok = make_tokenizer(ctx.folder, max_seq_len - 1)
        d = self.dims(ctx)
        ids = [tok.encode(p).ids or [0] for p in _PROMPTS]
        lens = np.array([len(i) for i in ids])
        rows, seq = len(ids), int(lens.max())
        mask = (np.arange(seq)[None, :] < lens[:, None]).astype(np.int64)
        pre = {"input_ids": np.array([i + [0] * (seq - len(i)) for i in ids], np.int64),
               "attention_mask": mask, "position_ids": np.tile(np.arange(seq), (rows, 1)),
               **{n: np.zeros((rows, d["heads"], 0, d["head_dim"]), np.float32)
                  for n in past_names(d["layers"])}}
        graph = self.graph(ctx.model(), (), self.output_names(ctx))
        presents = torch_outputs(graph, pre, list(pre))[1:]
        step = {"input_ids": np.array([[3], [5], [7]], np.int64),
                "attention_mask": np.concatenate([mask, np.ones((rows, 1), np.int64)], 1),
                "position_ids": lens[:, None].astype(np.int64),
                **dict(zip(past_names(d["layers"]), presents, strict=True))}
        return [Case("prefill", pre, rows, seq_len=seq, padded=True),
                Case("decode-with-past", step, rows, seq_len=1, padded=True)]

    def generation_info(self, folder: Path) -> dict[str, Any]:
        """What the engine needs beyond the graph (recorded in the manifest)."""
        eos, bos = special_ids(folder)
        d = model_dims(folder)
        return {"layers": d["layers"], "heads": d["heads"], "head_dim": d["head_dim"],
                "vocab_size": d["vocab_size"], "eos_token_ids": eos, "bos_token_id": bos}

    # ------------------------------------------------------------ serve side
    def sample_item(self, model: Any) -> Any:
        return {"prompt": "warm-up", "max_new_tokens": 1}

    def prepare(self, model: Any, items: Sequence[Any]) -> dict[str, np.ndarray]:
        raise ValueError("a text-generation build runs a decode loop, not one graph call: "
                         "use `model.generate(prompt)` (an async iterator of chunks)")


TEXT_GENERATION = GenerationTask("text-generation", "generation", "AutoModelForCausalLM",
                                 ("logits",), files_dir="tokenizer")

__all__ = ["FIXED_INPUTS", "TEXT_GENERATION", "GenerationTask", "model_dims", "past_names",
           "present_names", "special_ids"]
