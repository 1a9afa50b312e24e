"""Tasks: what a model is exported as, and how its inputs are prepared when it serves.

The registry has one entry per task, each a `floodway.tasks.base.Task` defined in its family's
module (`text`, `vision`, `tensor`); `get(name)` imports only that module, so a container
serving text never imports Pillow, and none imports torch. An entry names the model class to
export, the graph's inputs and outputs (with their dynamic axes), the parity check (the
outputs compared, over which positions, and the default tolerance) and the preprocessing
for serving (`Task.prepare`).

    task                  source             exported outputs              items served
    feature-extraction    HFModel/LocalModel last_hidden_state (N,seq,H)   str
    text-classification   HFModel/LocalModel logits (N,labels)             str or (str, str)
    token-classification  HFModel/LocalModel logits (N,seq,labels)         str
    image-classification  HFModel/LocalModel logits (N,labels)             PIL RGB images
    torch-module          TorchModel         the declared outputs          numpy arrays
    text-generation       HFModel/LocalModel logits (N,seq,vocab) +        fw.Prompt, through
                                             present key/values            `Loaded.generate`

A new task is one more entry here and a `Task` in its family's module. Text generation is a
decode loop over one graph with its key/value cache (`floodway.tasks.generation`, served by
`floodway.generate`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from floodway.tasks.base import Task

FEATURE_EXTRACTION = "feature-extraction"
TORCH_MODULE = "torch-module"
TEXT_GENERATION = "text-generation"

# name -> (module, attribute) of its Task
_REGISTRY = {
    FEATURE_EXTRACTION: ("floodway.tasks.text", "FEATURE_EXTRACTION"),
    "text-classification": ("floodway.tasks.text", "TEXT_CLASSIFICATION"),
    "token-classification": ("floodway.tasks.text", "TOKEN_CLASSIFICATION"),
    "image-classification": ("floodway.tasks.vision", "IMAGE_CLASSIFICATION"),
    TORCH_MODULE: ("floodway.tasks.tensor", "TORCH_MODULE"),
    TEXT_GENERATION: ("floodway.tasks.generation", "TEXT_GENERATION"),
}
# name -> its family (`Task.family`), known without importing the family's module: what its
# items are ("text": str or (str, str); "image": fw.Image; "tensor": arrays; "generation":
# fw.Prompt, served by `Loaded.generate`).
FAMILIES = {FEATURE_EXTRACTION: "text", "text-classification": "text",
            "token-classification": "text", "image-classification": "image",
            TORCH_MODULE: "tensor", TEXT_GENERATION: "generation"}
# name -> the accuracy gate's metric for a reduced-precision build (`floodway.tasks.metrics`):
# embeddings by cosine, logits by top-1 agreement and relative error. A task absent here has
# no reduced precision: a user's module (torch-module) has outputs of no known meaning, and
# text generation's engine keeps its key/value cache in float32.
PRECISION_METRICS = {FEATURE_EXTRACTION: "cosine", "text-classification": "top1",
                     "token-classification": "top1", "image-classification": "top1"}
# The tasks a Hugging Face source (HFModel, LocalModel) may name.
HF_TASKS = tuple(n for n in _REGISTRY if n != TORCH_MODULE)
# Named, not yet served: why, for the decorator's error message (none at present).
PLANNED: dict[str, str] = {}


def get(name: str) -> Task:
    """The registry entry of task `name`. Raises KeyError naming the known tasks."""
    try:
        module, attr = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(_REGISTRY)}") from None
    return getattr(importlib.import_module(module), attr)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


__all__ = ["FAMILIES", "FEATURE_EXTRACTION", "HF_TASKS", "PLANNED", "PRECISION_METRICS",
           "TEXT_GENERATION", "TORCH_MODULE", "get", "names"]
