"""Scheduled warm windows: a `Window` raises the warm floor around each match of its cron.

A window occurrence starts at a match of ``window.cron`` evaluated in ``window.timezone`` and
lasts ``window.duration_s``. Containers must be *ready* ``window.lead_s`` seconds before it
opens, so warming starts ``lead_s + measured.cold_start_s`` before the start (`lead_total_s`):
the measured cold start, not a guess, decides how early to ask.

    window_status(window, now_s, measured)        -> WindowStatus: warm now? why?
    occurrences(window, after_s, until_s)         -> [(start_s, end_s)] overlapping a range
    window_transitions(window, measured, a, b)    -> [Transition(at_s, min_containers)]
    autoscaler_crons(window, measured)            -> [CronCall]: when to call update_autoscaler

Cron matching is croniter's (https://github.com/kiorky/croniter, ``croniter(expr,
aware_datetime).get_next/get_prev``) on timezone-aware datetimes from `zoneinfo`, so daylight
saving time behaves as croniter does: a local time skipped by a spring-forward change fires at
the first valid time after the gap (02:30 -> 03:00), and a local time repeated by a fall-back
change fires at both instants. "09:00 America/New_York" is 14:00 UTC in winter and 13:00 UTC
in summer. All times here are unix seconds.

Occurrences of one window all last the same time, so the latest start at or before a time is
also the one whose end comes last: whether a window holds its floor at `now_s` needs one
`get_prev`, however often the cron fires.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple
from zoneinfo import ZoneInfo

from croniter import croniter

from floodway.errors import FloodwayError

if TYPE_CHECKING:
    from floodway.config import Window
    from floodway.warmers.target import Measured

# get_prev is exclusive of an exact match; a millisecond later makes it inclusive.
_INCLUSIVE_S = 1e-3


class CronShiftError(FloodwayError, ValueError):
    """A cron expression cannot be shifted by the requested offset into 5-field crontab
    expressions (a day shift combined with a day-of-month, month or nth-weekday field)."""


@dataclass(frozen=True)
class WindowStatus:
    """One window at one time.

    `warm`: the window holds its floor now (open, or within its lead). `open`: within
    [start, end). `start_s` / `end_s`: the occurrence in question (the current or upcoming
    one; the next one when closed). `min_containers`: the window's floor if warm, else 0.
    """

    warm: bool
    open: bool
    start_s: float
    end_s: float
    min_containers: int
    reason: str


class Transition(NamedTuple):
    """At `at_s` (unix seconds) the window's floor becomes `min_containers`."""

    at_s: float
    min_containers: int


@dataclass(frozen=True)
class CronCall:
    """Call ``update_autoscaler`` at each match of `cron` in `timezone`.

    `edge` is ``"start"`` (warming begins: the window's floor `min_containers` applies) or
    ``"end"`` (the occurrence ends: its floor no longer applies). The call should recompute
    the whole target with `floodway.warmers.target.desired` rather than apply the number
    blindly: occurrences may overlap and other sources add to the floor.
    """

    cron: str
    timezone: str
    edge: str
    min_containers: int


def lead_total_s(window: Window, measured: Measured) -> float:
    """Seconds before a window opens at which warming starts: lead + measured cold start."""
    return float(window.lead_s) + float(measured.cold_start_s)


def _dt(t_s: float, tz: str) -> datetime:
    return datetime.fromtimestamp(t_s, tz=UTC).astimezone(ZoneInfo(tz))


def _prev_start(window: Window, at_or_before_s: float) -> float:
    it = croniter(window.cron, _dt(at_or_before_s + _INCLUSIVE_S, window.timezone))
    return it.get_prev(datetime).timestamp()


def _next_start(window: Window, after_s: float) -> float:
    it = croniter(window.cron, _dt(after_s, window.timezone))
    return it.get_next(datetime).timestamp()


def window_status(window: Window, now_s: float, measured: Measured) -> WindowStatus:
    """Whether `window` holds its floor at `now_s`: an occurrence is open, or opens within
    `lead_total_s`. `window` is assumed valid (the decorator validates cron and timezone)."""
    lead = lead_total_s(window, measured)
    start = _prev_start(window, now_s + lead)
    end = start + window.duration_s
    label = f"window {window.cron!r} ({window.timezone})"
    if end > now_s:
        if start > now_s:
            why = (f"{label} opens in {start - now_s:.0f} s (lead {window.lead_s:g} s + "
                   f"cold start {measured.cold_start_s:.0f} s)")
            return WindowStatus(True, False, start, end, window.min_containers, why)
        return WindowStatus(True, True, start, end, window.min_containers,
                            f"{label} open, closes in {end - now_s:.0f} s")
    nxt = _next_start(window, now_s + lead)
    return WindowStatus(False, False, nxt, nxt + window.duration_s, 0,
                        f"{label} closed, next opens in {nxt - now_s:.0f} s")


def occurrences(window: Window, after_s: float, until_s: float) -> list[tuple[float, float]]:
    """(start_s, end_s) of every occurrence that overlaps (after_s, until_s], in order.
    O(number of occurrences): keep the range proportionate to the cron's frequency."""
    out: list[tuple[float, float]] = []
    it = croniter(window.cron, _dt(after_s - window.duration_s, window.timezone))
    while True:
        start = it.get_next(datetime).timestamp()
        if start > until_s:
            return out
        if start + window.duration_s > after_s:
            out.append((start, start + window.duration_s))


def window_transitions(window: Window, measured: Measured, after_s: float,
                       until_s: float) -> list[Transition]:
    """Times in (after_s, until_s] at which the window's floor changes, in order: to
    `window.min_containers` at start - `lead_total_s`, to 0 at the end. Occurrences whose
    warm intervals overlap or touch are merged (no drop to 0 between them). A window already
    warm at `after_s` contributes only its end."""
    lead = lead_total_s(window, measured)
    merged: list[list[float]] = []
    for start, end in occurrences(window, after_s, until_s + lead):
        if merged and start - lead <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start - lead, end])
    out: list[Transition] = []
    for a, b in merged:
        if after_s < a <= until_s:
            out.append(Transition(a, window.min_containers))
        if after_s < b <= until_s:
            out.append(Transition(b, 0))
    return out


def shift_cron(expr: str, offset_min: int) -> list[str]:
    """Crontab expressions matching the local wall-clock times of `expr` moved by
    `offset_min` minutes (negative: earlier). Usually one; several when the shift moves some
    times of day across midnight and others not (``0 0,12 * * 1`` - 1 min gives
    ``59 23 * * 0`` and ``59 11 * * 1``).

    A shift across days moves the day-of-week field; it raises `CronShiftError` when the
    day-of-month or month field is restricted or an nth-weekday (``#``) / last (``L``) form
    is used, which no 5-field expression can shift exactly. The shift is in local time: a
    shifted time that a DST change skips follows croniter's rule above.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise CronShiftError(f"{expr!r} is not a 5-field crontab expression")
    (mins, hours, _doms, _months, dows), nth = croniter.expand(expr)
    mins = list(range(60)) if mins == ["*"] else [int(m) for m in mins]
    hours = list(range(24)) if hours == ["*"] else [int(h) for h in hours]

    # day shift -> {hour -> set of minutes}
    by_day: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for h in hours:
        for m in mins:
            day, rest = divmod(h * 60 + m + offset_min, 1440)
            by_day[day][rest // 60].add(rest % 60)

    out: list[str] = []
    for day in sorted(by_day):
        if day == 0:
            tail = fields[2:]
        else:
            if fields[2] != "*" or fields[3] != "*" or nth or "l" in str(dows).lower() \
                    or "#" in fields[4] or "L" in fields[4].upper():
                raise CronShiftError(
                    f"cannot shift {expr!r} by {offset_min} min: the shift crosses days and the "
                    f"expression restricts day-of-month, month or uses nth/last weekday forms; "
                    f"use window_transitions with a polling warmer instead")
            dow = "*" if fields[4] == "*" else ",".join(
                str(d) for d in sorted({(int(d) + day) % 7 for d in dows}))
            tail = ["*", "*", dow]
        # hours that share the same minute set become one expression
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for h, ms in sorted(by_day[day].items()):
            groups[tuple(sorted(ms))].append(h)
        for minutes, hs in groups.items():
            out.append(" ".join([_cron_list(minutes, 60), _cron_list(tuple(hs), 24), *tail]))
    return out


def _cron_list(values: tuple[int, ...], full: int) -> str:
    return "*" if len(values) == full else ",".join(str(v) for v in values)


def autoscaler_crons(window: Window, measured: Measured) -> list[CronCall]:
    """When to call ``update_autoscaler`` for `window` (e.g. as Modal crons with
    ``modal.Cron(call.cron, timezone=call.timezone)``): at each start minus `lead_total_s`
    rounded down to the minute (edge ``"start"``), and at each end rounded up to the minute
    (edge ``"end"``). Raises `CronShiftError` when a shift is not expressible (see
    `shift_cron`)."""
    lead_min = math.ceil(lead_total_s(window, measured) / 60.0 - 1e-9)
    dur_min = math.ceil(window.duration_s / 60.0 - 1e-9)
    starts = [CronCall(c, window.timezone, "start", window.min_containers)
              for c in shift_cron(window.cron, -lead_min)]
    ends = [CronCall(c, window.timezone, "end", 0) for c in shift_cron(window.cron, dur_min)]
    return starts + ends


__all__ = [
    "CronCall", "CronShiftError", "Transition", "WindowStatus", "autoscaler_crons",
    "lead_total_s", "occurrences", "shift_cron", "window_status", "window_transitions",
]
