"""The CLI: build is a no-op when nothing changed; bad app specs give clear errors."""

import os
import subprocess
import sys

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
    from floodway.deploy import modal_objects

    calls = []

    def fake(module_app, fw_app, endpoint, force):
        calls.append((module_app, fw_app, endpoint, force))
        return [{"endpoint": "embed", "key": "k1", "cached": False, "seconds": 12.5,
                 "skipped": {}}]

    monkeypatch.delenv("FLOODWAY_NO_MODAL", raising=False)
    monkeypatch.setattr(modal_objects, "run_builds_on_modal", fake)
    r = CliRunner().invoke(cli.cli, ["build", f"{MODAL_APP}::embed", "--on-modal", "--force"])
    assert r.exit_code == 0, r.output
    ((module_app, fw_app, endpoint, force),) = calls
    assert isinstance(module_app, modal.App) and endpoint == "embed" and force is True
    assert [ep.name for ep in fw_app] == ["embed"]
    assert "embed: built k1 on Modal in 12.5s" in r.output
