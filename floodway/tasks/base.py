"""`Task`: one registry entry (`floodway.tasks`), and what its two sides exchange.

Build side (torch available; it is imported inside the methods that need it, never here):
the graph's inputs and outputs (`IOSpec`, dynamic axes by name), example inputs for the
exporter, the parity cases, the preprocessing files to publish. Serve side (no torch):
`prepare(model, items)` turns request items into the graph's named numpy inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Sizes given to named dynamic axes in the exporter's example inputs: small, and different
# from each other so that the tracer cannot confuse two axes.
EXAMPLE_SIZES = {"batch": 2, "seq": 8}
EXAMPLE_OTHER = 16


@dataclass(frozen=True)
class IOSpec:
    """One graph input or output: numpy dtype name and shape, a str naming a dynamic axis."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    def example(self, sizes: dict[str, int], rng: np.random.Generator | None = None, *,
                other: int = EXAMPLE_OTHER) -> np.ndarray:
        """An array of this spec, dynamic axes sized by `sizes` (`other` if absent): random
        normal floats and integers in {0, 1} with `rng`, else ones / zeros."""
        shape = tuple(sizes.get(d, other) if isinstance(d, str) else d for d in self.shape)
        dtype = np.dtype(self.dtype)
        if np.issubdtype(dtype, np.floating):
            return (rng.standard_normal(shape) if rng is not None else np.ones(shape)
                    ).astype(dtype)
        if rng is not None:
            return rng.integers(0, 2, size=shape).astype(dtype)
        return np.zeros(shape, dtype=dtype)


@dataclass
class Case:
    """One parity case: the graph's named inputs and how to compare on them. `mask` (rows,
    seq): 1 where a position is real, for outputs with a sequence axis (padding is not
    compared); `seq_len`: None where the inputs have no sequence axis."""

    label: str
    feeds: dict[str, np.ndarray]
    rows: int
    seq_len: int | None = None
    padded: bool = False
    mask: np.ndarray | None = None


@dataclass
class BuildContext:
    """What a task sees of one build: the source config, the fetched folder (HF format; None
    for a user's module without one), the `Build` config, and the PyTorch model, loaded on
    first call of `model()`."""

    source: Any
    folder: Path | None
    build: Any
    model: Callable[[], Any]
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """A task's fixed facts; the family subclasses implement the methods.

    `model_class`: the transformers class exported ("" for a user's module); `outputs`: the
    graph's output names (a user's module declares its own); `per_token`: the outputs have a
    sequence axis, so parity compares unpadded positions only; `tolerance`: the largest
    absolute difference allowed, PyTorch vs ONNX Runtime (`Build.parity_atol` overrides);
    `files_dir`: where its preprocessing files are published in a build ("" for none);
    `labelled`: its outputs score classes named by the config's ``id2label`` (`labels`).
    """

    name: str
    family: str
    model_class: str
    outputs: tuple[str, ...]
    per_token: bool = False
    tolerance: float = 1e-3
    files_dir: str = ""
    labelled: bool = False
    metric: str = "max_abs_err"

    # ------------------------------------------------------------ build side
    def required_files(self) -> tuple[tuple[str, ...], ...]:
        """Files a fetched source must hold: each inner tuple, one of them."""
        return (("config.json",),)

    def publish_files(self) -> tuple[str, ...]:
        """Files copied from the source into `files_dir` (those that exist)."""
        return ()

    def max_seq_len(self, ctx: BuildContext) -> int:
        return ctx.build.max_seq_len

    def graph_inputs(self, ctx: BuildContext) -> tuple[IOSpec, ...]:
        raise NotImplementedError

    def output_names(self, ctx: BuildContext) -> tuple[str, ...]:
        """The graph's output names (by default `outputs`; a decoder's depend on its layers)."""
        return self.outputs

    def graph(self, model: Any, names: Sequence[str], outputs: Sequence[str], *,
              keywords: bool = True) -> Any:
        """The module exported (and run for parity): `model` taking `names`, returning
        `outputs` (`floodway.build.export.graph_module`)."""
        from floodway.build.export import graph_module

        return graph_module(model, names, outputs, keywords=keywords)

    def output_axes(self, ctx: BuildContext) -> dict[str, dict[int, str]]:
        """The outputs' dynamic axes for the exporter (by default: the batch axis)."""
        return {o: {0: "batch"} for o in self.outputs}

    def example_inputs(self, ctx: BuildContext) -> tuple[np.ndarray, ...]:
        return tuple(s.example(EXAMPLE_SIZES) for s in self.graph_inputs(ctx))

    def parity_cases(self, ctx: BuildContext, max_seq_len: int) -> list[Case]:
        raise NotImplementedError

    def labels(self, ctx: BuildContext) -> tuple[str, ...]:
        """The class names of a classification task's outputs, by index (else ())."""
        return labels_from_config(ctx.folder) if self.labelled else ()

    def extra_checks(self, ctx: BuildContext) -> list[dict[str, Any]]:
        """Checks beyond the graph's parity (e.g. preprocessing vs transformers), each a
        `floodway.build.manifest.ParityCheck`'s fields. Raises BuildError('verify')."""
        return []

    # ------------------------------------------------------------ serve side
    def sample_item(self, model: Any) -> Any:
        """One request item this task's `prepare` takes, for a container's warm-up."""
        return "warm-up"

    def prepare(self, model: Any, items: Sequence[Any]) -> dict[str, np.ndarray]:
        """Request items -> the graph's named inputs (`model` is a `floodway.Loaded`)."""
        raise NotImplementedError


def labels_from_config(folder: Path | None) -> tuple[str, ...]:
    """``id2label`` of a transformers config.json, by index ('LABEL_<i>' where absent)."""
    import json

    if folder is None or not (folder / "config.json").is_file():
        return ()
    raw = json.loads((folder / "config.json").read_text()).get("id2label") or {}
    n = len(raw)
    return tuple(str(raw.get(str(i), raw.get(i, f"LABEL_{i}"))) for i in range(n))


__all__ = ["EXAMPLE_OTHER", "EXAMPLE_SIZES", "BuildContext", "Case", "IOSpec", "Task",
           "labels_from_config"]
