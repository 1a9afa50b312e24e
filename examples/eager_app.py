"""An endpoint that brings its own runtime: sentence embeddings computed by eager PyTorch
(transformers' ``AutoModel``), with no ONNX artifact. This is how an engine floodway does not
compile plugs in (vLLM, diffusers, a custom CUDA extension): a `load=` hook builds whatever
the endpoint needs from the build's files, once per container, and the endpoint function
receives what it returned.

    floodway build examples/eager_app.py
    floodway serve examples/eager_app.py
    curl -s -X POST http://127.0.0.1:8000/v1/embed_eager -H 'Content-Type: application/json' \
         -d '{"inputs": ["Hello, world!"]}'
    # {"outputs": [[-0.0382, 0.0329, ...384 floats]]}

The model is the real all-MiniLM-L6-v2 (as in modal_app.py, same pinned revision). floodway
builds no graph for this endpoint: the build holds the model's files as fetched (hashed in
the manifest, checked when a container opens them), and a container reports its backend as
``load-hook`` with the hook's time as its own cold-start phase. Compare `modal_app.py`, which
serves the same model through ONNX Runtime without torch: here every container imports torch
and transformers, seconds of cold start that a prebuilt graph avoids.

On Modal the containers need torch and transformers, so this app gives `to_modal` a serving
image that has them.
"""

import modal
import numpy as np

import floodway as fw
from floodway.deploy import to_modal
from floodway.modal.app.images import PYTHON_VERSION, SERVING_PACKAGES

MODEL_REPO = "sentence-transformers/all-MiniLM-L6-v2"      # as in modal_app.py
MODEL_REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
MAX_TOKENS = 256              # the model card's max_seq_length

endpoints = fw.App("floodway-eager")


def load(artifacts: fw.Artifacts):
    """Once per container: the tokenizer and the model, in eval mode, from the build's copy
    of the model's files (`artifacts.source_dir`, Hugging Face format)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(artifacts.source_dir)
    model = AutoModel.from_pretrained(artifacts.source_dir).eval()
    return tokenizer, model


@endpoints.endpoint(
    model=fw.HFModel(MODEL_REPO, revision=MODEL_REVISION),
    load=load,
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=120, max_containers=4),
    route=fw.Route(max_inflight_per_container=4, max_queue=64, timeout_s=5.0),
    batching=fw.Batching(max_batch_rows=16, wait_ms=5),
)
def embed_eager(state, texts: list[str]) -> np.ndarray:
    """texts: N strings -> (N, 384) unit-length embeddings (mean pooling over the attention
    mask, then L2 normalization, as the model card does), computed by PyTorch."""
    import torch

    tokenizer, model = state
    batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS,
                      return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state                 # (N, seq, 384)
        mask = batch["attention_mask"][..., None].to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        pooled = torch.nn.functional.normalize(pooled, dim=1)
    return pooled.numpy()


# The serving image with torch and transformers added (the default one has no torch); the
# floodway source copied in, so that the build functions' image can add steps on top.
EAGER_IMAGE = (modal.Image.debian_slim(python_version=PYTHON_VERSION)
               .pip_install("onnxruntime", *SERVING_PACKAGES, "torch==2.13.0",
                            "transformers>=4.44")
               .add_local_python_source("floodway", copy=True))

app = to_modal(endpoints, image=EAGER_IMAGE)
