"""`floodway build`: a no-op when nothing changed; bad app specs and config typos are short
clear errors; Hugging Face's progress bars off under floodway's own."""

import os

from tests.conftest import MODAL_APP
from tests.unit.cli.run import floodway


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
