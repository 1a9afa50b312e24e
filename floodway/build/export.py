"""Snapshot, export and parity stages (with `floodway.build.torch_module`, the only part of
floodway that imports torch).

- snapshot: the model's weights as one safetensors file, hashed;
- export: an ONNX graph whose inputs and outputs are named by the task
  (`floodway.tasks`), with dynamic axes by name (``batch``, ``seq``, ...);
- parity: PyTorch vs ONNX Runtime on the task's cases; the build fails when the largest
  absolute error on the task's outputs (over unpadded positions, for outputs with a sequence
  axis) exceeds the tolerance.

The exporter is `torch.onnx.export` (the TorchScript one: dynamic axes by name, no extra
dependencies). Hugging Face's exporter (optimum-onnx 0.1.0, with optimum 2.3.0) was the first
choice, but it does not install beside transformers 5 (it requires transformers<4.58) and,
installed regardless, fails on import (transformers 5 removed
``modeling_utils.get_parameter_dtype``, which it imports).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from floodway.build.manifest import ParityCheck
from floodway.errors import BuildError
from floodway.tasks.base import Case

log = logging.getLogger("floodway.build")


def load_torch_model(folder: Path, *, allow_pickle: bool, model_class: str = "AutoModel",
                     seed: int = 0, allow_random_head: bool = False,
                     warnings: list[str] | None = None) -> Any:
    """An eval-mode transformers `model_class` (e.g. ``AutoModelForSequenceClassification``)
    from a Hugging Face folder, in float32 with eager attention (traceable).

    Weights the checkpoint lacks are initialised by transformers at random: under `seed`
    (torch's global generator is left as it was), so that one build key always yields the same
    weights. For a task model (a `model_class` other than ``AutoModel``) such weights are its
    untrained head: BuildError unless `allow_random_head`, and then a warning is logged (and
    appended to `warnings`)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, missing = _load(folder, allow_pickle, model_class)
    if missing and model_class != "AutoModel":
        shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
        if not allow_random_head:
            raise BuildError("snapshot", f"{folder} has no trained head for {model_class}: "
                             f"{len(missing)} weights are missing from the checkpoint "
                             f"({shown}) and would be initialised at random, so the outputs "
                             "would mean nothing. Use a model with that head (one fine-tuned "
                             "for the task), task='feature-extraction' for the base model's "
                             "outputs, or allow_random_head=True on the model source to "
                             "build a seeded, untrained head anyway")
        msg = (f"the {model_class} head is untrained: {len(missing)} weights the checkpoint "
               f"lacks ({shown}) were initialised at random (seed {seed}); its outputs mean "
               "nothing until it is trained")
        log.warning("%s: %s", folder, msg)
        if warnings is not None:
            warnings.append(msg)
    return model.eval()


def _load(folder: Path, allow_pickle: bool, model_class: str) -> tuple[Any, list[str]]:
    """(the model, the weights the checkpoint lacked: initialised at random)."""
    import torch
    import transformers
    from transformers import AutoConfig

    cls = getattr(transformers, model_class)
    if list(folder.glob("*.safetensors")):
        model, info = cls.from_pretrained(str(folder), attn_implementation="eager",
                                          use_safetensors=True, dtype=torch.float32,
                                          output_loading_info=True)
        return model, sorted({*info.get("missing_keys", ()),
                              *(k[0] if isinstance(k, tuple) else k
                                for k in info.get("mismatched_keys", ()))})
    if not allow_pickle:
        raise BuildError("snapshot", f"{folder} has no safetensors weights")
    config = AutoConfig.from_pretrained(str(folder))
    config._attn_implementation = "eager"
    model = cls.from_config(config)
    state: dict[str, Any] = {}
    for p in sorted(folder.glob("*.bin")) + sorted(folder.glob("*.pt")):
        # weights_only=True refuses arbitrary pickled objects (no code runs on load).
        state.update(torch.load(p, map_location="cpu", weights_only=True))
    if model_class == "AutoModel":   # a task model's weights keep the base model's prefix
        prefix = model.base_model_prefix + "."
        state = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
    missing, _ = model.load_state_dict(state, strict=False)
    if missing and model_class == "AutoModel":
        raise BuildError("snapshot", f"pickled weights lack {len(missing)} tensors, "
                                     f"e.g. {missing[:3]}")
    return model, sorted(missing)


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


def select(out: Any, outputs: Sequence[str]) -> tuple[Any, ...]:
    """`outputs` of what a forward returned: a tensor (one output), a tuple or list (in
    order), or a mapping / transformers ModelOutput (by name). Raises BuildError('export')
    when it does not hold exactly those."""
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        missing = [o for o in outputs if o not in out.keys()]
        if missing:
            raise BuildError("export", f"the model returned {sorted(out.keys())}, which lacks "
                                       f"{missing}")
        return tuple(out[o] for o in outputs)
    got = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(got) != len(outputs):
        raise BuildError("export", f"the model returned {len(got)} outputs; {len(outputs)} "
                                   f"were declared ({', '.join(outputs)})")
    return got


def graph_module(model: Any, names: Sequence[str], outputs: Sequence[str], *,
                 keywords: bool = True) -> Any:
    """Wrap the model so that the graph takes positional inputs `names` (passed by name with
    `keywords`, as transformers models take them, else in order) and returns `outputs`."""
    import torch

    names, outputs = tuple(names), tuple(outputs)

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            out = (self.model(**dict(zip(names, args, strict=True))) if keywords
                   else self.model(*args))
            got = select(out, outputs)
            return got[0] if len(got) == 1 else got

    return Graph().eval()


def export_onnx(graph: Any, path: Path, *, example: Sequence[np.ndarray], names: Sequence[str],
                outputs: Sequence[str], axes: Mapping[str, Mapping[int, str]],
                opset: int) -> Path:
    """Export `graph` (`graph_module`) traced on `example`, with `axes` (input or output name
    -> {axis: name}) dynamic; weights as external data beside the graph (``<name>.data``), so
    the graph file stays small and the weights can be read or mapped on their own.
    Raises BuildError('export') on failure."""
    import warnings

    import onnx
    import torch

    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in example)
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(graph, args, str(path), input_names=list(names),
                              output_names=list(outputs),
                              dynamic_axes={k: dict(v) for k, v in axes.items()},
                              opset_version=opset, dynamo=False)
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001 - any exporter failure is a build failure
        raise BuildError("export", f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    return path


def read_io(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The exported graph's io signature: {"inputs"/"outputs": [{name, dtype, shape}]}, a
    dynamic axis by its name, a fixed one by its size."""
    import onnx
    from onnx import helper

    graph = onnx.load(str(path), load_external_data=False).graph

    def spec(v: Any) -> dict[str, Any]:
        t = v.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        return {"name": v.name, "dtype": np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)
                                                  ).name, "shape": dims}

    return {"inputs": [spec(v) for v in graph.input], "outputs": [spec(v) for v in graph.output]}


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


def torch_outputs(graph: Any, feeds: Mapping[str, np.ndarray], names: Sequence[str],
                  ) -> list[np.ndarray]:
    """`graph` (`graph_module`) run by PyTorch on `feeds` -> its outputs as float arrays."""
    import torch

    with torch.inference_mode():
        out = graph(*(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names))
    return [t.float().numpy() for t in (out if isinstance(out, tuple) else (out,))]


def max_error(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None) -> float:
    """Largest |got - want|, over positions where `mask` (rows, seq) is 1 when given."""
    diff = np.abs(got.astype(np.float64) - want)
    if mask is not None:
        m = mask.astype(bool).reshape(mask.shape + (1,) * (diff.ndim - mask.ndim))
        diff = np.where(m, diff, 0.0)
    return float(diff.max()) if diff.size else 0.0


def check_parity(graph: Any, session: Any, cases: Sequence[Case], *, names: Sequence[str],
                 outputs: Sequence[str], per_token: bool, atol: float,
                 graph_file: str = "model.onnx") -> list[ParityCheck]:
    """Compare PyTorch and ONNX Runtime on every case, over all `outputs` (unpadded positions
    only where `per_token`). Raises BuildError('verify') naming the case and the measured
    error when one exceeds atol."""
    checks = []
    for case in cases:
        want = torch_outputs(graph, case.feeds, names)
        got = session.run(list(outputs), {n: case.feeds[n] for n in names})
        mask = case.mask if per_token else None
        err = max(max_error(g, w, mask) for g, w in zip(got, want, strict=True))
        check = ParityCheck(graph=graph_file, case=case.label, rows=case.rows,
                            seq_len=case.seq_len, padded=case.padded, outputs=list(outputs),
                            max_abs_err=err, atol=atol, passed=err <= atol)
        checks.append(check)
        if not check.passed:
            shape = f"{case.rows}x{case.seq_len}" if case.seq_len else f"{case.rows} rows"
            raise BuildError("verify", f"{graph_file} output differs from PyTorch by {err:.3g} "
                                       f"at {shape}, case {case.label!r} (tolerance {atol:g})")
    return checks
