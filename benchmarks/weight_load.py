"""Weight loading: a 1 GiB safetensors file read until every byte is materialized.

Side by side, in one run, from the page cache (each file read once, untimed, first):
    page cache    raw sequential read of the same file into a reused 64 MiB buffer
    floodway mmap `floodway.build.weights.load_safetensors(mode="mmap")`, then every tensor
                  summed so each page is faulted in and read (the loader's mode on local disks)
    floodway read `mode="read"`: one sequential read into one fresh buffer, numpy views per
                  tensor (the loader's mode on network filesystems, where mmap is slow)
    torch.load    the same tensors saved with `torch.save`, `torch.load(weights_only=True)`

The targets are checked on the mode the loader picks for the benchmark's folder
(`floodway.build.netfs.read_mode`). "read" pays for zeroing and faulting in fresh memory,
which the raw read into a reused buffer does not; on network storage the network, not that,
is the limit.

    .venv/bin/python benchmarks/weight_load.py [--gib 1.0] [--runs 5] [--dir DIR]

Reports GB/s (median of `--runs`) and the ratios the targets name.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

TENSOR_BYTES = 64 << 20


def make_files(folder: Path, gib: float) -> tuple[Path, Path]:
    import torch
    from safetensors.numpy import save_file

    n = max(1, int(gib * (1 << 30) // TENSOR_BYTES))
    rng = np.random.default_rng(0)
    tensors = {f"layer{i}.weight": rng.standard_normal(TENSOR_BYTES // 4, dtype=np.float32)
               .reshape(-1, 4096) for i in range(n)}
    st, pt = folder / "w.safetensors", folder / "w.pt"
    save_file(tensors, str(st))
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, pt)
    return st, pt


def page_cache(path: Path) -> int:
    buf = bytearray(64 << 20)
    n = 0
    with path.open("rb", buffering=0) as f:
        while k := f.readinto(buf):
            n += k
    return n


def floodway_read(path: Path) -> int:
    from floodway.build.weights import load_safetensors

    return sum(a.nbytes for a in load_safetensors(path, mode="read").values())


def floodway_mmap(path: Path) -> int:
    from floodway.build.weights import load_safetensors

    arrays = load_safetensors(path, mode="mmap")
    for a in arrays.values():
        a.sum()          # touch every page
    return sum(a.nbytes for a in arrays.values())


def torch_load(path: Path) -> int:
    import torch

    state = torch.load(path, weights_only=True)
    return sum(t.numel() * t.element_size() for t in state.values())


def main(gib: Annotated[float, typer.Option(min=0.0625)] = 1.0,
         runs: Annotated[int, typer.Option(min=1)] = 5,
         dir: Annotated[Path | None, typer.Option(help="where to write the test files")] = None,
         ) -> None:
    console = Console()
    with tempfile.TemporaryDirectory(dir=dir) as tmp:
        st, pt = make_files(Path(tmp), gib)
        cases = {"page cache (raw read)": (page_cache, st),
                 "floodway mmap + touch": (floodway_mmap, st),
                 "floodway read": (floodway_read, st), "torch.load": (torch_load, pt)}
        rates: dict[str, list[float]] = {k: [] for k in cases}
        with Progress(console=Console(stderr=True)) as progress:
            task = progress.add_task("loading", total=len(cases) * (runs + 1))
            for r in range(runs + 1):
                for name, (fn, path) in cases.items():   # interleaved: same conditions
                    t = time.perf_counter()
                    n = fn(path)
                    dt = time.perf_counter() - t
                    if r:   # round 0 warms the page cache
                        rates[name].append(n / dt / 1e9)
                    progress.advance(task)
    size = st.stat().st_size if st.exists() else int(gib * (1 << 30))
    table = Table(title=f"{size / (1 << 30):.2f} GiB, every byte materialized, {runs} runs (GB/s)")
    for col in ("path", "median", "min", "max"):
        table.add_column(col, justify="left" if col == "path" else "right")
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in rates.items():
        table.add_row(k, f"{med[k]:.2f}", f"{min(v):.2f}", f"{max(v):.2f}")
    console.print(table)
    from floodway.build.netfs import read_mode

    mode = read_mode(Path(tmp).parent)
    chosen = "floodway mmap + touch" if mode == "mmap" else "floodway read"
    base, ours, torch_ = med["page cache (raw read)"], med[chosen], med["torch.load"]
    console.print(f"the loader picks mode={mode!r} for this folder")
    console.print(f"floodway ({mode}) / page cache = {ours / base:.0%}   (target >= 90%)")
    console.print(f"floodway ({mode}) / torch.load = {ours / torch_:.2f}x   (target >= 3x)")
    other = "floodway read" if mode == "mmap" else "floodway mmap + touch"
    console.print(f"{other} / page cache = {med[other] / base:.0%}")


if __name__ == "__main__":
    typer.run(main)
