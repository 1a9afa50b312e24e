"""Traces for the simulator: per-request arrival times (a timestamp column, optional
``ContextTokens`` / ``GeneratedTokens``), or per-minute counts (the Azure Functions 2019
layout) expanded into arrivals: ``uniform`` spaces a minute's n arrivals at
(i + 0.5) * 60 / n s, ``poisson`` draws them uniformly at random within the minute.

    Trace.from_counts(counts, start_minute, spread="uniform"|"poisson", seed)
    read_trace(path, function=None, column=None, spread, seed) -> Trace

The CSV shapes: docs/design/simulator.md ("Traces").
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from floodway.errors import FloodwayError

MINUTE_S = 60.0
SPREADS = ("uniform", "poisson")
# Sanity bounds on input: a year of minutes (the simulator ticks through every one), epoch
# seconds within about 300 years, and per-minute counts a machine can hold as arrivals.
MAX_SPAN_MIN = 366 * 24 * 60
MAX_EPOCH_S = 1e10
MAX_COUNT = 10_000_000
# Per-request token columns of an LLM trace (Azure LLM inference trace 2023).
TOKEN_COLUMNS = ("ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, eq=False)
class Trace:
    """Arrivals of one endpoint.

    `times_s`: arrival instants in unix seconds, ascending, float64, shape (n,). `rows`: input
    rows per request, int64 shape (n,), or None for one row each. The simulated span is
    [`start_s`, `end_s`) (whole minutes around the arrivals). `counts`: arrivals per minute
    from `start_minute` (epoch minute), covering the span. `prompt_tokens` and
    `generated_tokens`: per request, int64 shape (n,), for generation (an LLM trace's
    ``ContextTokens`` and ``GeneratedTokens``), else None.
    """

    times_s: np.ndarray
    rows: np.ndarray | None
    start_minute: int
    counts: np.ndarray
    name: str = "trace"
    prompt_tokens: np.ndarray | None = None
    generated_tokens: np.ndarray | None = None

    @property
    def start_s(self) -> float:
        return self.start_minute * MINUTE_S

    @property
    def end_s(self) -> float:
        return (self.start_minute + len(self.counts)) * MINUTE_S

    @property
    def requests(self) -> int:
        return int(self.times_s.size)

    @classmethod
    def from_times(cls, times_s: np.ndarray | list[float], rows: np.ndarray | None = None,
                   name: str = "trace", minutes: int | None = None, *,
                   prompt_tokens: np.ndarray | None = None,
                   generated_tokens: np.ndarray | None = None) -> Trace:
        """A trace of the given arrival instants (sorted here, with their per-request columns),
        spanning whole minutes from the first arrival's minute through the last one's (or
        `minutes` minutes)."""
        t = np.asarray(times_s, dtype=np.float64).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(t) | (np.abs(t) > MAX_EPOCH_S))
        if bad.size:
            raise FloodwayError(f"arrival {int(bad[0]) + 1} is {float(t[bad[0]])}: give seconds "
                                f"within +-{MAX_EPOCH_S:.0e} (about 300 years of epoch time)")
        order = np.argsort(t, kind="stable")
        t = t[order]
        r, pt, gt = (None if x is None else np.asarray(x, dtype=np.int64).reshape(-1)[order]
                     for x in (rows, prompt_tokens, generated_tokens))
        if t.size == 0:
            raise FloodwayError("the trace has no arrivals")
        m0 = math.floor(t[0] / MINUTE_S)
        span = math.floor(t[-1] / MINUTE_S) - m0 + 1
        span = max(span, minutes or 0)
        if span > MAX_SPAN_MIN:
            raise FloodwayError(f"the trace spans {span:,} minutes (arrivals from {t[0]:.0f} s "
                                f"to {t[-1]:.0f} s); at most {MAX_SPAN_MIN:,} (366 days): are "
                                "its timestamps all in one unit?")
        counts = np.bincount((np.floor(t / MINUTE_S) - m0).astype(np.int64), minlength=span)
        return cls(t, r, m0, counts[:span], name, pt, gt)

    @classmethod
    def from_counts(cls, counts: np.ndarray | list[int], start_minute: int = 0,
                    spread: str = "uniform", seed: int = 0, name: str = "trace") -> Trace:
        """Expand per-minute counts (minute i = epoch minute `start_minute` + i) into arrivals
        (see the module docstring for `spread`)."""
        c = np.asarray(counts, dtype=np.int64).reshape(-1)
        if c.size > MAX_SPAN_MIN:
            raise FloodwayError(f"{c.size:,} minutes of counts; at most {MAX_SPAN_MIN:,} "
                                "(366 days)")
        if spread not in SPREADS:
            raise FloodwayError(f"spread must be one of {SPREADS}, got {spread!r}")
        if c.size and int(c.min()) < 0:
            raise FloodwayError("per-minute counts must be >= 0")
        minute = np.repeat(np.arange(c.size, dtype=np.int64), c)
        base = (start_minute + minute) * MINUTE_S
        if spread == "uniform":
            first = np.repeat(np.cumsum(c) - c, c)
            j = np.arange(minute.size) - first
            t = base + (j + 0.5) * MINUTE_S / np.repeat(c, c)
        else:
            t = np.sort(base + np.random.default_rng(seed).random(minute.size) * MINUTE_S)
        return cls(t.astype(np.float64), None, int(start_minute), c.copy(), name)


def _number(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _parse_times(values: list[str]) -> np.ndarray:
    """Epoch seconds, or ISO-8601 date-times (read as UTC), all of one kind; row numbers in
    errors count data rows from 1."""
    blank = next((i for i, v in enumerate(values) if not v.strip()), None)
    if blank is not None:
        raise FloodwayError(f"timestamp in data row {blank + 1} is blank")
    nums = [_number(v) for v in values]
    if all(x is not None for x in nums):
        return np.asarray(nums, dtype=np.float64)
    first_num = next((i for i, x in enumerate(nums) if x is not None), None)
    if first_num is not None:
        first_date = next(i for i, x in enumerate(nums) if x is None)
        raise FloodwayError(f"timestamps mix numbers (data row {first_num + 1}: "
                            f"{values[first_num]!r}) and dates (data row {first_date + 1}: "
                            f"{values[first_date]!r}); give one kind")
    try:
        ns = np.asarray([v.strip().replace(" ", "T") for v in values], dtype="datetime64[ns]")
    except ValueError as e:
        raise FloodwayError(f"cannot parse timestamps such as {values[0]!r}: {e}") from None
    nat = np.flatnonzero(np.isnat(ns))
    if nat.size:
        raise FloodwayError(f"timestamp in data row {int(nat[0]) + 1} ({values[nat[0]]!r}) is "
                            "not a date-time")
    return ns.astype(np.int64) / 1e9


def read_trace(path: str | Path, function: str | None = None, column: str | None = None,
               spread: str = "uniform", seed: int = 0) -> Trace:
    """Read a per-request or per-minute CSV (see the module docstring).

    `function` picks a per-minute row by ``HashFunction`` (or a prefix of it) or by 0-based
    index (default: row 0); `column` names a per-request timestamp column (default
    ``TIMESTAMP``). Raises FloodwayError naming what was not found.
    """
    p = Path(path)
    if not p.is_file():
        raise FloodwayError(f"trace {p} does not exist")
    try:
        return _read(p, function, column, spread, seed)
    except UnicodeDecodeError as e:
        raise FloodwayError(f"trace {p} is not UTF-8 text (byte {e.start}): give a CSV "
                            "file") from None


def _read(p: Path, function: str | None, column: str | None, spread: str, seed: int) -> Trace:
    with p.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise FloodwayError(f"trace {p} is empty")
        minute_cols = [i for i, h in enumerate(header) if h.startswith("minute_")]
        if minute_cols:
            if column is not None:
                raise FloodwayError(f"trace {p} holds per-minute counts (minute_1..N): a "
                                    f"timestamp column ({column!r}) applies to per-request "
                                    "traces only; pick a row with --function")
            return _read_counts(p, reader, header, minute_cols, function, spread, seed)
        if function is not None:
            raise FloodwayError(f"trace {p} is per-request (no minute_N columns): --function "
                                f"({function!r}) applies to per-minute counts only")
        col = column or "TIMESTAMP"
        if col not in header:
            raise FloodwayError(f"trace {p} has no column {col!r} (it has: "
                                f"{', '.join(header)}); name the timestamp column with --column,"
                                " or give per-minute counts as minute_1..N columns")
        i = header.index(col)
        # An LLM trace's token columns, read along when both are there.
        tok = [header.index(c) for c in TOKEN_COLUMNS] if set(TOKEN_COLUMNS) <= set(header) \
            else []
        values, tokens = [], []
        for row in reader:
            if not row:
                continue
            if len(row) <= max([i, *tok]):
                raise FloodwayError(f"trace {p}, line {reader.line_num}: {len(row)} fields, "
                                    f"no {col!r} (field {i + 1})" if len(row) <= i else
                                    f"trace {p}, line {reader.line_num}: {len(row)} fields, "
                                    f"the header has {len(header)}")
            values.append(row[i])
            if tok:
                tokens.append([_tokens(p, reader.line_num, header[j], row[j]) for j in tok])
    if not values:
        raise FloodwayError(f"trace {p} has no requests")
    cols = np.asarray(tokens, dtype=np.int64).reshape(-1, 2) if tok else None
    return Trace.from_times(_parse_times(values), name=p.stem,
                            prompt_tokens=None if cols is None else cols[:, 0],
                            generated_tokens=None if cols is None else cols[:, 1])


def _tokens(p: Path, line: int, column: str, text: str) -> int:
    """One token count: a whole number in 0..MAX_COUNT."""
    x = _number(text)
    if x is None or not math.isfinite(x) or x != int(x) or not 0 <= x <= MAX_COUNT:
        raise FloodwayError(f"trace {p}, line {line}, {column}: {text!r} is not a token count "
                            f"(a whole number 0..{MAX_COUNT:,})")
    return int(x)


def _read_counts(p: Path, reader, header: list[str], cols: list[int], function: str | None,
                 spread: str, seed: int) -> Trace:
    key = header.index("HashFunction") if "HashFunction" in header else None
    rows = [row for row in reader if row]
    if not rows:
        raise FloodwayError(f"trace {p} has no functions")
    pick = None
    if function is None:
        pick = 0
    elif function.isdigit() and int(function) < len(rows):
        pick = int(function)
    elif key is not None:
        hits = [i for i, r in enumerate(rows) if r[key].startswith(function)]
        pick = hits[0] if len(hits) == 1 else None
    if pick is None:
        raise FloodwayError(f"trace {p}: no single function matches {function!r} (give a "
                            f"HashFunction, a unique prefix, or a row index 0..{len(rows) - 1})")
    row = rows[pick]
    if len(row) < len(header):
        raise FloodwayError(f"trace {p}: function row {pick} has {len(row)} fields, the "
                            f"header {len(header)}")
    counts = np.asarray([_count(p, header[i], row[i]) for i in cols], dtype=np.int64)
    name = row[key][:12] if key is not None else f"row {pick}"
    return Trace.from_counts(counts, 0, spread, seed, name)


def _count(p: Path, column: str, text: str) -> int:
    """One per-minute count: a whole number in 0..MAX_COUNT."""
    x = _number(text)
    if x is None or not math.isfinite(x) or x != int(x) or not 0 <= x <= MAX_COUNT:
        raise FloodwayError(f"trace {p}, {column}: {text!r} is not a count (a whole number "
                            f"0..{MAX_COUNT:,})")
    return int(x)


def read_counts_matrix(path: str | Path) -> tuple[list[str], np.ndarray]:
    """All rows of a per-minute CSV: (HashFunction per row, counts of shape (rows, minutes))."""
    with Path(path).open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        cols = [i for i, h in enumerate(header) if h.startswith("minute_")]
        key = header.index("HashFunction")
        names, counts = [], []
        for row in reader:
            if row:
                names.append(row[key])
                counts.append([int(float(row[i])) for i in cols])
    return names, np.asarray(counts, dtype=np.int64)


__all__ = ["SPREADS", "TOKEN_COLUMNS", "Trace", "read_counts_matrix", "read_trace"]
