"""The commands that contact Modal: build --on-modal runs the app's build functions, no
credentials is said before contacting Modal, Modal's errors are one line."""

import os

from tests.conftest import MODAL_APP


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
