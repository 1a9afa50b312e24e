"""A user's own PyTorch module (`floodway.sources.TorchModel`) at build time: import its
factory, find its weights (a file, a folder, or a Hub repo at a pinned commit), load them
strictly. Imports torch; never on the serving path except the last-resort PyTorch load path
(`floodway.build.torch_runner`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from floodway.build.fetch import PICKLE_SUFFIXES
from floodway.build.prefetch import sha256_path
from floodway.errors import BuildError

SAFETENSORS = ".safetensors"


def import_factory(spec: str) -> Callable[[], Any]:
    """The function named by ``"pkg.module:factory"``. Raises BuildError('snapshot')."""
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise BuildError("snapshot", f"cannot import the factory {spec!r}: {type(e).__name__}: "
                                     f"{e} (is its package on sys.path?)") from e
    if not callable(fn):
        raise BuildError("snapshot", f"{spec} is {type(fn).__name__}, not a function")
    return fn


def factory_file(spec: str) -> Path | None:
    """The source file of the factory's module (hashed into the build key: a changed module
    is a changed model), or None where it has none."""
    try:
        found = importlib.util.find_spec(spec.partition(":")[0])
    except (ImportError, ValueError):
        return None
    origin = found.origin if found else None
    return Path(origin) if origin and origin.endswith(".py") else None


def weight_files(src: Any) -> list[Path]:
    """The weight files of `src` (none when it has no `weights`): safetensors, or pickles with
    `allow_pickle`. A Hub repo is fetched at its pinned commit (``HF_HUB_OFFLINE`` honoured).
    Raises BuildError('fetch') when there are none, or only pickles without `allow_pickle`."""
    kind = src.weights_kind
    if kind == "none":
        return []
    if kind == "hf":
        from huggingface_hub import snapshot_download

        pats = ["*.safetensors", "*.json"] + (["*.bin", "*.pt", "*.pth"] if src.allow_pickle
                                              else [])
        try:
            root = Path(snapshot_download(str(src.weights), revision=src.revision,
                                          allow_patterns=pats))
        except Exception as e:  # noqa: BLE001 - offline and not cached, wrong revision, ...
            raise BuildError("fetch", f"{src.display}: {type(e).__name__}: {e}") from e
    else:
        root = Path(src.weights).resolve()
    files = [root] if root.is_file() else sorted(p for p in root.iterdir() if p.is_file())
    safes = [p for p in files if p.suffix == SAFETENSORS]
    pickles = [p for p in files if p.suffix in PICKLE_SUFFIXES]
    if safes:
        return safes
    if pickles and src.allow_pickle:
        return pickles
    if pickles:
        raise BuildError("fetch", f"{root} has only pickled weights ({pickles[0].name}, ...); "
                                  "pickles can run code when loaded. Convert them to "
                                  "safetensors, or opt in with allow_pickle=True (then loaded "
                                  "with weights_only=True)")
    raise BuildError("fetch", f"{root} holds no .safetensors weights")


def source_files(src: Any) -> dict[str, str]:
    """sha256 of what the build reads: the factory's module file and the weight files."""
    out = {}
    module = factory_file(src.factory)
    if module is not None:
        out[f"factory/{module.name}"] = sha256_path(module)
    for p in weight_files(src):
        out[f"weights/{p.name}"] = sha256_path(p)
    return out


def load_state(files: list[Path]) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for p in files:
        # weights_only=True refuses arbitrary pickled objects (no code runs on load).
        state.update(load_file(str(p)) if p.suffix == SAFETENSORS
                     else torch.load(p, map_location="cpu", weights_only=True))
    return state


def build_module(src: Any) -> Any:
    """The factory's module, its weights loaded strictly, in eval mode and float32.
    Raises BuildError('snapshot') when the factory fails or the weights do not fit."""
    import torch

    try:
        module = import_factory(src.factory)()
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's factory raised
        raise BuildError("snapshot", f"{src.factory}() raised {type(e).__name__}: {e}") from e
    if not isinstance(module, torch.nn.Module):
        raise BuildError("snapshot", f"{src.factory}() returned {type(module).__name__}, not a "
                                     "torch.nn.Module")
    files = weight_files(src)
    if files:
        state = load_state(files)
        want = set(module.state_dict())
        missing, unexpected = sorted(want - set(state)), sorted(set(state) - want)
        if missing or unexpected:
            raise BuildError("snapshot", f"the weights do not fit {src.factory}(): "
                                         f"{len(missing)} missing (e.g. {missing[:3]}), "
                                         f"{len(unexpected)} unexpected (e.g. {unexpected[:3]})")
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as e:   # a tensor of another shape
            raise BuildError("snapshot", f"the weights do not fit {src.factory}(): "
                                         f"{str(e).splitlines()[-1].strip()}") from e
    return module.float().eval()


__all__ = ["build_module", "factory_file", "import_factory", "load_state", "source_files",
           "weight_files"]
