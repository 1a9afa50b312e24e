"""The text-generation registry entry and what it reads from a model's config files."""

from __future__ import annotations

import json

import floodway as fw
from floodway import tasks
from floodway.tasks.generation import model_dims, past_names, present_names, special_ids


def test_registered_with_its_family_and_accepted_by_hf_sources(tmp_path):
    task = tasks.get("text-generation")
    assert (task.family, task.model_class, task.files_dir) == (
        "generation", "AutoModelForCausalLM", "tokenizer")
    assert tasks.FAMILIES["text-generation"] == "generation"
    assert "text-generation" in tasks.HF_TASKS and "text-generation" not in tasks.PLANNED
    assert fw.LocalModel(tmp_path, task="text-generation").problems("model") == []


def test_cache_names_are_flat_per_layer():
    assert past_names(2) == ["past_key_values.0.key", "past_key_values.0.value",
                             "past_key_values.1.key", "past_key_values.1.value"]
    assert present_names(1) == ["present.0.key", "present.0.value"]


def test_dims_from_gpt2_and_llama_style_configs(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"n_layer": 3, "n_head": 4, "n_embd": 64, "vocab_size": 99, "n_positions": 256}))
    assert model_dims(tmp_path) == {"layers": 3, "heads": 4, "head_dim": 16,
                                    "vocab_size": 99, "max_positions": 256}
    (tmp_path / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "hidden_size": 128, "vocab_size": 50, "max_position_embeddings": 1024,
         "eos_token_id": 2, "bos_token_id": 1}))
    assert model_dims(tmp_path) == {"layers": 2, "heads": 2, "head_dim": 16,
                                    "vocab_size": 50, "max_positions": 1024}
    assert special_ids(tmp_path) == ([2], 1)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    assert special_ids(tmp_path) == ([2, 7], 1)
