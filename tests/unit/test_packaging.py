"""The package's extras as pyproject.toml declares them, the README documents them and the
Makefile installs them: serving needs neither torch nor Modal; `build` and `modal` add them;
a command whose extra is missing names it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import MODAL_APP, ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
README = (ROOT / "README.md").read_text()
# The extras a user's own project installs (dev is this repository's test toolchain).
USER_EXTRAS = ("build", "modal", "tensorrt")


def _names(requirements: list[str]) -> set[str]:
    """The distribution names of requirement strings (``modal[oauth]>=1.6`` -> ``modal``)."""
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}


def test_the_base_install_serves_without_torch_or_modal():
    base = _names(PROJECT["dependencies"])
    assert {"onnxruntime", "tokenizers", "starlette", "uvicorn"} <= base
    assert not base & {"torch", "transformers", "modal", "tensorrt"}, base


def test_the_extras_add_building_and_modal():
    assert {"torch", "transformers", "onnx"} <= _names(EXTRAS["build"])
    # OAuth credentials with a JWT key need the client's own `oauth` extra (PyJWT, cryptography).
    [modal_req] = EXTRAS["modal"]
    assert re.match(r"modal\[oauth\]", modal_req), modal_req
    assert set(USER_EXTRAS) | {"dev"} == set(EXTRAS)


def test_the_readme_documents_every_extra_and_only_those():
    """Each extra has an install line in the README, and every ``floodway[...]`` the README
    or the Modal page names is an extra that exists."""
    def named(text: str) -> set[str]:
        groups = re.findall(r"floodway(?:-[0-9.]+-py3-none-any\.whl)?\[([a-z,]+)\]", text)
        return {extra for group in groups for extra in group.split(",")}

    assert set(USER_EXTRAS) <= named(README)
    assert named(README + (ROOT / "docs" / "modal.md").read_text()) <= set(EXTRAS)
    assert "download.pytorch.org/whl/cpu" in README          # torch's CPU wheel, said how
    assert "pip wheel . --no-deps -w dist" in README


def test_make_installs_every_extra_the_tests_import():
    makefile = (ROOT / "Makefile").read_text()
    [installed] = re.findall(r'-e "\.\[([a-z,]+)\]"', makefile)
    assert {"build", "dev", "modal"} <= set(installed.split(","))


def test_serving_imports_no_modal_and_no_torch():
    """What `floodway serve` imports (the CLI, the app file, the router, a worker's loader)
    works with Modal and torch absent, as in a base install."""
    code = (
        "import sys, os\n"
        "sys.modules['modal'] = None; sys.modules['torch'] = None\n"
        "os.environ['FLOODWAY_NO_MODAL'] = '1'\n"
        "import floodway.cli, floodway.server, floodway.runtime.worker\n"
        "import floodway.build.loader, floodway.http.app\n"
        "from floodway.functions.discover import load_app\n"
        f"_, eps = load_app({str(MODAL_APP)!r})\n"
        "print([ep.name for ep in eps])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['embed']"


def test_build_without_the_build_extra_names_it(hf_cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from floodway import cli

    monkeypatch.setenv("FLOODWAY_NO_MODAL", "1")      # what `build` sets, undone after the test
    monkeypatch.setitem(sys.modules, "torch", None)          # as if not installed
    r = CliRunner().invoke(cli.cli, ["build", str(MODAL_APP), "--store", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "needs the build extra (torch is not installed)" in r.output
    assert "pip install 'floodway[build]'" in r.output


@pytest.mark.parametrize("extra", USER_EXTRAS)
def test_each_extra_has_a_line_in_the_readme_table(extra):
    assert re.search(rf"^\| `{extra}` \|", README, re.M), extra
