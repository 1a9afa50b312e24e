"""A cross-encoder-style classifier on text pairs (``text-classification``): the
all-MiniLM-L6-v2 backbone with a classification head, reading both texts in one sequence
(``[CLS] query [SEP] passage [SEP]``).

    floodway build examples/cross_encoder_app.py
    floodway serve examples/cross_encoder_app.py
    curl -s -X POST http://127.0.0.1:8000/v1/relevance -H 'Content-Type: application/json' \
         -d '{"inputs": [["is the pool warm?", "Two containers are ready."]]}'
    # {"outputs": [{"label": "not_relevant", "score": 0.5044...}]}   (an untrained head)

THE HEAD IS UNTRAINED. No cross-encoder checkpoint is available offline, so the first import
of this file makes one: BertForSequenceClassification from the MiniLM weights (in the
Hugging Face cache that `make seed` fills) with a randomly initialised 2-label head (seed 0),
saved with ``save_pretrained`` to `classifier_dir()`. Its labels and scores are
deterministic but carry no meaning; the example shows the wiring (a `LocalModel` with
``task="text-classification"``, text-pair items, ``{label, score}`` outputs). Point
`CROSS_ENCODER_DIR` at a trained cross-encoder in Hugging Face format to serve real scores.

Making the folder needs torch and transformers (the ``build`` extra); it happens once, when
`floodway build` first imports this file. Serving reads the built ONNX graph without torch.

On Modal: `classifier_dir()` is a path on the machine that imports this file. A Modal
container imports the file too, but serves from the artifact Volume, so there the folder is
neither made nor checked. A build on Modal (`floodway build --on-modal`) would need the folder
inside the build image, which this example does not set up: build it where the folder is.
"""

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

import floodway as fw
from floodway.build.store import default_root
from floodway.deploy import to_modal
from floodway.sources import in_modal_container

MODEL_REPO = "sentence-transformers/all-MiniLM-L6-v2"      # as in modal_app.py
MODEL_REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
LABELS = {0: "not_relevant", 1: "relevant"}
HEAD_SEED = 0
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")
# The folder of the classifier: $CROSS_ENCODER_DIR, else inside the artifact store (a name
# starting with "_" never clashes with an endpoint's).
DIR_ENV = "CROSS_ENCODER_DIR"


def classifier_dir() -> Path:
    """Where the classifier lives: `DIR_ENV` if set, else
    ``<artifact store>/_models/minilm-cross-encoder-untrained``."""
    env = os.environ.get(DIR_ENV)
    return Path(env) if env else default_root() / "_models" / "minilm-cross-encoder-untrained"


def make_classifier(dst: Path) -> Path:
    """Save MiniLM + a seeded, untrained 2-label head to `dst` in Hugging Face format (weights,
    config with id2label, tokenizer), unless it is there already. Written into a temporary
    folder beside `dst`, then renamed: a reader never sees half of it."""
    if (dst / "config.json").is_file():
        return dst
    import torch
    from huggingface_hub import snapshot_download
    from transformers import BertForSequenceClassification

    minilm = Path(snapshot_download(MODEL_REPO, revision=MODEL_REVISION))  # HF_HUB_OFFLINE honoured
    torch.manual_seed(HEAD_SEED)
    model = BertForSequenceClassification.from_pretrained(
        str(minilm), num_labels=len(LABELS), id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()})
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
    try:
        model.save_pretrained(str(tmp))
        for name in TOKENIZER_FILES:
            shutil.copyfile(minilm / name, tmp / name)
        os.rename(tmp, dst)
    except OSError:
        if not (dst / "config.json").is_file():   # not made meanwhile by another process
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


endpoints = fw.App("floodway-cross-encoder")


@endpoints.endpoint(
    # A Modal container imports this file too but serves from the artifact Volume: it neither
    # makes nor needs the folder (floodway does not check local paths there).
    model=fw.LocalModel(classifier_dir() if in_modal_container()
                        else make_classifier(classifier_dir()), task="text-classification"),
    build=fw.Build(onnx=True, tensorrt=True, max_batch_rows=32, max_seq_len=256),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=120, max_containers=4),
    route=fw.Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0),
    batching=fw.Batching(max_batch_rows=32, wait_ms=5),
)
def relevance(model: fw.Loaded, pairs: list[tuple[str, str]]) -> list[dict]:
    """N (query, passage) pairs -> N ``{"label": str, "score": float}``: the most likely label
    and its softmax probability, in order."""
    logits = model.run(model.prepare(pairs))["logits"]            # (N, 2) float32
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    best = probs.argmax(axis=1)
    return [{"label": model.labels[k], "score": float(probs[i, k])}
            for i, k in enumerate(best)]


app = to_modal(endpoints)
