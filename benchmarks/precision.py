"""Reduced precision on a CPU: fp32 vs int8 throughput and parity error, side by side in one
run, for modal_app.py's all-MiniLM-L6-v2 endpoint.

The endpoint is built with ``Build(precision=("fp32", "int8"))`` (tensorrt off: this is a
CPU run) into `--store`; the build's own accuracy gate (the precision stage) runs on the
task's parity cases and its record is printed. Then both graphs serve the same batches in
interleaved rounds, each through the loader's own path for it (`floodway.build.backends.
open_runner`, ONNX Runtime CPU with `--threads` intra-op threads): (a) the float32
offline-optimized graph the loader takes without int8, (b) the int8 graph it takes where the
gate passed. The texts: `--rows` x `--batches` texts of 1-200 words (the issue's request mix),
drawn from a fixed sentence pool with a seeded generator, tokenized once; each batch's
embeddings are the endpoint's own (mean pooling, L2 norm). Printed: rows/s (median of the
rounds) for each, the ratio, and the cosine of every int8 embedding with its float32 one
(min, 1st percentile, median), short texts (<= 5 words) apart.

    .venv/bin/python benchmarks/precision.py [--rows 32] [--batches 8] [--rounds 5]
        [--threads 2] [--store DIR]

Needs the example model in the Hugging Face cache (`make seed`) and the build extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SENTENCES = (
    "Cold starts should cost a process start and a file read, nothing more.",
    "Warm pools absorb the rest of the burst while the router keeps the deadline.",
    "The batcher cuts batches by rows and by padded tokens.",
    "A request that cannot be served in time becomes a job.",
    "Quantized weights take a quarter of the bytes of float32 ones.",
    "How do I reset my password?", "What is the capital of France?",
    "The quick brown fox jumps over the lazy dog.",
)


def texts(n: int, seed: int = 0) -> list[str]:
    """`n` texts of 1-200 words (uniform), words from `SENTENCES` in order from a random
    start."""
    rng = np.random.default_rng(seed)
    words = " ".join(SENTENCES).split()
    out = []
    for _ in range(n):
        k, at = int(rng.integers(1, 201)), int(rng.integers(0, len(words)))
        out.append(" ".join((words * (k // len(words) + 2))[at:at + k]))
    return out


def build(store: Path):
    import floodway as fw
    import modal_app
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    embed = modal_app.endpoints["embed"]
    app = fw.App("precision-bench")
    b = dataclasses.replace(embed.build, tensorrt=False, precision=("fp32", "int8"))
    app.endpoint(model=embed.model, build=b, name="embed")(embed.fn)
    return build_endpoint(app["embed"], ArtifactStore(store)), embed.fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--store", type=Path, default=None)
    a = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from floodway.build.backends import open_runner
    from floodway.build.loader import load, read_manifest
    from floodway.build.manifest import Manifest
    from floodway.build.store import default_root

    console = Console(width=150)
    res, fn = build(a.store or default_root())
    m = Manifest.read(res.path)
    view = read_manifest(res.path)
    gate = next(p for p in m.precisions if p.precision == "int8")
    console.print(f"build {res.path} ({'cached' if res.cached else 'built'}); int8 gate: "
                  f"{gate.metric} {gate.measured} vs {gate.tolerance} per case {gate.cases}",
                  markup=False)
    model = load(res.path)      # tokenizer and the loader's first choice (int8 when passed)
    console.print(f"loader on this CPU: {model.path_taken[-1]}", markup=False)
    graphs = {"fp32": ("model.opt.onnx", "model.opt.onnx.data"), "int8": ("model.int8.onnx",)}
    runners = {k: open_runner(res.path, view, "onnxruntime-cpu", f, threads=a.threads,
                              mode="mmap", buffers={}) for k, f in graphs.items()}
    data = texts(a.rows * a.batches)
    batches = [data[i:i + a.rows] for i in range(0, len(data), a.rows)]
    feeds = [model.encode(b) for b in batches]

    def embed(kind: str, f: dict) -> np.ndarray:
        hidden = runners[kind](f)["last_hidden_state"]
        mask = f["attention_mask"][..., None].astype(np.float32)
        e = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
        return e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)

    out = {k: [embed(k, f) for f in feeds] for k in graphs}      # warm-up and the answers
    rates: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(a.rounds):
        for k in graphs:
            t0 = time.perf_counter()
            for f in feeds:
                runners[k](f)
            rates[k].append(len(data) / (time.perf_counter() - t0))
    cos = (np.concatenate(out["int8"]) * np.concatenate(out["fp32"])).sum(1)
    short = np.array([len(t.split()) <= 5 for t in data])
    table = Table(title=f"fp32 vs int8 on this CPU: {len(data)} texts of 1-200 words, "
                        f"batches of {a.rows}, {a.threads} threads, {a.rounds} rounds")
    for col in ("graph", "rows/s (median)", "min-max", "x fp32", "cosine min / p1 / median",
                "short texts: min cosine", "graph MB"):
        table.add_column(col)
    base = statistics.median(rates["fp32"])
    for k, files in graphs.items():
        r = statistics.median(rates[k])
        mb = sum(m.artifacts[f].bytes for f in files) / 1e6
        c = ("1 (reference)" if k == "fp32" else
             f"{cos.min():.4f} / {np.percentile(cos, 1):.4f} / {np.median(cos):.4f}")
        s = "-" if k == "fp32" or not short.any() else f"{cos[short].min():.4f}"
        table.add_row(k, f"{r:.1f}", f"{min(rates[k]):.1f}-{max(rates[k]):.1f}",
                      f"{r / base:.2f}", c, s, f"{mb:.1f}")
    console.print(table)
    console.print("target: int8 >= 1.5x fp32 rows/s with cosine >= 0.99")


if __name__ == "__main__":
    main()
