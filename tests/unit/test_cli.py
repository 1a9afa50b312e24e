"""The CLI: build is a no-op when nothing changed; bad app specs give clear errors; simulate
runs a trace, writes its plot and refuses options that do not apply."""

import os
import subprocess
import sys

import pytest

from tests.conftest import MODAL_APP, ROOT


def floodway(*args, env=None):
    return subprocess.run([sys.executable, "-m", "floodway.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=120)


def test_unchanged_build_is_a_noop(built_store):
    r = floodway("build", str(MODAL_APP), "--store", str(built_store))
    assert r.returncode == 0, r.stderr
    assert "embed: unchanged (no-op)" in r.stderr
    assert "stage compile skipped: no CUDA GPU" in r.stderr


def test_unknown_endpoint_and_missing_file(tmp_path):
    r = floodway("build", f"{MODAL_APP}::nope", "--store", str(tmp_path))
    assert r.returncode == 2 and "has no endpoint 'nope'; it has: embed" in r.stderr
    r = floodway("build", str(tmp_path / "absent.py"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_serve_refuses_public_bind(built_store):
    r = floodway("serve", str(MODAL_APP), "--host", "0.0.0.0", "--store", str(built_store),
                 env={"FLOODWAY_API_KEYS": ""})
    assert r.returncode == 2 and "not a loopback address" in r.stderr
    assert "FLOODWAY_API_KEYS" in r.stderr and "--api-key" in r.stderr


def test_build_on_modal_calls_the_apps_build_functions(monkeypatch):
    import modal
    from typer.testing import CliRunner

    from floodway import cli
    from floodway.modal.app import build

    calls = []

    def fake(module_app, fw_app, endpoint, force):
        calls.append((module_app, fw_app, endpoint, force))
        return [{"endpoint": "embed", "key": "k1", "cached": False, "seconds": 12.5,
                 "skipped": {}}]

    # A FLOODWAY_NO_MODAL left set in the shell does not stop a build on Modal.
    monkeypatch.setenv("FLOODWAY_NO_MODAL", "1")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.setattr(build, "run_builds_on_modal", fake)
    r = CliRunner().invoke(cli.cli, ["build", f"{MODAL_APP}::embed", "--on-modal", "--force"])
    assert r.exit_code == 0, r.output
    ((module_app, fw_app, endpoint, force),) = calls
    assert isinstance(module_app, modal.App) and endpoint == "embed" and force is True
    assert [ep.name for ep in fw_app] == ["embed"]
    assert "embed: built k1 on Modal in 12.5s" in r.output


def _modal_cli(monkeypatch, *, creds: bool):
    from floodway import cli

    monkeypatch.delenv("FLOODWAY_NO_MODAL", raising=False)
    for k in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", os.devnull)      # no ~/.modal.toml profile
    if creds:
        monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
        monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    return cli


def test_build_on_modal_without_credentials_says_so_before_contacting_modal(monkeypatch):
    from typer.testing import CliRunner

    from floodway.modal.app import build

    def contacted(*a, **k):
        raise AssertionError("contacted Modal")

    cli = _modal_cli(monkeypatch, creds=False)
    monkeypatch.setattr(build, "run_builds_on_modal", contacted)
    r = CliRunner().invoke(cli.cli, ["build", str(MODAL_APP), "--on-modal"])
    assert r.exit_code == 2, r.output
    assert "no Modal credentials" in r.output and "Traceback" not in r.output


def test_modal_errors_are_one_line(monkeypatch):
    """An unreachable Modal (or one that refuses) is one error line, not a traceback
    through the client."""
    import modal.exception
    from typer.testing import CliRunner

    from floodway.modal import deploy
    from floodway.modal.app import build

    cli = _modal_cli(monkeypatch, creds=True)

    def unreachable(*a, **k):
        raise modal.exception.ConnectionError("Could not connect to the Modal server.")

    def refused(*a, **k):
        raise modal.exception.InvalidError("Invalid App name")

    monkeypatch.setattr(build, "run_builds_on_modal", unreachable)
    r = CliRunner().invoke(cli.cli, ["build", str(MODAL_APP), "--on-modal"])
    assert r.exit_code == 2 and "contacting Modal to build" in r.output
    assert "could not reach Modal to build" in r.output and "Traceback" not in r.output
    monkeypatch.setattr(deploy, "deploy_and_apply", refused)
    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 2
    assert "Modal refused to deploy: InvalidError: Invalid App name" in r.output

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


def test_an_error_keeps_its_brackets_it_is_not_read_as_markup(capsys):
    from floodway.cli import _fail
    from floodway.errors import FloodwayError

    _fail(FloodwayError("takes list[np.ndarray]; use fw.Array[np.float32, (3, 224, 224)]"))
    err = capsys.readouterr().err
    assert "list[np.ndarray]" in err and "fw.Array[np.float32, (3, 224, 224)]" in err


@pytest.fixture
def serve_state(monkeypatch):
    """What `floodway serve` sets in this process (environment, logger levels): restored."""
    import logging

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "FLOODWAY_NO_MODAL"):
        monkeypatch.delenv(name, raising=False)
    loggers = [logging.getLogger(n) for n in ("floodway", "httpx")]
    before = [lg.level for lg in loggers]
    yield
    for lg, level in zip(loggers, before, strict=True):
        lg.setLevel(level)


def test_serve_log_level_sets_floodways_loggers_uvicorns_and_quiets_httpx(monkeypatch,
                                                                          serve_state):
    import logging

    from typer.testing import CliRunner

    from floodway import cli
    from floodway.runtime import server

    got = {}
    monkeypatch.setattr(server, "serve", lambda app, **kw: got.update(kw))
    r = CliRunner().invoke(cli.cli, ["serve", "app.py", "--log-level", "warning"])
    assert r.exit_code == 0, r.output
    assert got["log_level"] == "warning"   # uvicorn's loggers
    assert logging.getLogger("floodway.container").getEffectiveLevel() == logging.WARNING
    r = CliRunner().invoke(cli.cli, ["serve", "app.py", "--log-level", "DEBUG"])
    assert got["log_level"] == "debug"
    assert logging.getLogger("floodway.endpoint").getEffectiveLevel() == logging.DEBUG
    # httpx logs each request it sends (--show-example): the access log has it already.
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"   # the workers inherit it
    r = CliRunner().invoke(cli.cli, ["serve", "app.py", "--log-level", "loud"])
    assert r.exit_code == 2 and "loud" in r.output


def test_build_turns_hugging_faces_progress_bars_off_under_its_own(monkeypatch, serve_state):
    from typer.testing import CliRunner

    from floodway import cli
    from floodway.errors import FloodwayError
    from floodway.functions import discover

    seen = []

    def load_app(spec):
        seen.append(os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"))
        raise FloodwayError("stop here")

    monkeypatch.setattr(discover, "load_app", load_app)
    r = CliRunner().invoke(cli.cli, ["build", "app.py"])
    assert r.exit_code == 2 and seen == ["1"]
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")   # the user's choice wins
    CliRunner().invoke(cli.cli, ["build", "app.py"])
    assert seen == ["1", "0"]


def test_a_file_with_config_typos_is_one_short_message_not_a_traceback(tmp_path, serve_state):
    from typer.testing import CliRunner

    from floodway import cli

    path = tmp_path / "typo_cli_app.py"
    path.write_text("import floodway as fw\napp = fw.App('t')\n\n\n"
                    "@app.endpoint(min_container=1)\ndef a(model, texts: list[str]):\n"
                    "    return texts\n\n\n@app.endpoint(warm=fw.WarmPool(buffer_container=1))\n"
                    "def b(model, texts: list[str]):\n    return texts\n")
    for command in ("build", "serve"):
        r = CliRunner().invoke(cli.cli, [command, str(path)])
        text = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert "2 problem(s) in 2 endpoint definitions" in text
        assert "did you mean warm=fw.WarmPool(min_containers=...)?" in text
        assert "did you mean 'buffer_containers'?" in text
