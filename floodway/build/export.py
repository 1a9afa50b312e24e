"""Snapshot and export stages (the only part of floodway that imports torch).

- snapshot: the model's weights as one safetensors file in float32, hashed;
- export: an ONNX graph with dynamic ``batch`` and ``seq`` axes, inputs bound by name;
- parity: PyTorch vs ONNX Runtime on several shapes (batch 1, a padded batch, a long batch);
  the build fails when the largest absolute error over unpadded positions exceeds the tolerance.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np

from floodway.build.manifest import ParityCheck
from floodway.errors import BuildError

OUTPUT_NAME = "last_hidden_state"
_SAMPLE = ("Cold starts should cost a process start and a file read, nothing more. "
           "Warm pools absorb the rest of the burst while the router keeps the deadline. ")


def load_torch_model(folder: Path, *, allow_pickle: bool) -> Any:
    """An eval-mode `transformers.AutoModel` in float32 with eager attention (traceable)."""
    import torch
    from transformers import AutoConfig, AutoModel

    if list(folder.glob("*.safetensors")):
        model = AutoModel.from_pretrained(str(folder), attn_implementation="eager",
                                          use_safetensors=True, dtype=torch.float32)
    else:
        if not allow_pickle:
            raise BuildError("snapshot", f"{folder} has no safetensors weights")
        config = AutoConfig.from_pretrained(str(folder))
        config._attn_implementation = "eager"
        model = AutoModel.from_config(config)
        state: dict[str, Any] = {}
        for p in sorted(folder.glob("*.bin")) + sorted(folder.glob("*.pt")):
            # weights_only=True refuses arbitrary pickled objects (no code runs on load).
            state.update(torch.load(p, map_location="cpu", weights_only=True))
        prefix = model.base_model_prefix + "."
        state = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
        missing, _ = model.load_state_dict(state, strict=False)
        if missing:
            raise BuildError("snapshot", f"pickled weights lack {len(missing)} tensors, "
                                         f"e.g. {missing[:3]}")
    return model.eval()


def input_names(model: Any) -> tuple[str, ...]:
    params = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in params:
        names.append("token_type_ids")
    return tuple(names)


def snapshot_weights(model: Any, out_dir: Path, dtype: str = "float32") -> Path:
    """Write the weights as ``weights/model.safetensors`` in `dtype`, contiguous, unshared."""
    import torch
    from safetensors.torch import save_file

    target = getattr(torch, dtype)
    path = out_dir / "weights" / "model.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(target).contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata={"format": "pt"})
    return path


def graph_module(model: Any, names: tuple[str, ...]) -> Any:
    """Wrap the model so the exported graph takes positional inputs bound to `names`
    and returns the one tensor the loader expects."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True))).last_hidden_state

    return Graph().eval()


def export_onnx(model: Any, path: Path, *, names: tuple[str, ...], opset: int) -> Path:
    """Export with dynamic batch and sequence axes, weights as external data beside the graph
    (``<name>.data``), so the graph file stays small and the weights can be read or mapped
    on their own. Raises BuildError('export') on failure."""
    import warnings

    import onnx
    import torch

    dummy = tuple(torch.ones(2, 8, dtype=torch.long) if n != "token_type_ids"
                  else torch.zeros(2, 8, dtype=torch.long) for n in names)
    axes = {n: {0: "batch", 1: "seq"} for n in (*names, OUTPUT_NAME)}
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            # The TorchScript exporter: dynamic axes by name, no extra dependencies at build time.
            torch.onnx.export(graph_module(model, names), dummy, str(path), input_names=list(names),
                              output_names=[OUTPUT_NAME], dynamic_axes=axes,
                              opset_version=opset, dynamo=False)
    except Exception as e:  # noqa: BLE001 - any exporter failure is a build failure
        raise BuildError("export", f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    graph = onnx.load(str(path))
    onnx.save_model(graph, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    return path


def optimize_onnx(src: Path, dst: Path) -> Path:
    """Save ONNX Runtime's EXTENDED-level optimized graph (CPU provider) to `dst`, with its
    own external-initializers file ``<dst>.data`` (ORT docs, "Graph optimizations: online
    and offline mode")."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(dst)
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", dst.name + ".data")
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        raise BuildError("optimize", f"ONNX Runtime could not optimize {src.name}: {e}") from e
    return dst


def parity_cases(max_rows: int, max_seq_len: int) -> list[tuple[list[str], bool]]:
    """(texts, padded) cases: batch 1, a padded mixed-length batch, a long full batch."""
    long_text = _SAMPLE * (max_seq_len // 20 + 1)
    rows = max(1, min(4, max_rows))
    return [
        (["hello"], False),
        (["a", "a somewhat longer sentence about warm pools", _SAMPLE][: max(1, min(3, max_rows))],
         True),
        ([long_text] * rows, False),
    ]


def check_parity(model: Any, session: Any, encode: Any, *, max_rows: int, max_seq_len: int,
                 atol: float, graph: str = "model.onnx") -> list[ParityCheck]:
    """Compare PyTorch and ONNX Runtime outputs over unpadded positions.

    Raises BuildError('verify') naming the case and the measured error when one exceeds atol.
    """
    import torch

    checks = []
    for texts, padded in parity_cases(max_rows, max_seq_len):
        feeds = encode(texts)
        with torch.inference_mode():
            ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state
        got = session.run([OUTPUT_NAME], feeds)[0]
        mask = feeds["attention_mask"][..., None].astype(bool)
        err = float(np.max(np.abs(np.where(mask, got - ref.numpy(), 0.0))))
        rows, seq = feeds["input_ids"].shape
        check = ParityCheck(graph=graph, rows=rows, seq_len=seq, padded=padded,
                            max_abs_err=err, atol=atol, passed=err <= atol)
        checks.append(check)
        if not check.passed:
            raise BuildError("verify", f"{graph} output differs from PyTorch by {err:.3g} at "
                                       f"{rows}x{seq} (tolerance {atol:g})")
    return checks


def read_max_seq_len(folder: Path, default: int) -> int:
    """The model's own sequence cap (sentence_bert_config.json), if it declares one."""
    cfg = folder / "sentence_bert_config.json"
    if cfg.is_file():
        return min(default, int(json.loads(cfg.read_text()).get("max_seq_length", default)))
    return default
