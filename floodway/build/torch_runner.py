"""The last-resort load path: PyTorch from the safetensors snapshot.

Used only when no ONNX Runtime or TensorRT path works (it costs seconds of torch import).
The weights come through `floodway.build.weights` (one sequential read, or mmap); the
architecture from the config.json kept beside the preprocessing files (the task's
transformers class, `floodway.tasks`), or, for a user's module, from its factory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from floodway.build.weights import load_safetensors
from floodway.errors import ArtifactError


def _hf_model(folder: Path, model_class: str) -> Any:
    import transformers

    cfg_dir = next((folder / d for d in ("tokenizer", "processor")
                    if (folder / d / "config.json").is_file()), None)
    if cfg_dir is None:
        raise ArtifactError(f"{folder} has no config.json: cannot rebuild the model")
    config = transformers.AutoConfig.from_pretrained(str(cfg_dir))
    return getattr(transformers, model_class).from_config(config, attn_implementation="eager")


def runner(folder: Path, manifest: Any, *, mode: str = "read"):
    import torch

    from floodway import tasks

    task = tasks.get(manifest.task)
    if task.name == tasks.TORCH_MODULE:
        from floodway.build.torch_module import import_factory

        if not manifest.factory:
            raise ArtifactError(f"{folder}: the manifest names no factory to rebuild the module")
        model = import_factory(manifest.factory)()
    else:
        model = _hf_model(folder, task.model_class)
    arrays = load_safetensors(folder / "weights" / "model.safetensors", mode=mode)
    state = {}
    for k, v in arrays.items():
        t = torch.from_numpy(np.array(v))    # a writable copy for torch
        if v.dtype == np.uint16:             # BF16 kept as raw 16-bit words
            t = t.view(torch.bfloat16)
        state[k] = t.float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing:
        raise ArtifactError(f"snapshot lacks {len(missing)} tensors, e.g. {missing[:3]}")
    names, outputs = manifest.inputs, manifest.outputs or task.outputs
    graph = task.graph(model.float().eval(), names, outputs,
                       keywords=task.name != tasks.TORCH_MODULE)

    def run(feeds):
        with torch.inference_mode():
            out = graph(*(torch.from_numpy(np.asarray(feeds[n])) for n in names))
        out = out if isinstance(out, tuple) else (out,)
        return {n: t.float().numpy() for n, t in zip(outputs, out, strict=True)}

    run.input_names = names  # type: ignore[attr-defined]
    return run
