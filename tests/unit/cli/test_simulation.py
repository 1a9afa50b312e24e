"""`floodway simulate`: a counts trace run and plotted, options that do not apply refused;
--batch-times: the service model a `floodway bench` run measured (its batch_times.json),
token costs for a text endpoint on a trace with ContextTokens."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from floodway import cli
from floodway.modal.extra import NO_MODAL_ENV
from floodway.sim.model import BATCH_TIMES_FORMAT
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def _no_modal_here(monkeypatch):
    monkeypatch.setenv(NO_MODAL_ENV, "1")


APP = '''
import floodway as fw

app = fw.App("texts")


@app.endpoint(route=fw.Route(timeout_s=5.0), warm=fw.WarmPool(min_containers=1,
                                                              max_containers=1))
def embed(model, texts: list[str]) -> list[int]:
    return [len(t) for t in texts]
'''


def _files(tmp_path, per_token_s: float):
    app = tmp_path / "texts_app.py"
    app.write_text(APP)
    trace = tmp_path / "llm.csv"
    rows = [f"2023-11-16 18:17:{2 * i:02d}.0000000,400,20" for i in range(20)]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    times = tmp_path / "batch_times.json"
    times.write_text(json.dumps({
        "format": BATCH_TIMES_FORMAT, "endpoint": "embed", "batches": [], "by_rows": [],
        "intervals": [], "fit": {"per_batch_s": 0.02, "per_row_s": 0.0,
                                 "per_token_s": per_token_s, "intervals": 9}}))
    return app, trace, times


def _p50_ms(output: str) -> float:
    m = re.search(r"latency p50 / p95 / p99\s*│\s*([\d.]+) ms", output)
    assert m, output
    return float(m.group(1))


def _simulate(*args: str):
    return CliRunner().invoke(cli.cli, ["simulate", *args], env={"COLUMNS": "200"})


def test_simulate_takes_the_batch_times_a_bench_run_measured(tmp_path) -> None:
    app, trace, times = _files(tmp_path, per_token_s=0.001)
    base = _simulate(str(app), "--trace", str(trace))
    assert base.exit_code == 0, base.output
    measured = _simulate(str(app), "--trace", str(trace), "--batch-times", str(times))
    assert measured.exit_code == 0, measured.output
    # Each request alone in its batch: 400 + 2 tokens, capped at the build's max_seq_len, at
    # 1 ms each plus 20 ms a batch; the prior (rows alone) says 25 ms.
    assert _p50_ms(measured.output) > 5 * _p50_ms(base.output)


def test_simulate_refuses_batch_times_it_cannot_use(tmp_path) -> None:
    app, trace, times = _files(tmp_path, per_token_s=0.001)
    r = _simulate(str(app), "--trace", str(trace), "--batch-times", str(times),
                  "--service-ms", "10")
    assert r.exit_code != 0 and "--batch-times gives the service model" in r.output
    times.write_text(json.dumps({"format": "something else"}))
    r = _simulate(str(app), "--trace", str(trace), "--batch-times", str(times))
    assert r.exit_code != 0 and "format must be" in r.output and "Traceback" not in r.output
    r = _simulate(str(app), "--trace", str(trace), "--batch-times", str(tmp_path / "none"))
    assert r.exit_code != 0 and "cannot read it as JSON" in r.output


def test_simulate_names_its_service_model_and_takes_the_last_bench_runs(tmp_path,
                                                                       monkeypatch) -> None:
    from floodway.bench.runfile import write_run

    monkeypatch.chdir(tmp_path)
    app, trace, times = _files(tmp_path, per_token_s=0.001)
    prior = _simulate("texts_app.py", "--trace", str(trace))
    assert prior.exit_code == 0, prior.output
    assert "service model: the prior, 20.0 ms + 5.00 ms/row (no --batch-times, --bench-run " \
           "or --service-ms, and no bench run in bench-out/" in prior.output
    run = tmp_path / "bench-out"
    run.mkdir()
    write_run(run / "run.json", app="texts_app.py", app_resolved=str(app), url=None,
              endpoint="embed", trace=str(trace), time_scale=1.0, deadline_ms=5000.0,
              requests=20, inputs={"kind": "text"})
    times.rename(run / "batch_times.json")
    last = _simulate(str(app), "--trace", str(trace))
    assert last.exit_code == 0, last.output
    assert "service model: the last bench run of embed, bench-out/batch_times.json (fit " \
           "20.0 ms + 0.00 ms/row + 1000.00 us/padded token" in last.output
    assert _p50_ms(last.output) > 5 * _p50_ms(prior.output)     # the measured fit ran
    given = _simulate(str(app), "--trace", str(trace), "--service-ms", "10")
    assert "service model: --service-ms 10 (10.0 ms + 0.00 ms/row)" in given.output


def test_cli_simulates_a_counts_csv_and_writes_the_plot(tmp_path) -> None:
    csv = tmp_path / "inv.csv"
    minutes = [0] * 30
    minutes[0], minutes[10], minutes[11] = 3, 1, 4
    csv.write_text("HashFunction,HashApp,HashOwner," + ",".join(
        f"minute_{i + 1}" for i in range(30)) + "\n" + "abc123,a,o," + ",".join(
        map(str, minutes)) + "\n")
    png = tmp_path / "sim.png"
    r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                        str(ROOT / "modal_app.py"), "--trace", str(csv), "--function", "abc",
                        "--cold-start-s", "20,30", "--service-ms", "40", "--out", str(png)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"FLOODWAY_NO_MODAL": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "cold-start requests" in r.stdout and "8" in r.stdout
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    per_request = tmp_path / "req.csv"
    per_request.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,5\n"
                           "2023-11-16 18:19:04.0319600,3\n")
    r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                        str(ROOT / "modal_app.py"), "--trace", str(per_request)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"FLOODWAY_NO_MODAL": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "requests" in r.stdout and "2" in r.stdout


def test_cli_refuses_options_that_do_not_apply(tmp_path) -> None:
    counts = tmp_path / "inv.csv"
    counts.write_text("HashFunction,minute_1,minute_2\nabc,1,2\n")
    per_request = tmp_path / "req.csv"
    per_request.write_text("TIMESTAMP\n2023-11-16 18:17:03.9799600\n")
    cases = [
        (["--trace", str(per_request), "--function", "3"], "--function ('3') applies to "
                                                           "per-minute counts only"),
        (["--trace", str(counts), "--column", "TIMESTAMP"], "applies to per-request traces"),
        (["--trace", str(counts), "--per-row-ms", "3"], "--per-row-ms applies with a single "
                                                         "--service-ms"),
        (["--trace", str(counts), "--service-ms", "10,20", "--per-row-ms", "3"],
         "not 2 samples"),
        (["--trace", str(counts), "--cold-start-s", "nan"], "--cold-start-s: give numbers in"),
        (["--trace", str(counts), "--service-ms", "1e308"], "--service-ms: give numbers in"),
        (["--trace", str(counts), "--out", str(tmp_path / "p.txt")], "the plot is a PNG"),
        (["--trace", str(counts), "--out", str(tmp_path)], "is a directory"),
        (["--trace", str(counts), "--out", str(counts / "p.png")], "cannot write there"),
    ]
    for args, needle in cases:
        r = subprocess.run([sys.executable, "-m", "floodway.cli", "simulate",
                            str(ROOT / "modal_app.py"), *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env={"FLOODWAY_NO_MODAL": "1",
                                                        "PATH": "/usr/bin:/bin",
                                                        "COLUMNS": "200"})
        assert r.returncode != 0 and needle in " ".join(r.stderr.split()), (args, r.stderr)
        assert "Traceback" not in r.stderr
