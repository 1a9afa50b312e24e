"""The GPU check: every GPU path of floodway on this machine's CUDA GPU, one after the other,
each PASS or FAIL with its figures, then a summary table. Exit status 1 when any fails.

    make gpu-check                                   # installs .venv-gpu first, then this
    .venv-gpu/bin/python benchmarks/gpu_check.py [--only tensorrt-fp16,cold-start]
        [--budget-s 470] [--work DIR] [--fresh] [--json FILE]
    .venv/bin/python benchmarks/gpu_check.py --dry-run   # the plan; runs nothing

The checks (`gpu_check_setup.CHECKS`; each one's code is in gpu_check_parts.py): TensorRT
build and load of modal_app.py's MiniLM endpoint in fp32, fp16 and bf16 with their accuracy
gates; the loader's ONNX Runtime CUDA path against the CPU one; an engine refused for another
compute capability; generation on CUDA (examples/generate_app.py); a fresh container's cold
start to its first answer against a plain PyTorch load on CUDA; the suite's GPU tests.

Each check runs in a process of its own (a crash in a native library fails that check only),
under its own time limit and within the run's budget (`--budget-s`): a check that outlives
either is killed and fails, and one with no budget left is not started (FAIL, "not run").
A check whose install group failed in the setup (`<venv>/gpu-check-install.json`) fails at
once with the install error's last line. The builds share one artifact store under `--work`
(benchmarks/out/gpu-check), so a second run reuses them (`--fresh` starts over); each check's
log is in its logs/ folder. Without a CUDA GPU nothing runs: "no CUDA device: nothing run",
exit status 1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check_setup as setup  # noqa: E402
from gpu_check_setup import CHECKS, NAMES, Check, Result  # noqa: E402

PARTS = ROOT / "benchmarks" / "gpu_check_parts.py"
WORK = ROOT / "benchmarks" / "out" / "gpu-check"
BUDGET_S = 470.0          # the checks' share of 8 minutes (the rest: start and summary)
MIN_START_S = 15.0        # a check is not started with less budget than this left
RunOne = Callable[[Check, float], Result]


def blocked(check: Check, groups: Mapping[str, dict]) -> str | None:
    """Why `check` cannot run for lack of an install group (None: it can); `groups`: the
    setup's record (group -> {ok, line}); a group it does not name was not tried."""
    for g in check.needs:
        rec = groups.get(g)
        if rec is not None and not rec.get("ok"):
            return f"not run: {g} did not install: {rec.get('line', '?')}"
    return None


def run_checks(checks: Sequence[Check], groups: Mapping[str, dict], budget_s: float,
               run_one: RunOne, clock: Callable[[], float] = time.monotonic,
               say: Callable[[Result], None] = lambda r: None) -> list[Result]:
    """Each check in order -> its Result: failed at once when an install group it needs
    failed or when less than `MIN_START_S` of `budget_s` is left, else `run_one(check,
    time limit)`, the limit being its own or the budget left, whichever is less."""
    t0 = clock()
    out = []
    for check in checks:
        left = budget_s - (clock() - t0)
        if why := blocked(check, groups):
            res = Result(check.name, False, detail=why)
        elif left < MIN_START_S:
            res = Result(check.name, False, detail=f"not run: {max(left, 0):.0f} s of the run's "
                                                   f"{budget_s:.0f} s budget left")
        else:
            res = run_one(check, min(check.timeout_s, left))
        say(res)
        out.append(res)
    return out


def child_result(check: Check, rc: int | None, limit_s: float, seconds: float,
                 result_file: Path, log_tail: str) -> Result:
    """The Result of a check's process: what it wrote to `result_file`, or a failure saying
    it timed out (`rc` None), crashed or wrote nothing, with its log's last lines."""
    if rc is None:
        return Result(check.name, False, detail=f"timed out after {limit_s:.0f} s, killed; "
                                                f"log: {log_tail}", seconds=seconds)
    if result_file.is_file():
        try:
            res = Result.from_json(json.loads(result_file.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            return Result(check.name, False, detail=f"unreadable result ({e}); log: "
                                                    f"{log_tail}", seconds=seconds)
        res.seconds = seconds
        return res
    return Result(check.name, False, detail=f"exited {rc} with no result; log: {log_tail}",
                  seconds=seconds)


def tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(ln.strip()[:200] for ln in lines[-n:]) or "(empty log)"


def spawner(work: Path) -> RunOne:
    """`run_one` for `run_checks`: the check in a process of its own (gpu_check_parts.py,
    this interpreter), its output in WORK/logs/NAME.log, killed with its children when it
    outlives its limit."""
    env = {**os.environ, **setup.check_env(work)}
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "results").mkdir(parents=True, exist_ok=True)

    def run_one(check: Check, limit_s: float) -> Result:
        log = work / "logs" / f"{check.name}.log"
        out = work / "results" / f"{check.name}.json"
        out.unlink(missing_ok=True)
        t0 = time.monotonic()
        with log.open("w") as f:
            proc = subprocess.Popen([sys.executable, str(PARTS), check.name, str(work),
                                     str(out)], stdout=f, stderr=subprocess.STDOUT, env=env,
                                    cwd=ROOT, start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        return child_result(check, rc, limit_s, time.monotonic() - t0, out, tail(log))

    return run_one


def _figures(res: Result) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in res.figures.items())


def line(res: Result) -> str:
    """One check's line: PASS/FAIL, name, seconds, figures, detail."""
    out = f"{'PASS' if res.ok else 'FAIL'} {res.name} ({res.seconds:.1f} s)"
    if res.figures:
        out += f": {_figures(res)}"
    return out + (f" | {res.detail}" if res.detail else "")


def summary(console: Console, results: Sequence[Result], gpu: setup.Gpu) -> None:
    table = Table(title=f"GPU check on {gpu.name} (compute capability "
                        f"{gpu.compute_capability})", show_lines=True)
    for col in ("check", "result", "s", "figures", "detail"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.name, "[green]PASS[/]" if r.ok else "[red]FAIL[/]",
                      f"{r.seconds:.1f}", escape(_figures(r)), escape(r.detail))
    console.print(table)
    failed = [r.name for r in results if not r.ok]
    console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed"
                  + (f": {', '.join(failed)}" if failed else ""), markup=False)


def plan_table(checks: Sequence[Check]) -> Table:
    table = Table(title="GPU check: the plan (nothing run)")
    for col in ("check", "what", "needs", "limit s"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, escape(c.what), ", ".join(c.needs), f"{c.timeout_s:.0f}")
    return table


def pick(only: str) -> list[Check]:
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    bad = [n for n in wanted if n not in NAMES]
    if bad:
        raise typer.BadParameter(f"unknown check(s) {bad}; allowed: {', '.join(NAMES)}",
                                 param_hint="--only")
    return [c for c in CHECKS if not wanted or c.name in wanted]


def read_groups(record: Path | None) -> dict[str, dict]:
    """The setup's install record (default: this interpreter's venv's), {} when absent."""
    path = record or Path(sys.prefix) / setup.RECORD
    if not path.is_file():
        return {}
    return json.loads(path.read_text()).get("groups", {})


def main(dry_run: Annotated[bool, typer.Option("--dry-run", "--list",
                                               help="print the plan, run nothing")] = False,
         only: Annotated[str, typer.Option(help=f"comma-separated, of: {', '.join(NAMES)}")]
         = "",
         budget_s: Annotated[float, typer.Option(min=1, help="seconds for all checks")]
         = BUDGET_S,
         work: Annotated[Path, typer.Option(help="builds, logs and results")] = WORK,
         fresh: Annotated[bool, typer.Option(help="discard earlier builds first")] = False,
         record: Annotated[Path | None, typer.Option(
             help="the setup's install record (default: in this venv)")] = None,
         json_out: Annotated[Path | None, typer.Option(
             "--json", help="also write the results there")] = None) -> None:
    console = Console(width=max(Console().width, 140))
    checks = pick(only)
    if dry_run:
        console.print(plan_table(checks))
        console.print(f"budget {budget_s:.0f} s; each check also stops at its own limit",
                      markup=False)
        return
    gpu, why = setup.cuda_device()
    if gpu is None:
        console.print(f"{setup.NO_CUDA} ({why})", markup=False)
        raise typer.Exit(1)
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    console.print(f"GPU: {gpu.name}, compute capability {gpu.compute_capability}; "
                  f"{len(checks)} checks, budget {budget_s:.0f} s; work in {work}", markup=False)
    results = run_checks(checks, read_groups(record), budget_s, spawner(work),
                         say=lambda r: console.print(line(r), markup=False, soft_wrap=True))
    summary(console, results, gpu)
    if json_out is not None:
        json_out.write_text(json.dumps([r.to_json() for r in results], indent=2))
    if not all(r.ok for r in results):
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
