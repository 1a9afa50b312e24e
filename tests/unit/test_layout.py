"""The package's shape: small modules and functions, priors defined once, the serving path's
import boundaries. Failures name the module (and function) and the size found."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "floodway"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# The numba kernel is one compiled loop by design (floodway/sim/kernel.py says why).
EXEMPT = {"sim/kernel.py"}
PRIORS = ("COLD_START_PRIOR_S", "SERVICE_PRIOR", "SERVICE_PRIOR_S", "ROW_TOKENS_PRIOR",
          "TEXT_SERVICE_PRIOR", "PREFILL_PRIOR", "DECODE_STEP_PRIOR", "GENERATED_TOKENS_PRIOR",
          "PROMPT_TOKENS_PRIOR", "PROBE_START_FACTOR", "PROBE_START_MARGIN_S")

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


# Package -> what it never imports (ARCHITECTURE.md, "What never imports what"). The pure
# decisions know nothing of where they run; the HTTP layer knows backends only through its
# protocols; the simulator drives the pure code without any runtime.
NEVER = {
    "routers/decide.py": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
                          "floodway.sim", "floodway.jobs", "modal", "starlette", "torch"),
    "routers/decide_stream.py": ("floodway.runtime", "floodway.http", "floodway.deploy",
                                 "floodway.modal", "floodway.sim", "floodway.jobs", "modal",
                                 "starlette", "torch"),
    "warmers": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
                "floodway.sim", "floodway.jobs", "modal", "starlette", "torch"),
    "core": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
             "floodway.sim", "floodway.jobs", "modal", "starlette", "torch"),
    "cache": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
              "floodway.sim", "floodway.jobs", "modal", "starlette", "torch"),
    "http": ("floodway.runtime", "floodway.deploy", "floodway.modal", "floodway.sim", "modal",
             "torch"),
    "sim": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
            "floodway.jobs", "modal", "starlette", "torch"),
    "runtime/worker.py": ("torch", "floodway.http", "floodway.deploy", "floodway.modal",
                          "floodway.sim"),
}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("scope", sorted(NEVER))
def test_import_boundaries(scope: str):
    paths = [p for p in MODULES if _rel(p) == scope or _rel(p).startswith(scope + "/")]
    assert paths, f"no module under {scope}"
    bad = {f"{_rel(p)} imports {m}" for p in paths for m in _imports(p)
           for banned in NEVER[scope] if m == banned or m.startswith(banned + ".")}
    assert not bad, sorted(bad)


def _module_name(path: Path) -> str:
    parts = ("floodway", *path.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports anywhere (also inside functions, where a
    deferred import only hides a cycle): ``from a import b`` names ``a.b`` when that is a
    module, else ``a``; a relative import is resolved against `path`'s package."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [base])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        else:
            continue
        out.update(n for n in names if n in known)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> modules it imports), as a path, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph[node]):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_the_modal_package_has_no_import_cycle():
    """`floodway/modal/` is grouped by where each part runs, and its modules import one
    another in one direction only: every import counts, the deferred ones inside functions
    too (`to_modal` imports `app.objects` when it runs)."""
    paths = [p for p in MODULES if _rel(p).startswith("modal/")]
    known = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imported_modules(p, known) - {_module_name(p)} for p in paths}
    assert sum(map(len, graph.values())) > len(graph) // 2, "the import graph looks empty"
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_a_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


TESTS = Path(__file__).resolve().parents[1]


def _real_sleeps(path: Path) -> list[str]:
    """Calls of time.sleep / asyncio.sleep with anything but a literal 0."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "sleep" and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("time", "asyncio")):
            continue
        arg = node.args[0] if node.args else None
        if not (isinstance(arg, ast.Constant) and arg.value == 0):
            out.append(f"{path.relative_to(TESTS).as_posix()}:{node.lineno}")
    return out


def test_no_test_outside_e2e_sleeps_on_the_real_clock():
    """Only end-to-end tests (real processes) wait on real time; the rest drive injected
    clocks, so they are fast and never flaky on a loaded machine."""
    paths = [p for p in TESTS.rglob("*.py") if "e2e" not in p.relative_to(TESTS).parts]
    assert [s for p in paths for s in _real_sleeps(p)] == []
