"""README.md and docs/**/*.md as written: every fenced snippet is run or checked, or says why
not (tests/doc_snippets.py); Python snippets run as one file per page, in a temporary folder
with FLOODWAY_NO_MODAL=1; what a snippet prints is compared with the output shown; the
command synopsis matches the CLI; links between pages resolve. Snippets that need a running
server: tests/e2e/test_docs_serve.py."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import re

import pytest

import floodway as fw
from tests.doc_snippets import PAGES, ROOT, all_fences, check_marked, fences

IDS = [p.relative_to(ROOT).as_posix() for p in PAGES]


def test_every_fence_is_run_or_says_why_not():
    found = all_fences()
    assert len(found) > 20
    bad = [f"{f.where}: {why}" for f in found if (why := check_marked(f))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_page_snippets_run_as_written(page, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOODWAY_NO_MODAL", "1")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    printed: str | None = None          # what the last Python fence printed
    for f in fences(page):
        if f.lang == "python" and f.kind is None:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(f.code, f.where, "exec"), namespace)
            printed = out.getvalue()
            continue
        if f.lang == "python":
            compile(f.code, f.where, "exec")          # a snippet not run still parses
        elif f.lang == "json" and f.kind is None:
            json.loads(f.code)
        if f.kind == "output":
            assert printed is not None, f"{f.where}: <!-- output --> after no Python fence"
            assert printed.rstrip() == f.code.rstrip(), f"{f.where}: printed\n{printed}"
        printed = None


def _cli_options() -> dict[str, list[set[str]]]:
    """Each command's options, each as the set of its names (`--force`, `--no-force`)."""
    import typer.main

    from floodway import cli

    group = typer.main.get_command(cli.cli)
    return {name: [names for p in cmd.params
                   if (names := {o for o in (*p.opts, *getattr(p, "secondary_opts", ()))
                                 if o.startswith("--") and o != "--help"})]
            for name, cmd in group.commands.items()}


def test_the_command_synopsis_is_the_clis():
    (usage,) = [f for f in all_fences() if f.kind == "usage"]
    documented: dict[str, set[str]] = {}
    cmd = None
    for line in usage.code.splitlines():
        if m := re.match(r"floodway ([a-z-]+)", line):
            cmd = m[1]
            documented[cmd] = set()
        assert cmd, f"{usage.where}: a line before the first command: {line!r}"
        documented[cmd] |= set(re.findall(r"--[a-z][a-z0-9-]*", line))
    real = _cli_options()
    assert set(documented) == set(real)
    for name, options in real.items():
        unknown = documented[name] - set().union(*options)
        missing = [sorted(o) for o in options if not o & documented[name]]
        assert not unknown and not missing, (name, sorted(unknown), missing)


def test_the_readme_endpoint_is_modal_app():
    def code(tree: ast.Module) -> str:
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        return ast.dump(tree)

    first = next(f for f in fences(ROOT / "README.md") if f.lang == "python")
    assert code(ast.parse(first.code)) == code(ast.parse((ROOT / "modal_app.py").read_text()))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_resolve():
    bad = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md":
                heads = {_slug(h.replace("`", "")) for h in
                         re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in heads:
                    bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


CONFIGS = (fw.Build, fw.Route, fw.Lane, fw.WarmPool, fw.Window, fw.Batching, fw.Generation,
           fw.Cache, fw.Recycle, fw.ImageSpec)


def test_every_config_field_is_on_the_endpoints_page():
    import inspect

    text = (ROOT / "docs" / "endpoints.md").read_text()
    fields = {f.name for c in CONFIGS for f in dataclasses.fields(c)}
    keywords = set(inspect.signature(fw.App.endpoint).parameters) - {"self", "unknown"}
    missing = sorted(n for n in fields | keywords if f"`{n}`" not in text and
                     not re.search(rf"[`(, .]{n}[=,)`]", text))
    assert not missing, missing


def test_every_environment_variable_is_on_the_operations_page():
    text = (ROOT / "docs" / "operations.md").read_text()
    found = set()
    for path in (ROOT / "floodway").rglob("*.py"):
        found |= set(re.findall(r"[\"'](FLOODWAY_[A-Z0-9_]+)[\"']", path.read_text()))
    missing = sorted(v for v in found if v not in text)
    assert found and not missing, missing
