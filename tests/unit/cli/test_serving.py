"""`floodway serve`: a public bind needs API keys; --log-level sets floodway's loggers and
uvicorn's."""

import os

from tests.conftest import MODAL_APP
from tests.unit.cli.run import floodway


def test_serve_refuses_public_bind(built_store):
    r = floodway("serve", str(MODAL_APP), "--host", "0.0.0.0", "--store", str(built_store),
                 env={"FLOODWAY_API_KEYS": ""})
    assert r.returncode == 2 and "not a loopback address" in r.stderr
    assert "FLOODWAY_API_KEYS" in r.stderr and "--api-key" in r.stderr


def test_serve_log_level_sets_floodways_loggers_uvicorns_and_quiets_httpx(monkeypatch,
                                                                          serve_state):
    import logging

    from typer.testing import CliRunner

    from floodway import cli, server

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
