"""benchmarks/gpu_check.py without a GPU: the plan names every GPU path, nothing runs (status
1) where no CUDA device is found, a failed install fails only the checks that need it, the
run's budget bounds each check's time limit, and a check that hangs or crashes fails with
its log's last lines. The checks themselves need a GPU (`make gpu-check`)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from benchmarks import gpu_check
from benchmarks.gpu_check import Result, blocked, child_result, run_checks

setup = gpu_check.setup
FAKE_GPU = setup.Gpu("NVIDIA H200", "9.0")
TRT_FAILED = "ERROR: No matching distribution found for tensorrt"


def _cli(args: list[str]):
    app = typer.Typer()
    app.command()(gpu_check.main)
    return CliRunner().invoke(app, args)


def _never(*_args):
    raise AssertionError("a check was started")


def test_the_plan_lists_every_gpu_path_and_runs_nothing(monkeypatch):
    assert set(setup.NAMES) == {
        "tensorrt-fp32", "tensorrt-fp16", "tensorrt-bf16", "onnxruntime-cuda",
        "tensorrt-other-cc", "generate-cuda", "cold-start", "pytest-gpu"}
    monkeypatch.setattr(gpu_check, "spawner", _never)
    monkeypatch.setattr(setup, "cuda_device", _never)
    for flag in ("--dry-run", "--list"):
        res = _cli([flag])
        assert res.exit_code == 0, res.output
        assert all(name in res.output for name in setup.NAMES)
        assert "nothing run" in res.output


def test_without_cuda_nothing_runs_and_the_status_is_not_zero(monkeypatch, tmp_path):
    monkeypatch.setattr(setup, "cuda_device", lambda: (None, "nvidia-smi is not on PATH"))
    monkeypatch.setattr(gpu_check, "spawner", _never)
    res = _cli(["--work", str(tmp_path / "work")])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)   # no check started
    assert "no CUDA device: nothing run (nvidia-smi is not on PATH)" in res.output
    assert not (tmp_path / "work").exists()


def test_the_setup_without_cuda_creates_no_venv(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(setup, "cuda_device", lambda: (None, "nvidia-smi lists no GPU"))
    assert setup.main(["--venv", str(tmp_path / "venv")]) == 1
    assert setup.NO_CUDA in capsys.readouterr().err
    assert not (tmp_path / "venv").exists()


def test_the_status_is_not_zero_when_any_check_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(setup, "cuda_device", lambda: (FAKE_GPU, ""))
    outcome = {"ok": True}

    def spawner(work):
        return lambda check, limit_s: Result(check.name, outcome["ok"] or
                                             check.name != "cold-start", {"ratio": 2.5})

    monkeypatch.setattr(gpu_check, "spawner", spawner)
    out = tmp_path / "results.json"
    args = ["--work", str(tmp_path), "--record", str(tmp_path / "none.json"), "--json", str(out)]
    res = _cli(args)
    assert res.exit_code == 0, res.output
    assert "PASS cold-start" in res.output and "8 passed, 0 failed" in res.output
    outcome["ok"] = False
    res = _cli(args)
    assert res.exit_code == 1
    assert "FAIL cold-start" in res.output and "7 passed, 1 failed: cold-start" in res.output
    saved = {r["name"]: r for r in json.loads(out.read_text())}
    assert saved["cold-start"]["ok"] is False and saved["cold-start"]["figures"] == {"ratio": 2.5}


def test_a_failed_install_fails_only_the_checks_that_need_it():
    groups = {setup.BASE: {"ok": True, "line": "ok"},
              setup.TENSORRT: {"ok": False, "line": TRT_FAILED}}
    started = []

    def run_one(check, limit_s):
        started.append(check.name)
        return Result(check.name, True)

    results = run_checks(setup.CHECKS, groups, 10_000, run_one)
    needs_trt = {c.name for c in setup.CHECKS if setup.TENSORRT in c.needs}
    assert needs_trt >= {"tensorrt-fp32", "tensorrt-fp16", "tensorrt-bf16",
                         "tensorrt-other-cc", "cold-start"}
    assert set(started) == set(setup.NAMES) - needs_trt
    for r in results:
        if r.name in needs_trt:
            assert not r.ok and r.detail == f"not run: tensorrt did not install: {TRT_FAILED}"
        else:
            assert r.ok
    # a group the setup did not try (no record) blocks nothing
    assert blocked(setup.CHECKS[0], {}) is None


def test_the_budget_bounds_each_limit_and_stops_starting_checks():
    now = [0.0]
    limits = {}

    def run_one(check, limit_s):
        limits[check.name] = limit_s
        now[0] += 100.0             # each check takes 100 s of the fake clock
        return Result(check.name, True)

    checks = setup.CHECKS[:4]       # limits 180, 60, 60, 150
    results = run_checks(checks, {}, 250.0, run_one, clock=lambda: now[0])
    assert limits == {"tensorrt-fp32": 180.0, "onnxruntime-cuda": 60.0,
                      "tensorrt-other-cc": 50.0}
    assert [r.ok for r in results] == [True, True, True, False]
    assert results[3].detail == "not run: 0 s of the run's 250 s budget left"


@pytest.mark.parametrize("rc, written, want", [
    (None, None, "timed out after 60 s, killed; log: a | b"),
    (1, None, "exited 1 with no result; log: a | b"),
    (0, "not json", "unreadable result"),
    (0, {"name": "cold-start", "ok": True, "figures": {"ratio": 3.0}, "detail": "fine"},
     "fine"),
])
def test_a_check_process_that_hangs_or_crashes_fails_with_its_log(tmp_path, rc, written, want):
    check = next(c for c in setup.CHECKS if c.name == "cold-start")
    out = tmp_path / "r.json"
    if written is not None:
        out.write_text(written if isinstance(written, str) else json.dumps(written))
    res = child_result(check, rc, 60.0, 12.5, out, "a | b")
    assert res.name == "cold-start" and res.seconds == 12.5
    assert res.detail.startswith(want)
    assert res.ok is (written is not None and not isinstance(written, str))


def test_tail_reads_a_log_s_last_lines(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("one\n\ntwo\nthree\nfour\n")
    assert gpu_check.tail(log, 2) == "three | four"
    assert gpu_check.tail(tmp_path / "missing.log") == "(no log)"
