"""Model sources: where an endpoint's model comes from, and the task it is built for.

- `HFModel`: a Hugging Face Hub repository pinned to a commit;
- `LocalModel`: a local folder in Hugging Face format;
- `TorchModel`: a user's own PyTorch module, built by a factory function, with its weights
  from a file, a folder or a Hub repository (or as the factory made them);
- no source (``model=None``): the endpoint brings its own runtime (`load=`), or needs none.

Each validates at decorator time like the other configs (`floodway.config`). Re-exported by
`floodway.config`, where they are usually imported from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from floodway.checks import REPO_RE, Config, check_bool, check_sha, is_int
from floodway.errors import Problem
from floodway.tasks import FEATURE_EXTRACTION, HF_TASKS, PLANNED, TORCH_MODULE

# dtypes a TorchModel input may declare (ONNX Runtime and TensorRT take all of them).
TENSOR_DTYPES = ("float32", "float16", "int64", "int32", "bool")
_FACTORY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                         r":[A-Za-z_][A-Za-z0-9_]*$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$")


def _check_task(out: list[Problem], p: str, task: object) -> None:
    if task in HF_TASKS:
        return
    allowed = f"one of {', '.join(HF_TASKS)}"
    if task in PLANNED:
        allowed += f" ({PLANNED[task]})"
    elif task == TORCH_MODULE:
        allowed += " (a user's own module is fw.TorchModel(...))"
    out.append(Problem(f"{p}.task", task, allowed))


@dataclass(frozen=True)
class HFModel(Config):
    """A model repository on the Hugging Face Hub, pinned to a commit.

    `revision` must be a full 40-hex commit sha so that a build is reproducible (a branch name
    such as ``main`` moves). Fetched with `huggingface_hub.snapshot_download`, which honours
    ``HF_HUB_OFFLINE`` and ``HF_HUB_CACHE``. `allow_pickle` opts in to ``*.bin``/``*.pt`` weights,
    which are then loaded with ``torch.load(weights_only=True)``. `task` picks what is exported
    and how inputs are prepared (`floodway.tasks`; default: feature-extraction).
    `allow_random_head`: build a task whose head (a classifier) the checkpoint lacks, with
    that head initialised at random, seeded by the build (refused otherwise: its outputs
    would mean nothing).
    """

    repo_id: str
    revision: str
    allow_pickle: bool = False
    task: str = FEATURE_EXTRACTION
    allow_random_head: bool = False

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.repo_id, str) or not REPO_RE.match(self.repo_id):
            out.append(Problem(f"{p}.repo_id", self.repo_id, "a Hub repo id such as 'org/name'"))
        check_sha(out, f"{p}.revision", self.revision)
        check_bool(out, f"{p}.allow_pickle", self.allow_pickle)
        check_bool(out, f"{p}.allow_random_head", self.allow_random_head)
        _check_task(out, p, self.task)

    @property
    def display(self) -> str:
        return f"hf://{self.repo_id}@{self.revision}"


def in_modal_container() -> bool:
    """Whether this process is a Modal container (Modal sets ``MODAL_IS_REMOTE=1`` there;
    ``modal.is_local()`` reads the same variable). A container imports the deploy file again
    but serves from the artifact Volume, so local folders and weight files the decorator names
    (which exist only where the app was built) are not checked there."""
    return os.environ.get("MODAL_IS_REMOTE") == "1"


@dataclass(frozen=True)
class LocalModel(Config):
    """A local folder in Hugging Face format (config.json, tokenizer files or
    preprocessor_config.json, *.safetensors). `task` and `allow_random_head` as for
    `HFModel`."""

    path: str | Path
    allow_pickle: bool = False
    task: str = FEATURE_EXTRACTION
    allow_random_head: bool = False

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.path, (str, Path)) or not str(self.path):
            out.append(Problem(f"{p}.path", self.path, "a path to an existing folder"))
        elif not Path(self.path).is_dir() and not in_modal_container():
            out.append(Problem(f"{p}.path", str(self.path), "a path to an existing folder"))
        check_bool(out, f"{p}.allow_pickle", self.allow_pickle)
        check_bool(out, f"{p}.allow_random_head", self.allow_random_head)
        _check_task(out, p, self.task)

    @property
    def display(self) -> str:
        return f"file://{Path(self.path).resolve()}"


@dataclass(frozen=True)
class TensorSpec(Config):
    """One input of a `TorchModel`'s graph: `name`, `dtype` (one of TENSOR_DTYPES) and `shape`.

    Axis 0 is the batch axis, None or "batch": one request item is one row. Every other axis is
    an int (fixed size), None (dynamic, named ``<name>_<axis>``) or a name (dynamic, shared by
    every input naming it, e.g. "seq"). A dynamic non-batch axis is bounded by
    `Build.max_seq_len` in the TensorRT profile. Example: ``TensorSpec("image", "float32",
    (None, 3, 224, 224))``.
    """

    name: str
    dtype: str = "float32"
    shape: tuple[int | str | None, ...] = ("batch",)

    def __post_init__(self) -> None:
        if isinstance(self.shape, list):
            object.__setattr__(self, "shape", tuple(self.shape))

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            out.append(Problem(f"{p}.name", self.name, "an identifier such as 'pixel_values'"))
        if self.dtype not in TENSOR_DTYPES:
            out.append(Problem(f"{p}.dtype", self.dtype, f"one of {', '.join(TENSOR_DTYPES)}"))
        dims = self.shape
        ok = isinstance(dims, tuple) and len(dims) >= 1 and all(
            d is None or (is_int(d) and d >= 1) or (isinstance(d, str) and _NAME_RE.match(d))
            for d in dims)
        if not ok:
            out.append(Problem(f"{p}.shape", dims, "a tuple of sizes (ints >= 1), None or axis "
                                                   "names, e.g. (None, 3, 224, 224)"))
        elif dims[0] not in (None, "batch"):
            out.append(Problem(f"{p}.shape[0]", dims[0],
                               "None or 'batch' (axis 0 holds one row per request item)"))

    @property
    def axes(self) -> tuple[int | str, ...]:
        """The shape with every dynamic axis named ("batch", ``<name>_<axis>`` or its name)."""
        return tuple("batch" if i == 0 else f"{self.name}_{i}" if d is None else d
                     for i, d in enumerate(self.shape))


@dataclass(frozen=True)
class TorchModel(Config):
    """A user's own PyTorch module: ``"pkg.module:factory"`` names a function of no arguments
    that returns the `torch.nn.Module`; it is imported (with torch) at build time only.

    `weights`: None (the module as the factory made it: its own initialisation, or weights it
    loaded itself), a local ``.safetensors`` file or a folder of them (``.pt``/``.pth``/``.bin``
    too with `allow_pickle`, loaded with ``torch.load(weights_only=True)``), or a Hub repo id
    with `revision` (a 40-hex commit sha). The state dict is loaded strictly. `inputs`: the
    graph's inputs (`TensorSpec`), in the order `forward` takes them positionally; `outputs`:
    names for what `forward` returns (a tensor, a tuple, or a dict keyed by these names).
    floodway snapshots the state dict to safetensors, exports ONNX with the declared dynamic
    axes, checks parity and serves it through ONNX Runtime (or TensorRT) without torch.
    """

    factory: str
    weights: str | Path | None = None
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[str, ...] = ("output",)
    revision: str | None = None
    allow_pickle: bool = False
    task = TORCH_MODULE   # not a field: a user's module is always this task

    def __post_init__(self) -> None:
        for name in ("inputs", "outputs"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.factory, str) or not _FACTORY_RE.match(self.factory):
            out.append(Problem(f"{p}.factory", self.factory,
                               "'package.module:function' (a function returning the nn.Module)"))
        self._check_weights(out, p)
        check_bool(out, f"{p}.allow_pickle", self.allow_pickle)
        specs = self.inputs
        if not isinstance(specs, tuple) or not specs or not all(
                isinstance(s, TensorSpec) for s in specs):
            out.append(Problem(f"{p}.inputs", specs, "a non-empty list of fw.TensorSpec"))
        else:
            for i, s in enumerate(specs):
                s._check(out, f"{p}.inputs[{i}]")
            _check_unique(out, f"{p}.inputs", [s.name for s in specs])
        names = self.outputs
        if not isinstance(names, tuple) or not names or not all(
                isinstance(n, str) and _NAME_RE.match(n) for n in names):
            out.append(Problem(f"{p}.outputs", names, "a non-empty list of output names"))
        else:
            _check_unique(out, f"{p}.outputs", list(names))

    def _check_weights(self, out: list[Problem], p: str) -> None:
        w, rev = self.weights, self.revision
        if w is None or (isinstance(w, (str, Path)) and str(w)
                         and (Path(w).exists() or in_modal_container())):
            if rev is not None:
                out.append(Problem(f"{p}.revision", rev, "None unless weights name a Hub repo"))
            return
        if isinstance(w, str) and REPO_RE.match(w) and "/" in w and rev is not None:
            check_sha(out, f"{p}.revision", rev)
            return
        out.append(Problem(f"{p}.weights", w if not isinstance(w, Path) else str(w),
                           "None, an existing file or folder, or a Hub repo id 'org/name' "
                           "with revision=<40-hex commit sha>"))

    @property
    def weights_kind(self) -> str:
        """"none", "local" (a file or folder) or "hf" (a Hub repo at `revision`)."""
        if self.weights is None:
            return "none"
        return "hf" if self.revision is not None else "local"

    @property
    def display(self) -> str:
        kind = self.weights_kind
        w = ("" if kind == "none" else f"+hf://{self.weights}@{self.revision}" if kind == "hf"
             else f"+file://{Path(self.weights).resolve()}")  # type: ignore[arg-type]
        return f"torch://{self.factory}{w}"


def _check_unique(out: list[Problem], field: str, names: list[str]) -> None:
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        out.append(Problem(field, dup, "distinct names"))


ModelSource = HFModel | LocalModel | TorchModel

__all__ = ["TENSOR_DTYPES", "HFModel", "LocalModel", "ModelSource", "TensorSpec", "TorchModel"]
