"""The example kinds `cold_start.py` measures: per kind, the example app and endpoint, the
request item floodway's worker answers first, and the naive PyTorch program that answers the
same input from the same model (a fresh `python -c` process, timed from spawn to the line it
prints: ``ANSWER <json>``, its answer in the endpoint's output form, so that the two answers
can be compared).

Each naive program reads what `env_for` puts in its environment: MODEL_DIR (the model
source's own folder: the Hugging Face cache snapshot of an HFModel, a LocalModel's folder),
FACTORY and WEIGHTS (a TorchModel: its factory, and the state dict floodway snapshotted from
it, or its own weights file), IMAGE (the request's image file).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEXT = "a cold start should cost a process start and a file read"
PAIR = ("how do warm pools help?", "They keep containers ready before the burst arrives.")
IMAGE_SIZE = (640, 480)     # a photo's size: the preprocessing resizes and crops it

# --- the naive programs ----------------------------------------------------------------------

# embed: the rows of the original benchmark (attention forced to eager, as the ONNX export).
EMBED_TRANSFORMERS = f"""
import json, os, torch
from transformers import AutoModel, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModel.from_pretrained(d, attn_implementation="eager").eval()
b = tok([{TEXT!r}], return_tensors="pt", padding=True, truncation=True)
with torch.inference_mode():
    h = model(**b).last_hidden_state
m = b["attention_mask"].unsqueeze(-1).float()
e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
print("ANSWER", json.dumps(e[0].tolist()), flush=True)
"""

SENTENCE_TRANSFORMERS = f"""
import os
from sentence_transformers import SentenceTransformer
e = SentenceTransformer(os.environ["MODEL_DIR"], device="cpu").encode([{TEXT!r}])
print("ANSWER", e.shape[1], flush=True)
"""

FLOOR = """
import os
import onnxruntime, tokenizers
n = 0
with open(os.environ["ONNX_DATA"], "rb", buffering=0) as f:
    buf = bytearray(64 << 20)
    while k := f.readinto(buf):
        n += k
print("ANSWER", n, flush=True)
"""

# reranker: both texts embedded in one forward pass (mean pooling, L2 norm), their cosine.
RERANK = f"""
import json, os, torch
from transformers import AutoModel, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModel.from_pretrained(d).eval()
b = tok(list({PAIR!r}), return_tensors="pt", padding=True, truncation=True)
with torch.inference_mode():
    h = model(**b).last_hidden_state
m = b["attention_mask"].unsqueeze(-1).float()
e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
print("ANSWER", json.dumps(float(e[0] @ e[1])), flush=True)
"""

# text-classification: the pair in one sequence, softmax, the most likely label.
CROSS_ENCODER = f"""
import json, os, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForSequenceClassification.from_pretrained(d).eval()
q, p = {PAIR!r}
b = tok([q], [p], return_tensors="pt", padding=True, truncation=True)
with torch.inference_mode():
    probs = model(**b).logits.softmax(-1)[0]
k = int(probs.argmax())
print("ANSWER", json.dumps({{"label": model.config.id2label[k], "score": float(probs[k])}}),
      flush=True)
"""

# image-classification: the user's module from its factory, the state dict loaded from its
# safetensors file, the image preprocessed as the example does (shorter side to 256
# bilinear, center crop 224, ImageNet mean/std), the top 5 classes.
VISION = """
import importlib, json, os
import numpy as np, torch
from PIL import Image
from safetensors.torch import load_file
mod, fn = os.environ["FACTORY"].split(":")
model = getattr(importlib.import_module(mod), fn)()
model.load_state_dict(load_file(os.environ["WEIGHTS"]))
model.eval()
img = Image.open(os.environ["IMAGE"]).convert("RGB")
w, h = img.size
s = 256 / min(w, h)
w, h = max(224, round(w * s)), max(224, round(h * s))
img = img.resize((w, h), Image.BILINEAR)
left, top = (w - 224) // 2, (h - 224) // 2
img = img.crop((left, top, left + 224, top + 224))
x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
with torch.inference_mode():
    probs = model(((x - mean) / std)[None]).softmax(-1)[0]
top = torch.topk(probs, 5)
print("ANSWER", json.dumps([{"label": int(j), "score": float(p)}
                            for p, j in zip(top.values, top.indices)]), flush=True)
"""

# the load= endpoint: what its hook and function do, in a process of its own.
EAGER = f"""
import json, os, torch
from transformers import AutoModel, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModel.from_pretrained(d).eval()
b = tok([{TEXT!r}], padding=True, truncation=True, max_length=256, return_tensors="pt")
with torch.inference_mode():
    h = model(**b).last_hidden_state
m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1)
print("ANSWER", json.dumps(e[0].tolist()), flush=True)
"""

# --- the kinds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One example kind. `cases`: (label, naive program) pairs, the first being the naive
    PyTorch path that the ratio divides by floodway's time; `item(image_path)` the request
    item in its wire form; `note`: said under the table."""

    name: str
    app: str              # relative to the repository root
    endpoint: str
    model: str            # in words, for the table
    item: Callable[[Path], Any]
    cases: tuple[tuple[str, str], ...]
    note: str = ""


def image_item(path: Path) -> str:
    """The image file at `path` as an image item travels: base64 text."""
    return base64.b64encode(path.read_bytes()).decode()


KINDS: tuple[Kind, ...] = (
    Kind("embed", "modal_app.py", "embed", "all-MiniLM-L6-v2 (ONNX)", lambda _: TEXT,
         (("(b) transformers eager", EMBED_TRANSFORMERS),
          ("(c) sentence-transformers", SENTENCE_TRANSFORMERS),
          ("(d) floor", FLOOR))),
    Kind("reranker", "examples/rerank_app.py", "rerank", "all-MiniLM-L6-v2, text pairs (ONNX)",
         lambda _: list(PAIR), (("(b) PyTorch: transformers AutoModel", RERANK),)),
    Kind("text-classification", "examples/cross_encoder_app.py", "relevance",
         "MiniLM + 2-label head (ONNX)", lambda _: list(PAIR),
         (("(b) PyTorch: AutoModelForSequenceClassification", CROSS_ENCODER),)),
    Kind("image-classification", "examples/vision_app.py", "classify_image",
         "ResNet-18, fw.TorchModel (ONNX)", image_item,
         (("(b) PyTorch: factory + load_state_dict", VISION),)),
    Kind("load=", "examples/eager_app.py", "embed_eager", "all-MiniLM-L6-v2, own runtime",
         lambda _: TEXT, (("(b) PyTorch: transformers AutoModel", EAGER),),
         note="load=: (a) and (b) both run PyTorch (the endpoint's load= hook imports torch "
              "and transformers): the difference is what floodway adds over the user's "
              "own runtime"),
)
NAMES = tuple(k.name for k in KINDS)
# One artifact store holds every kind's build, keyed by endpoint name.
assert len({k.endpoint for k in KINDS}) == len(KINDS), "two kinds share an endpoint name"


def make_image(path: Path) -> Path:
    """Write a deterministic 640x480 JPEG (smooth colour ramps and a grid of squares) to
    `path`: a photo-sized input for the image kind."""
    import numpy as np
    from PIL import Image

    w, h = IMAGE_SIZE
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255 // w, y * 255 // h, ((x // 40 + y // 40) % 2) * 200], axis=-1)
    Image.fromarray(rgb.astype(np.uint8)).save(path, format="JPEG", quality=90)
    return path


def env_for(ep: Any, build: Path) -> dict[str, str]:
    """What a naive program of endpoint `ep` reads: MODEL_DIR for an HFModel (its Hugging Face
    cache snapshot, offline) or a LocalModel (its folder); FACTORY and WEIGHTS for a
    TorchModel (its weights file, else the state dict floodway snapshotted into `build`, the
    same tensors its factory made)."""
    from floodway.config import HFModel, LocalModel, TorchModel

    src = ep.model
    if isinstance(src, HFModel):
        from huggingface_hub import snapshot_download

        return {"MODEL_DIR": snapshot_download(src.repo_id, revision=src.revision,
                                               local_files_only=True)}
    if isinstance(src, LocalModel):
        return {"MODEL_DIR": str(src.path)}
    if isinstance(src, TorchModel):
        own = src.weights_kind == "local" and Path(src.weights).is_file()  # type: ignore[arg-type]
        weights = Path(src.weights) if own else build / "weights" / "model.safetensors"  # type: ignore[arg-type]
        return {"FACTORY": src.factory, "WEIGHTS": str(weights)}
    return {}


def _leaves(x: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _leaves(x[k], k)]
    if isinstance(x, list | tuple):
        return [v for e in x for v in _leaves(e, key)]
    return [(key, x)]


def answer_gap(a: Any, b: Any) -> float:
    """The largest absolute difference between two answers' numbers (their JSON leaves, in
    order); inf when their shapes differ or a label (a ``"label"`` value, or any leaf that is
    not a number) does."""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return math.inf
    gap = 0.0
    for (ku, u), (kv, v) in zip(la, lb, strict=True):
        number = all(isinstance(t, int | float) and not isinstance(t, bool) for t in (u, v))
        if number and ku != "label" and kv != "label":
            gap = max(gap, abs(float(u) - float(v)))
        elif u != v:
            return math.inf
    return gap


def parse_answer(line: str) -> Any:
    """The JSON after ``ANSWER`` on a naive program's line."""
    return json.loads(line.split(None, 1)[1])
