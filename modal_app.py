"""The example app: a real sentence-embedding endpoint (all-MiniLM-L6-v2).

    floodway build modal_app.py      # cold-start artifacts (safetensors, ONNX, parity-checked)
    floodway serve modal_app.py      # local router + worker processes on 127.0.0.1
    floodway deploy modal_app.py     # the same endpoint as Modal classes on GPUs (as
                                     # `modal deploy`), then its warm targets re-applied
    floodway simulate modal_app.py --trace TRACE.csv   # its warm pool and router on a trace

On Modal the router is a public web endpoint, so it reads bearer-token API keys from the
Modal Secret `floodway-router-keys` (FLOODWAY_API_KEYS, comma-separated); create it once
before deploying:

    modal secret create floodway-router-keys FLOODWAY_API_KEYS=<key1>,<key2>

(`to_modal(endpoints, public_router=True)` serves without authentication instead; see
docs/modal.md).

The endpoint follows the model card: mean pooling over the attention mask, then L2
normalization (https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2).
"""

import numpy as np

import floodway as fw
from floodway.deploy import to_modal

MODEL_REPO = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"

endpoints = fw.App("floodway-demo")


@endpoints.endpoint(
    model=fw.HFModel(MODEL_REPO, revision=MODEL_REVISION),
    build=fw.Build(onnx=True, tensorrt=True, max_batch_rows=64, max_seq_len=256),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=120,
                     max_containers=8,
                     windows=[fw.Window(cron="55 8 * * 1-5", duration_s=3600, min_containers=4)]),
    route=fw.Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0,
                   spill=("cold", "async")),
    batching=fw.Batching(max_batch_rows=32, wait_ms=5),
)
def embed(model: fw.Loaded, texts: list[str]) -> list[list[float]]:
    """texts: N strings -> N unit-length 384-float embeddings, in order."""
    feeds = model.encode(texts)
    hidden = model.run(feeds)["last_hidden_state"]              # (N, seq, 384)
    mask = feeds["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return pooled.tolist()


app = to_modal(endpoints)
