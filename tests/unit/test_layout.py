"""The package's shape: modules under a ceiling and small functions, priors defined once, no
module reaching into another's private names, the serving path's import boundaries. Failures
name the module (and function) and what was found."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "floodway"
# A ceiling, not a target: modules are cut where their concept ends.
MAX_MODULE_LINES = 900
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
def test_modules_stay_under_the_ceiling(path: Path):
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


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str) -> bool:
    """Whether `dotted` (``floodway.x.y``) names a module or package of floodway."""
    parts = dotted.split(".")
    if parts[0] != "floodway":
        return False
    path = PKG.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)) is not None:
        return f"{base}.{node.attr}"
    return None


def private_uses(source: str, own: str) -> list[str]:
    """What module `own` (``floodway.x``) takes of other floodway modules' private names:
    ``from floodway.y import _z``, and ``m._z`` where `m` is bound to a floodway module by an
    import (``import floodway.y as m``, ``from floodway import y``, ``import floodway.y``)."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}       # local name -> the floodway module it is
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "floodway":
            for a in node.names:
                if _private(a.name) and node.module != own:
                    out.append((node.lineno, f"from {node.module} import {a.name}"))
                if _is_module(f"{node.module}.{a.name}"):
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "floodway":
                    continue
                if any(_private(part) for part in a.name.split(".")):
                    out.append((node.lineno, f"import {a.name}"))
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    bound["floodway"] = "floodway"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        base = _dotted(node.value)
        if base is None:
            continue
        head, _, rest = base.partition(".")
        module = bound.get(head)
        if module is None:
            continue
        module = f"{module}.{rest}" if rest else module
        if _is_module(module) and module != own:
            out.append((node.lineno, f"{module}.{node.attr}"))
    return [f"{what} (line {line})" for line, what in sorted(out)]


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_takes_another_modules_private_names(path: Path):
    """A name with a leading underscore belongs to its module: another module that needs it
    needs a public name (or the concept is cut in the wrong place)."""
    own = "floodway." + _rel(path).removesuffix(".py").replace("/", ".").removesuffix(
        ".__init__")
    assert private_uses(path.read_text(), own) == [], _rel(path)


def test_the_private_name_check_finds_each_form():
    found = private_uses(
        "from floodway.runtime.worker import _fatal, error_text\n"
        "import floodway.runtime.worker as w\n"
        "from floodway.sim import pool\n"
        "import floodway.runtime.container\n"
        "w._to_jsonable(1)\n"
        "pool._CHECK\n"
        "floodway.runtime.container._Pending\n"
        "w.error_text, pool.Pool, self._own, w.__name__\n", "floodway.other")
    assert found == ["from floodway.runtime.worker import _fatal (line 1)",
                     "floodway.runtime.worker._to_jsonable (line 5)",
                     "floodway.sim.pool._CHECK (line 6)",
                     "floodway.runtime.container._Pending (line 7)"]
    assert private_uses("from floodway.sim.pool import _CHECK\n", "floodway.sim.pool") == []


# Package -> what it never imports (ARCHITECTURE.md, "What never imports what"). The pure
# decisions know nothing of where they run; the HTTP layer knows backends only through the
# contracts in core/; the runtime and the job queue implement those contracts without the
# HTTP layer; the simulator drives the pure code without any runtime.
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
    "runtime": ("floodway.http", "floodway.sim", "modal", "starlette"),
    "jobs": ("floodway.runtime", "floodway.http", "floodway.deploy", "floodway.modal",
             "floodway.sim", "modal", "starlette", "torch"),
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
