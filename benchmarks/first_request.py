"""The first answer of a freshly started server: `--starts` times (20), `floodway serve APP`
(`make run`'s shape: modal_app.py with its defaults, so a second container is still
starting when the first is ready), polled until ``/readyz`` first answers 200, then at once
one text of `--words` (150) words; its status, decision and time, then the server is
stopped. Prints each start and the p50 / max, and how many were a 200 within `--target-ms`
(500).

    .venv/bin/python benchmarks/first_request.py              # about 5 minutes on 2 cores
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from floodway.bench.server import free_port, stop

ROOT = Path(__file__).resolve().parents[1]
console = Console()


def one_start(app: str, words: int, deadline_ms: float, work: Path, k: int) -> dict:
    """One fresh server's first request: {status, ms, decision, containers_starting}."""
    port = free_port()
    log = work / f"serve-{k}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "floodway.cli", "serve", app, "--port",
                                 str(port), "--jobs-db", str(work / f"jobs-{k}.sqlite3")],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as c:
            end = time.monotonic() + 300
            while True:
                if proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"serve did not come up; see {log}")
                try:
                    r = c.get("/readyz")
                    if r.status_code == 200:
                        detail = r.json()
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            starting = sum(1 for cs in detail.get("endpoints", {}).values() for x in cs
                           if x.get("state") not in ("ready", "busy"))
            text = " ".join(["#first", *(["word"] * (words - 1))])
            t0 = time.perf_counter()
            r = c.post("/v1/embed", json={"inputs": [text]},
                       headers={"X-Deadline-Ms": f"{deadline_ms:g}", "Cache-Control": "no-cache"})
            ms = (time.perf_counter() - t0) * 1000
            return {"status": r.status_code, "ms": ms,
                    "decision": r.headers.get("x-floodway-decision", ""),
                    "starting": starting}
    finally:
        stop(proc)


def main(app: Annotated[str, typer.Option(help="the app served")] = str(ROOT / "modal_app.py"),
         starts: Annotated[int, typer.Option(min=1, help="fresh starts")] = 20,
         words: Annotated[int, typer.Option(min=1, help="words of the first text")] = 150,
         deadline_ms: Annotated[float, typer.Option(help="its X-Deadline-Ms")] = 1500.0,
         target_ms: Annotated[float, typer.Option(help="a 200 within this counts")] = 500.0
         ) -> None:
    """Time the first request of `starts` fresh servers (module docstring)."""
    got = []
    with tempfile.TemporaryDirectory(prefix="floodway-first-") as work:
        for k in range(starts):
            g = one_start(app, words, deadline_ms, Path(work), k)
            got.append(g)
            console.print(f"start {k + 1:2d}: {g['status']} in {g['ms']:7.1f} ms "
                          f"({g['decision'] or '-'}; {g['starting']} container(s) "
                          "not warm)")
    ms = [g["ms"] for g in got]
    fast = sum(1 for g in got if g["status"] == 200 and g["ms"] <= target_ms)
    console.print(f"first request over {starts} fresh starts: p50 {statistics.median(ms):.1f} "
                  f"ms, max {max(ms):.1f} ms; a 200 within {target_ms:g} ms in {fast} of "
                  f"{starts}")


if __name__ == "__main__":
    typer.run(main)
