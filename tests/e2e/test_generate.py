"""Text generation end to end: examples/generate_app.py built by `floodway build` (the tiny
GPT-2 exported to ONNX with its key/value cache) and served by `floodway serve` (a real
router and worker process running the continuous-batching engine).

Checked here: greedy text streamed over SSE equals `transformers` `generate()`; the first
chunk arrives before the stream ends; sampled text with a seed is the same streamed or
buffered; a client that leaves mid-stream stops its sequence (the container's active
sequences drop, the cancelled count rises); the endpoint's `fw.Generation` limits reach the
engine; and the official `openai` client streams chat completions from the server. The
`openai` client's `embeddings.create` runs against the main app's embedding endpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest

from tests.conftest import ROOT
from tests.e2e.conftest import PATIENCE_S, openai_chat_stream, running_server, wait_until

pytestmark = pytest.mark.e2e
APP = ROOT / "examples" / "generate_app.py"
PROMPTS = ["Warm pools keep containers", "A burst of traffic", "floodway"]


@pytest.fixture(scope="module")
def gen_env(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("generate")
    return {"FLOODWAY_STORE": str(root / "store"), "TINY_GPT2_DIR": str(root / "tiny-gpt2"),
            "HF_HUB_OFFLINE": "1", "FLOODWAY_JOBS_DB": str(root / "jobs.sqlite3")}


@pytest.fixture(scope="module")
def gen_server(gen_env, tmp_path_factory):
    env = {**os.environ, **gen_env}
    res = subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(APP)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "generate: built" in res.stdout + res.stderr
    log = tmp_path_factory.mktemp("generate-serve") / "serve.log"
    with running_server(APP, gen_env["FLOODWAY_STORE"], "--containers", "1", log=log,
                        env=gen_env) as srv:
        yield srv


def streamed_text(events, index: int = 0) -> str:
    return "".join(e["chunk"]["text"] for _, e in events
                   if isinstance(e, dict) and e.get("index") == index and "chunk" in e)


def test_greedy_stream_matches_transformers_generate(gen_server, gen_env):
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    folder = gen_env["TINY_GPT2_DIR"]
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    # All three at once: they share the container's decode steps.
    inputs = [{"prompt": p, "max_new_tokens": 24} for p in PROMPTS]
    events = gen_server.sse("generate", inputs)
    assert events[-1][1] == "[DONE]"
    for i, prompt in enumerate(PROMPTS):
        ids = tok.encode(prompt).ids
        with torch.inference_mode():
            out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                              dtype=torch.long), max_new_tokens=24, do_sample=False)
        want = tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)
        assert streamed_text(events, i) == want, prompt
        (end,) = [e["output"] for _, e in events if isinstance(e, dict)
                  and e.get("index") == i and "output" in e]
        assert end["text"] == want
        assert end["usage"]["prompt_tokens"] == len(ids)
        assert end["usage"]["completion_tokens"] == end["tokens"] <= 24


def test_first_chunk_before_the_end_and_seeded_stream_equals_buffered(gen_server):
    item = {"prompt": "A burst of traffic", "max_new_tokens": 100, "temperature": 0.9,
            "seed": 7}
    events = gen_server.sse("generate", [item])
    chunks = [t for t, e in events if isinstance(e, dict) and "chunk" in e]
    assert len(chunks) > 1
    assert chunks[0] < events[-1][0]
    buffered = gen_server.client.post("/v1/generate", json={"inputs": [item]})
    assert buffered.status_code == 200, buffered.text
    (out,) = buffered.json()["outputs"]
    assert out["text"] == streamed_text(events)
    assert out["finish_reason"] in ("stop", "length")
    other = gen_server.client.post("/v1/generate", json={"inputs": [{**item, "seed": 8}]})
    assert other.json()["outputs"][0]["text"] != out["text"]


def active(srv) -> int:
    return srv.sequences("generate").get("active", -1)


def test_the_endpoints_generation_limits_reach_the_engine(gen_server):
    # generate_app.py: max_sequences=8 with no kv_cache_tokens -> 8 x Build.max_seq_len (512)
    wait_until(lambda: gen_server.metric(
        'floodway_kv_cache_capacity_tokens{endpoint="generate"}') == 8 * 512, PATIENCE_S,
        "the engine's KV capacity as the endpoint configures it")
    over = gen_server.client.post("/v1/generate",
                                  json={"inputs": [{"prompt": "x", "max_new_tokens": 129}]})
    assert over.status_code == 422 and "max_new_tokens" in over.text


def test_a_client_that_leaves_mid_stream_stops_its_sequence(gen_server):
    before = gen_server.metric('floodway_cancelled_sequences_total{endpoint="generate"}')
    # Eight long sequences keep the container busy; the client leaves after the first chunk.
    inputs = [{"prompt": p, "max_new_tokens": 128, "temperature": 1.0, "seed": i}
              for i, p in enumerate(PROMPTS * 3)][:8]
    with httpx.Client(base_url=gen_server.base, timeout=30) as c, \
            c.stream("POST", "/v1/generate", json={"inputs": inputs},
                     headers={"Accept": "application/x-ndjson"}) as r:
        first = json.loads(next(r.iter_lines()))
        assert "chunk" in first
    wait_until(lambda: active(gen_server) == 0, PATIENCE_S,
               "the sequences stopped after the disconnect")
    wait_until(lambda: gen_server.metric(
        'floodway_cancelled_sequences_total{endpoint="generate"}') > before, PATIENCE_S,
        "cancelled count")
    # The slots are free again: the endpoint still answers.
    ok = gen_server.client.post("/v1/generate", json={"inputs": [{"prompt": "still here"}]})
    assert ok.status_code == 200 and ok.json()["outputs"][0]["usage"]["completion_tokens"] > 0


def test_openai_client_streams_chat_completions(gen_server):
    import openai

    client = openai.OpenAI(base_url=gen_server.base + "/v1", api_key="unused")
    kwargs = {"model": "generate", "max_tokens": 20, "temperature": 0, "seed": 1,
              "messages": [{"role": "user", "content": "What is a warm pool?"}]}
    parts, usage = openai_chat_stream(client, **kwargs)
    whole = client.chat.completions.create(**kwargs)
    assert "".join(parts) == whole.choices[0].message.content
    assert whole.usage.completion_tokens == usage.completion_tokens > 0
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert [m.id for m in client.models.list()] == ["generate"]


def test_openai_client_embeddings_against_the_main_app(server):
    import openai

    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused")
    texts = ["warm pools", "cold starts"]
    got = client.embeddings.create(model="embed", input=texts)
    native = server.client.post("/v1/embed", json={"inputs": texts}).json()["outputs"]
    assert [d.index for d in got.data] == [0, 1]
    np.testing.assert_allclose([d.embedding for d in got.data], native, rtol=0, atol=1e-6)
    assert len(got.data[0].embedding) == 384
