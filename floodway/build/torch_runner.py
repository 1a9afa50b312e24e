"""The last-resort load path: PyTorch from the safetensors snapshot.

Used only when no ONNX Runtime or TensorRT path works (it costs seconds of torch import).
The weights come through `floodway.build.weights` (one sequential read, or mmap); the
architecture from the config.json kept beside the tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from floodway.build.weights import load_safetensors
from floodway.errors import ArtifactError


def runner(folder: Path, manifest: Any, *, mode: str = "read"):
    import torch
    from transformers import AutoConfig, AutoModel

    cfg_dir = folder / "tokenizer"
    if not (cfg_dir / "config.json").is_file():
        raise ArtifactError(f"{cfg_dir}/config.json is missing: cannot rebuild the model")
    config = AutoConfig.from_pretrained(str(cfg_dir))
    model = AutoModel.from_config(config, attn_implementation="eager")
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
    model.eval()
    names = manifest.inputs

    def run(feeds):
        with torch.inference_mode():
            out = model(**{k: torch.from_numpy(np.asarray(v)) for k, v in feeds.items()})
        return {"last_hidden_state": out.last_hidden_state.float().numpy()}

    run.input_names = names  # type: ignore[attr-defined]
    return run
