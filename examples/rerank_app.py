"""A reranker on text pairs: score = cosine of the two texts' sentence embeddings, with the
real all-MiniLM-L6-v2 (the model `modal_app.py` serves, at the same pinned revision).

    floodway build examples/rerank_app.py
    floodway serve examples/rerank_app.py
    curl -s -X POST http://127.0.0.1:8000/v1/rerank -H 'Content-Type: application/json' \
         -d '{"inputs": [["how do warm pools help with traffic spikes?",
                          "Warm containers absorb a burst without waiting for cold starts."],
                         ["how do warm pools help with traffic spikes?",
                          "Bananas are rich in potassium."]]}'
    # {"outputs": [0.3629..., 0.0052...]}

Real scores, no training: a bi-encoder scores a (query, passage) pair by how close their
embeddings are. The model source is an `HFModel` with the default task,
``feature-extraction``: floodway exports the encoder to ONNX (checked against PyTorch) and
serves it without torch; the endpoint function embeds both sides of every pair in one graph
run and compares them.
"""

import numpy as np

import floodway as fw
from floodway.deploy import to_modal

# The same model and commit as modal_app.py (`make seed` puts it in the Hugging Face cache).
MODEL_REPO = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"

endpoints = fw.App("floodway-rerank")


def embed(model: fw.Loaded, texts: list[str]) -> np.ndarray:
    """N texts -> (N, 384) float32 unit vectors: mean pooling over the attention mask, then
    L2 normalization, as the model card does."""
    feeds = model.encode(texts)
    hidden = model.run(feeds)["last_hidden_state"]              # (N, seq, 384)
    mask = feeds["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


@endpoints.endpoint(
    model=fw.HFModel(MODEL_REPO, revision=MODEL_REVISION),   # task="feature-extraction"
    # Each pair is two rows of the graph: 32 pairs per batch fill the 64 rows it is built for.
    build=fw.Build(onnx=True, tensorrt=True, max_batch_rows=64, max_seq_len=256),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=120, max_containers=4),
    route=fw.Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0),
    batching=fw.Batching(max_batch_rows=32, wait_ms=5),
)
def rerank(model: fw.Loaded, pairs: list[tuple[str, str]]) -> list[float]:
    """N (query, passage) pairs -> N cosine similarities in [-1, 1], in order."""
    vectors = embed(model, [text for pair in pairs for text in pair])   # (2N, 384)
    return (vectors[0::2] * vectors[1::2]).sum(axis=1).tolist()


app = to_modal(endpoints)
