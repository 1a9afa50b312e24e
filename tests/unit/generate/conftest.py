"""The tiny GPT-2 (examples/tiny_gpt2.py: untrained, seeded weights) made, built for
text-generation and loaded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

import floodway as fw
from floodway.config import LocalModel

BUILD = fw.Build(max_seq_len=128, max_batch_rows=8)


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory) -> Path:
    from examples.tiny_gpt2 import make_tiny_gpt2

    return make_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def gen_build(tiny_gpt2, tmp_path_factory) -> Path:
    """The published build of endpoint "gen" (text-generation on the tiny GPT-2)."""
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    app = fw.App("gen")

    @app.endpoint(model=LocalModel(tiny_gpt2, task="text-generation"), build=BUILD,
                  batching=fw.Batching(max_batch_rows=8))
    async def gen(model, prompt: fw.Prompt):
        async for chunk in model.generate(prompt):
            yield chunk

    (ep,) = list(app)
    return build_endpoint(ep, ArtifactStore(tmp_path_factory.mktemp("gen-store"))).path


@pytest.fixture(scope="session")
def loaded(gen_build):
    from floodway.build.loader import load

    return load(gen_build)


@pytest.fixture(scope="session")
def hf_model(tiny_gpt2):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_gpt2), dtype=torch.float32).eval()
