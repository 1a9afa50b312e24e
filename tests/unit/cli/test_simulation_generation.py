"""`floodway simulate` of a streaming endpoint on a trace with token columns: the generation
simulator's figures (TTFT, tokens/s, first tokens within the deadline, shed)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from floodway import cli
from floodway.modal.extra import NO_MODAL_ENV


@pytest.fixture(autouse=True)
def _no_modal_here(monkeypatch):
    # The command sets it in the process (setdefault); set here, it is undone after the test.
    monkeypatch.setenv(NO_MODAL_ENV, "1")

APP = '''
import floodway as fw

app = fw.App("talk")


@app.endpoint(generation=fw.Generation(max_sequences=4, max_new_tokens=64),
              route=fw.Route(timeout_s=2.0, spill=()),
              warm=fw.WarmPool(min_containers=1, max_containers=1))
async def talk(model, prompt: str):
    yield prompt


@app.endpoint()
def echo(model, texts: list[str]) -> list[str]:
    return texts
'''


def _files(tmp_path, n: int, gap_ms: int):
    app = tmp_path / "talk_app.py"
    app.write_text(APP)
    trace = tmp_path / "llm.csv"
    rows = [f"2023-11-16 18:17:{(i * gap_ms) // 1000:02d}.{(i * gap_ms) % 1000:03d}0000,"
            f"{100 + i},{20 + i % 7}" for i in range(n)]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return app, trace


def _simulate(*args: str):
    return CliRunner().invoke(cli.cli, ["simulate", *args], env={"COLUMNS": "200"})


def _value(output: str, name: str) -> str:
    return re.search(rf"{re.escape(name)}\s*│\s*([^│]+?)\s*│", output).group(1)


def test_a_streaming_endpoint_on_an_llm_trace_runs_the_generation_simulator(tmp_path):
    app, trace = _files(tmp_path, 40, gap_ms=1000)      # one a second: every one served
    r = _simulate(f"{app}::talk", "--trace", str(trace), "--cold-start-s", "5")
    assert r.exit_code == 0, r.output
    assert "(generation)" in r.output and _value(r.output, "requests") == "40"
    assert _value(r.output, "finished / first token within deadline") == "40 / 40"
    p50, p99 = _value(r.output, "TTFT p50 / p99").split(" / ")
    assert 0 < float(p50.split()[0]) <= float(p99.split()[0]) < 2000
    tokens = _value(r.output, "tokens generated")
    assert tokens.startswith(f"{sum(20 + i % 7 for i in range(40)):,} (") and "tokens/s" in tokens


def test_a_burst_is_shed_and_counted(tmp_path):
    app, trace = _files(tmp_path, 59, gap_ms=1)         # 59 at once on one 4-slot container
    r = _simulate(f"{app}::talk", "--trace", str(trace), "--cold-start-s", "5")
    assert r.exit_code == 0, r.output
    _, shed, _ = (int(x) for x in _value(r.output, "spill async / shed / expired").split(" / "))
    finished, within = (int(x.replace(",", "")) for x in _value(
        r.output, "finished / first token within deadline").split(" / "))
    assert shed > 0 and finished + shed <= 59 and within <= finished


def test_generation_is_asked_for_or_refused_clearly(tmp_path):
    app, trace = _files(tmp_path, 5, gap_ms=1000)
    # A batch endpoint simulated as generation on request.
    r = _simulate(f"{app}::echo", "--trace", str(trace), "--generation")
    assert r.exit_code == 0 and "(generation)" in r.output, r.output
    # Without token columns there is nothing to generate.
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP\n2023-11-16 18:17:03.9799600\n")
    r = _simulate(f"{app}::echo", "--trace", str(plain), "--generation")
    assert r.exit_code == 2 and "ContextTokens and GeneratedTokens" in r.output
