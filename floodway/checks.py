"""The field checks every config dataclass uses: each appends a `Problem` instead of raising,
so that a definition reports all its mistakes at once (`floodway.config` says why). A
keyword a config does not take (a typo: ``fw.WarmPool(min_container=1)``) is such a problem
too: the object is made without it, and its check names the closest valid keyword."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Iterable

from floodway.errors import ConfigError, Problem, UnknownKeyword

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


def unknown_keyword(field: str, value: object, owner: str, valid: Iterable[str],
                    elsewhere: dict[str, str] | None = None) -> UnknownKeyword:
    """The problem of keyword `field`'s last part, which `owner` does not take: the valid
    name closest to it (difflib), else one of `elsewhere` (name -> where it belongs, e.g.
    ``"min_containers"`` -> ``"warm=fw.WarmPool(min_containers=...)"``), and every valid
    name."""
    name = field.rpartition(".")[2]
    valid = list(valid)
    close = difflib.get_close_matches(name, valid, n=1)
    if close:
        hint = f"did you mean {close[0]!r}? "
    else:
        near = difflib.get_close_matches(name, list(elsewhere or {}), n=1)
        hint = f"did you mean {elsewhere[near[0]]}? " if near else ""
    return UnknownKeyword(field, value, f"{hint}valid: {', '.join(valid)}", owner)


class _Keywords(type):
    """Makes a config without the keywords it does not take, kept for its check to name
    (`unknown_keyword`); a config that cannot be made without them raises ConfigError."""

    def __call__(cls, *args, **kwargs):
        names = _init_names(cls)
        unknown = {k: kwargs.pop(k) for k in [k for k in kwargs if k not in names]}
        if not unknown:
            return super().__call__(*args, **kwargs)
        try:
            obj = super().__call__(*args, **kwargs)
        except TypeError as e:   # e.g. the typo stood for a field without a default
            problems = [unknown_keyword(k, v, f"fw.{cls.__name__}", names)
                        for k, v in unknown.items()]
            last = problems[-1]
            problems[-1] = dataclasses.replace(last, allowed=f"{last.allowed}; without it: {e}")
            raise ConfigError(None, problems) from None
        object.__setattr__(obj, "_unknown_keywords", unknown)
        return obj


@functools.cache
def _init_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


class Config(metaclass=_Keywords):
    """Mixin: `problems(prefix)` validates every field; subclasses define `_check` (which
    also names each keyword the object was given that it does not take)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        check = cls.__dict__.get("_check")
        if check is None:
            return

        @functools.wraps(check)
        def _check(self, out: list[Problem], p: str) -> None:
            if type(self)._check is _check:   # a subclass's own check reports them
                for k, v in getattr(self, "_unknown_keywords", {}).items():
                    out.append(unknown_keyword(f"{p}.{k}", v, f"fw.{type(self).__name__}",
                                               _init_names(type(self))))
            check(self, out, p)

        cls._check = _check

    def problems(self, prefix: str) -> list[Problem]:
        out: list[Problem] = []
        self._check(out, prefix)  # type: ignore[attr-defined]
        return out


__all__ = ["REPO_RE", "SHA_RE", "Config", "check_bool", "check_int", "check_num", "check_sha",
           "is_int", "is_num", "unknown_keyword"]
