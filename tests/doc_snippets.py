"""The fenced code blocks of README.md and docs/**/*.md, and how each one is checked.

A fence is checked by its language unless an HTML comment on the line before it says
otherwise:

    ```python                      run, in order with the page's other Python fences, as one
                                   file (tests/unit/test_docs_snippets.py)
    ```json                        parsed
    <!-- output -->                what the Python fence before it prints, exactly
    <!-- usage -->                 a `floodway` synopsis: its commands and options are the CLI's
    <!-- serve: APP -->            run against `floodway serve APP` (tests/e2e/test_docs_serve.py),
                                   a shell fence with bash, a Python one in a fresh namespace;
                                   the snippet's port 8000 is the only thing changed
    <!-- not run: REASON -->       not run (a Python fence is still compiled), for the reason given

Any other fence without a marker fails `check_marked`, so no snippet goes unchecked silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KINDS = ("output", "usage", "serve", "not run")
RUN_BY_LANGUAGE = ("python", "json")
PORT = "127.0.0.1:8000"

_OPEN = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[a-z ]+?)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")


@dataclass(frozen=True)
class Fence:
    page: Path
    line: int            # 1-based line of the opening ```
    lang: str
    code: str            # dedented by the fence's own indentation
    kind: str | None     # the marker's kind, None without one
    arg: str             # what follows the marker's colon

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def fences(page: Path) -> list[Fence]:
    """Every fenced block of `page`, with the marker on the non-blank line before it."""
    lines = page.read_text().splitlines()
    out: list[Fence] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m["indent"]), i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page.name}:{start + 1}: a fence that never closes")
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mk = _MARKER.match(lines[j]) if j >= 0 else None
        out.append(Fence(page, start + 1, m["lang"], "\n".join(body) + "\n",
                         mk["kind"] if mk else None, (mk["arg"] or "") if mk else ""))
        i += 1
    return out


def all_fences() -> list[Fence]:
    return [f for page in PAGES for f in fences(page)]


def check_marked(f: Fence) -> str | None:
    """What is wrong with how `f` is to be checked (None: nothing)."""
    if f.kind is None:
        return None if f.lang in RUN_BY_LANGUAGE else (
            f"a ```{f.lang} fence with no marker: mark it <!-- serve: APP -->, <!-- usage -->, "
            "<!-- output --> or <!-- not run: REASON -->")
    if f.kind not in KINDS:
        return f"unknown marker {f.kind!r} (known: {', '.join(KINDS)})"
    if f.kind == "not run" and not f.arg:
        return "<!-- not run --> needs its reason"
    if f.kind == "serve":
        if not (ROOT / f.arg).is_file():
            return f"<!-- serve: {f.arg} -->: no such app file"
        if f.lang not in ("sh", "bash", "python"):
            return f"<!-- serve --> runs sh, bash or python fences, not {f.lang!r}"
        if PORT not in f.code:
            return f"<!-- serve --> snippet never names {PORT}"
    return None


def serve_fences() -> list[Fence]:
    return [f for f in all_fences() if f.kind == "serve"]


__all__ = ["PAGES", "PORT", "ROOT", "Fence", "all_fences", "check_marked", "fences",
           "serve_fences"]
