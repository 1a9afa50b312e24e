"""Text generation with continuous batching (``task="text-generation"``): a streaming
endpoint over floodway's built-in engine, on a tiny GPT-2-architecture model.

    floodway build examples/generate_app.py
    floodway serve examples/generate_app.py
    curl -sN -X POST http://127.0.0.1:8000/v1/generate -H 'Content-Type: application/json' \
         -H 'Accept: text/event-stream' \
         -d '{"inputs": [{"prompt": "Warm pools", "max_new_tokens": 16, "seed": 1}]}'

THE WEIGHTS ARE UNTRAINED. No generative checkpoint is available offline, so the first import
of this file makes one with `examples/tiny_gpt2.py`: GPT-2's architecture at toy size (2
layers, 4 heads, 64 wide) with random weights from seed 0, and a byte-level BPE tokenizer
trained on a short text shipped in ``examples/data``. What it generates is gibberish, but
deterministic: the same prompt and seed give the same text, and greedy decoding matches
`transformers`' ``generate()`` token for token. The example shows the wiring: the build
exports the model to ONNX with its key/value cache, and the container's engine admits new
sequences between decode steps (up to ``max_sequences`` and the cache budget), so a short
answer never waits for a long one. Point `TINY_GPT2_DIR` at a GPT-2-family model in Hugging
Face format (config.json, safetensors, tokenizer.json) to serve a real one.

Each input is a `fw.Prompt`: ``prompt`` or chat ``messages`` (rendered with the model's chat
template), ``max_new_tokens``, ``temperature`` (0: greedy), ``top_p``, ``seed``, ``stop``.
The function yields the engine's chunks ``{"text", "tokens"}``; the last one also has
``finish_reason`` and ``usage``.

Making the folder needs torch and transformers (the ``build`` extra); serving reads the
built ONNX graph without torch. On Modal the folder is a path on the machine that imports
this file: a Modal container serves from the artifact Volume and neither makes nor checks it.
"""

import os
from pathlib import Path

import floodway as fw
from floodway.build.store import default_root
from floodway.deploy import to_modal
from floodway.sources import in_modal_container

DIR_ENV = "TINY_GPT2_DIR"


def model_dir() -> Path:
    """Where the model lives: `DIR_ENV` if set, else
    ``<artifact store>/_models/tiny-gpt2-untrained``."""
    env = os.environ.get(DIR_ENV)
    return Path(env) if env else default_root() / "_models" / "tiny-gpt2-untrained"


def ensure_model(dst: Path) -> Path:
    """Make the tiny model in `dst` unless a model is there already."""
    if (dst / "config.json").is_file():
        return dst
    from examples.tiny_gpt2 import make_tiny_gpt2

    return make_tiny_gpt2(dst)


endpoints = fw.App("floodway-generate")


@endpoints.endpoint(
    model=fw.LocalModel(model_dir() if in_modal_container() else ensure_model(model_dir()),
                        task="text-generation"),
    build=fw.Build(max_seq_len=512, max_batch_rows=8),
    batching=fw.Batching(max_batch_rows=8),
    generation=fw.Generation(max_sequences=8, max_new_tokens=128),
    # One container stays warm: the first request streams at once rather than waiting out a
    # cold start the router has not measured yet (it would become a job, 202).
    warm=fw.WarmPool(min_containers=1),
    route=fw.Route(timeout_s=10.0),
)
async def generate(model: fw.Loaded, prompt: fw.Prompt):
    """One prompt -> its chunks, as the engine produces them."""
    async for chunk in model.generate(prompt):
        yield chunk


app = to_modal(endpoints)
