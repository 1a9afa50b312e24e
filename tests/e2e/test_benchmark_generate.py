"""benchmarks/generate.py runs end to end (`--smoke`: the toy model, 8 requests): it makes
the model, builds and serves both endpoints, replays the trace slice against each and
prints the table; every answer has the trace's length (the benchmark's model never ends
early) and each request's outcome is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e
TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"


@pytest.mark.skipif(not TRACE.is_file(), reason="the Azure LLM trace is not beside the repo")
def test_generate_benchmark_smoke(tmp_path):
    env = {**os.environ, "COLUMNS": "120"}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate.py"), "--smoke",
                          "--workdir", str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "tokens/s" in res.stdout and "TTFT p99" in res.stdout
    for endpoint in ("batched", "one_at_a_time"):
        outs = json.loads((tmp_path / f"outcomes-{endpoint}.json").read_text())
        assert len(outs) == 8
        done = [o for o in outs if o["kind"] == "finished"]
        assert done, outs
        for o in done:
            assert o["tokens"] == o["row"]["max_new_tokens"]
            assert o["prompt_tokens"] is not None and abs(
                o["prompt_tokens"] - o["row"]["prompt_tokens"]) <= 2
            assert o["sent_s"] < o["first_s"] <= o["end_s"]
