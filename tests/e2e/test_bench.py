"""`floodway bench modal_app.py --trace CSV`: serves the app for the run, replays the trace
open loop, prints the outcome table, and writes the per-request CSV (one row per request
sent, outcomes adding up), the PNG and the batch times the router measured."""

import csv
import json
import os
import subprocess
import sys

from tests.conftest import MODAL_APP, ROOT

RATE = 10                      # requests/s in the trace
TRACE_S = 8                    # seconds of trace; --duration-s 5 keeps the first 5


def _write_trace(path):
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(RATE * TRACE_S):
        t = 1_700_000_000 + i / RATE
        lines.append(f"{t:.3f},{(i * 37) % 300 + 1},{i % 20 + 1}")
    path.write_text("\n".join(lines) + "\n")


def _table(stdout: str) -> dict[str, str]:
    """The printed table's rows: measure -> value."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in stdout.splitlines()
             if line.count("│") == 3]
    return {c[0]: c[1] for c in cells if c[0]}


def test_bench_replays_a_trace_against_a_served_app(built_store, tmp_path):
    trace, out = tmp_path / "trace.csv", tmp_path / "out"
    _write_trace(trace)
    r = subprocess.run(
        [sys.executable, "-m", "floodway.cli", "bench", str(MODAL_APP), "--trace", str(trace),
         "--duration-s", "5", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,   # a guard against a hang
        env={**os.environ, "FLOODWAY_STORE": str(built_store), "COLUMNS": "200"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "200 within deadline" in r.stdout and "goodput" in r.stdout
    with (out / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == RATE * 5                     # the first 5 s of the trace, all sent
    assert max(float(x["send_s"]) for x in rows) < 5
    outcomes = [x["outcome"] for x in rows]
    assert set(outcomes) <= {"ok", "late", "async", "429", "503", "504", "other"}
    assert outcomes.count("other") == 0, [x for x in rows if x["outcome"] == "other"][:3]
    table = _table(r.stdout)
    assert table["requests"] == f"{len(rows):,}"
    printed = {k: int(v.split()[0].replace(",", "")) for k, v in table.items()
               if k.startswith(("200 ", "202 ", "429 ", "503 ", "504 ", "other"))
               and "latency" not in k}
    assert sum(printed.values()) == len(rows)
    assert printed["200 within deadline"] == outcomes.count("ok")
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((out / "batch_times.json").read_text())
    assert doc["endpoint"] == "embed" and doc["intervals"]
    # the warm-up and the replay ran at least as many rows as were sent
    assert sum(iv["rows"] for iv in doc["intervals"]) >= len(rows) - outcomes.count("async")
    assert doc["fit"]["per_batch_s"] + doc["fit"]["per_row_s"] > 0
    assert "serve" in (out / "serve.log").read_text()
