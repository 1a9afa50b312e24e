"""The field checks every config dataclass uses: each appends a `Problem` instead of raising,
so that a definition reports all its mistakes at once (`floodway.config` says why)."""

from __future__ import annotations

import math
import re

from floodway.errors import Problem

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_num(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def check_int(out: list[Problem], name: str, value: object, lo: int, hi: int | None) -> None:
    """Append a Problem unless `value` is an int in [lo, hi] (hi None: no upper bound)."""
    ok = is_int(value) and value >= lo and (hi is None or value <= hi)
    if not ok:
        rng = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        out.append(Problem(name, value, rng))


def check_num(out: list[Problem], name: str, value: object, lo: float, hi: float,
              *, lo_open: bool = False) -> None:
    """Append a Problem unless `value` is a finite number in [lo, hi] ((lo, hi] if lo_open)."""
    ok = is_num(value) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        left = "(" if lo_open else "["
        out.append(Problem(name, value, f"a number in {left}{lo:g}, {hi:g}]"))


def check_bool(out: list[Problem], name: str, value: object) -> None:
    if not isinstance(value, bool):
        out.append(Problem(name, value, "True or False"))


def check_sha(out: list[Problem], name: str, value: object) -> None:
    if not isinstance(value, str) or not SHA_RE.match(value):
        out.append(Problem(name, value,
                           "a full 40-character lowercase hex commit sha (branches move)"))


class Config:
    """Mixin: `problems(prefix)` validates every field; subclasses define `_check`."""

    def problems(self, prefix: str) -> list[Problem]:
        out: list[Problem] = []
        self._check(out, prefix)  # type: ignore[attr-defined]
        return out


__all__ = ["REPO_RE", "SHA_RE", "Config", "check_bool", "check_int", "check_num", "check_sha",
           "is_int", "is_num"]
