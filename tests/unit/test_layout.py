"""The package's shape: small modules and functions, priors defined once, the serving path's
import boundaries. Failures name the module (and function) and the size found."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "floodway"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
# The numba kernel is one compiled loop by design (floodway/sim/kernel.py says why).
EXEMPT = {"sim/kernel.py"}
PRIORS = ("COLD_START_PRIOR_S", "SERVICE_PRIOR", "SERVICE_PRIOR_S")

MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(p: Path) -> str:
    return p.relative_to(PKG).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_modules_stay_small(path: Path):
    if _rel(path) in EXEMPT:
        pytest.skip("the numba kernel is exempt")
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{_rel(path)} has {lines} lines (> {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_functions_stay_small(path: Path):
    if _rel(path) in EXEMPT:
        pytest.skip("the numba kernel is exempt")
    tree = ast.parse(path.read_text())
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_rel(path)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_each_prior_is_defined_once():
    found: dict[str, list[str]] = {name: [] for name in PRIORS}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id in found:
                    found[t.id].append(_rel(path))
    assert {k: v for k, v in found.items() if v != ["core/priors.py"]} == {}
