"""The task of a user's own PyTorch module (`floodway.sources.TorchModel`): its graph takes
the declared inputs (`TensorSpec`) and returns the declared outputs; serving stacks the
request items (numpy arrays, one row each) into a batch. Parity runs the module on seeded
random inputs: normal floats, integers in {0, 1}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floodway.tasks.base import BuildContext, Case, IOSpec, Task

# Sizes of the dynamic non-batch axes in the two parity cases (capped by Build.max_seq_len).
CASE_SIZES = (8, 16)


@dataclass(frozen=True)
class TensorTask(Task):
    def graph_inputs(self, ctx: BuildContext) -> tuple[IOSpec, ...]:
        return tuple(IOSpec(s.name, s.dtype, s.axes) for s in ctx.source.inputs)

    def output_axes(self, ctx: BuildContext) -> dict[str, dict[int, str]]:
        return {o: {0: "batch"} for o in ctx.source.outputs}

    def parity_cases(self, ctx: BuildContext, max_seq_len: int) -> list[Case]:
        """One row, and a batch of up to 3 rows, each with its own dynamic axis sizes."""
        rng = np.random.default_rng(0)
        specs = self.graph_inputs(ctx)
        cases = []
        for label, rows, size in (("one", 1, CASE_SIZES[0]),
                                  ("batch", min(3, ctx.build.max_batch_rows), CASE_SIZES[1])):
            other = max(1, min(size, max_seq_len))
            feeds = {s.name: s.example({"batch": rows}, rng, other=other) for s in specs}
            seq = other if any(isinstance(d, str) and d != "batch"
                               for s in specs for d in s.shape) else None
            cases.append(Case(label, feeds, rows, seq_len=seq))
        return cases

    def sample_item(self, model: Any) -> Any:
        """Zeros of each input's row shape (dynamic axes of size 1); a dict by input name
        when the graph has several inputs."""
        rows = {s.name: np.zeros(tuple(1 if isinstance(d, str) else d for d in s.shape[1:]),
                                 dtype=s.dtype) for s in model.manifest.input_specs}
        return next(iter(rows.values())) if len(rows) == 1 else rows

    def prepare(self, model: Any, items: Sequence[Any]) -> dict[str, np.ndarray]:
        """Items -> one batch per graph input: each item is an array (one input) or a dict
        of arrays by input name (several), of the input's row shape. Raises ValueError
        naming the item and input that does not fit."""
        specs = model.manifest.input_specs
        if len(specs) == 1:
            rows = {specs[0].name: list(items)}
        else:
            rows = {s.name: [_field(item, s.name, i) for i, item in enumerate(items)]
                    for s in specs}
        return {s.name: _stack(rows[s.name], s) for s in specs}


def _field(item: Any, name: str, index: int) -> Any:
    if not isinstance(item, Mapping) or name not in item:
        raise ValueError(f"item {index} should be a dict with an array for input {name!r}")
    return item[name]


def _stack(values: list[Any], spec: Any) -> np.ndarray:
    arrays = [np.asarray(v, dtype=spec.dtype) for v in values]
    want = spec.shape[1:]
    for i, a in enumerate(arrays):
        fits = a.ndim == len(want) and all(isinstance(d, str) or d == n
                                           for d, n in zip(want, a.shape, strict=True))
        if not fits or a.shape != arrays[0].shape:
            raise ValueError(f"item {i}: input {spec.name!r} has shape {a.shape}; each row "
                             f"must be ({', '.join(map(str, want))}) and all rows alike "
                             f"(row 0: {arrays[0].shape})")
    return np.stack(arrays) if arrays else np.zeros((0, *[
        d if isinstance(d, int) else 0 for d in want]), dtype=spec.dtype)


TORCH_MODULE = TensorTask("torch-module", "tensor", "", ())

__all__ = ["CASE_SIZES", "TORCH_MODULE", "TensorTask"]
