"""The client is what a caller installs floodway for on a laptop or in another service: it
imports httpx, floodway's errors and its field checks, and nothing of the server (no
starlette, numpy, onnxruntime, modal, nor floodway's http, runtime, routers, ...)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[3] / "floodway" / "client"
ALLOWED = ("httpx", "floodway.errors", "floodway.checks", "floodway.client")


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_client_modules_import_only_httpx_floodway_errors_and_the_stdlib():
    paths = sorted(CLIENT.glob("*.py"))
    assert len(paths) >= 8
    bad = {f"{p.name} imports {m}" for p in paths for m in _imports(p)
           if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"
           and not any(m == a or m.startswith(a + ".") for a in ALLOWED)}
    assert not bad, sorted(bad)


def test_importing_the_client_loads_nothing_of_the_server():
    code = ("import sys, floodway; floodway.Client; floodway.AsyncClient; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "floodway.client.sync" in loaded and "httpx" in loaded
    heavy = {"starlette", "numpy", "onnxruntime", "modal", "pydantic", "floodway.http",
             "floodway.runtime", "floodway.routers", "floodway.functions", "floodway.config"}
    assert not heavy & loaded
