"""The snippets of README.md and docs/ marked `<!-- serve: APP -->`, run as written against a
real `floodway serve APP` (tests/doc_snippets.py): shell ones with bash, Python ones in a
fresh namespace; only the port (8000 in the snippet) is the test's own. Each app is built
and served once, when its first snippet runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import MODAL_APP, ROOT
from tests.doc_snippets import PORT, Fence, serve_fences
from tests.e2e.conftest import Server, running_server

pytestmark = pytest.mark.e2e
FENCES = serve_fences()


class Servers:
    """One `floodway serve` per app file, started on first use."""

    def __init__(self, built_store, tmp_path_factory) -> None:
        self.built_store, self.tmp = built_store, tmp_path_factory
        self.stack = contextlib.ExitStack()
        self.running: dict[str, Server] = {}

    def get(self, app: str) -> Server:
        if app not in self.running:
            root = self.tmp.mktemp("docs-serve")
            env = {"FLOODWAY_JOBS_DB": str(root / "jobs.sqlite3"), "HF_HUB_OFFLINE": "1"}
            if ROOT / app == MODAL_APP:
                store = self.built_store
            else:
                store = root / "store"
                build_env = {**os.environ, **env, "FLOODWAY_STORE": str(store)}
                r = subprocess.run([sys.executable, "-m", "floodway.cli", "build", app],
                                   cwd=ROOT, env=build_env, capture_output=True, text=True,
                                   timeout=300)
                assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            self.running[app] = self.stack.enter_context(running_server(
                ROOT / app, store, log=root / "serve.log", env=env, whole_pool=False))
        return self.running[app]


@pytest.fixture(scope="module")
def servers(built_store, tmp_path_factory) -> Iterator[Servers]:
    s = Servers(built_store, tmp_path_factory)
    with s.stack:
        yield s


@pytest.mark.parametrize("fence", FENCES, ids=[f.where for f in FENCES])
def test_snippet_runs_against_the_server(fence: Fence, servers: Servers, tmp_path, capsys):
    srv = servers.get(fence.arg)
    code = fence.code.replace(PORT, srv.base.removeprefix("http://"))
    if fence.lang == "python":
        exec(compile(code, fence.where, "exec"), {"__name__": "docs_snippet"})
        out = capsys.readouterr().out
    else:
        r = subprocess.run(["bash", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
    assert out.strip(), f"{fence.where} printed nothing"
    assert '"error"' not in out, out[:2000]
