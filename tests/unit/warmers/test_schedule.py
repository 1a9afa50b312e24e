"""Scheduled windows: lead time with the measured cold start, timezones across DST, window
end, transitions and the cron expressions for update_autoscaler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter

from floodway.config import Window
from floodway.warmers.schedule import (
    CronShiftError,
    Transition,
    autoscaler_crons,
    lead_total_s,
    occurrences,
    shift_cron,
    window_status,
    window_transitions,
)
from floodway.warmers.target import Measured


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


COLD = Measured(cold_start_s=45)


def test_warm_before_open_including_cold_start() -> None:
    w = Window(cron="0 9 * * *", duration_s=1800, min_containers=3, lead_s=60)
    start = utc(2024, 5, 6, 9, 0)
    assert lead_total_s(w, COLD) == 105
    assert not window_status(w, start - 106, COLD).warm
    st = window_status(w, start - 105, COLD)
    assert st.warm and not st.open and st.min_containers == 3 and st.start_s == start
    assert "opens in 105 s" in st.reason and "cold start 45 s" in st.reason
    slow = Measured(cold_start_s=300)
    assert window_status(w, start - 350, slow).warm  # a slower start warms earlier


def test_open_and_end() -> None:
    w = Window(cron="0 9 * * *", duration_s=1800, min_containers=3, lead_s=60)
    start = utc(2024, 5, 6, 9, 0)
    st = window_status(w, start, COLD)
    assert st.warm and st.open and st.end_s == start + 1800
    assert window_status(w, start + 1799, COLD).open
    closed = window_status(w, start + 1800, COLD)
    assert not closed.warm and closed.min_containers == 0
    assert closed.start_s == utc(2024, 5, 7, 9, 0) and "closed" in closed.reason


def test_weekday_cron() -> None:
    w = Window(cron="55 8 * * 1-5", duration_s=3600, min_containers=4, lead_s=0)
    sat = utc(2024, 5, 11, 9, 0)  # a Saturday
    assert not window_status(w, sat, Measured(cold_start_s=0)).warm
    mon = utc(2024, 5, 13, 9, 0)
    assert window_status(w, mon, Measured(cold_start_s=0)).open


def test_timezone_across_dst_change() -> None:
    # 09:00 in New York is 14:00 UTC before 2024-03-10 (EST) and 13:00 UTC after (EDT).
    w = Window(cron="0 9 * * *", duration_s=3600, min_containers=2,
               timezone="America/New_York", lead_s=0)
    m = Measured(cold_start_s=0)
    assert window_status(w, utc(2024, 3, 8, 14, 30), m).open
    assert not window_status(w, utc(2024, 3, 8, 13, 30), m).warm
    assert window_status(w, utc(2024, 3, 11, 13, 30), m).open
    assert not window_status(w, utc(2024, 3, 11, 14, 30), m).warm
    starts = [s for s, _ in occurrences(w, utc(2024, 3, 8), utc(2024, 3, 12))]
    assert starts == [utc(2024, 3, 8, 14), utc(2024, 3, 9, 14), utc(2024, 3, 10, 13),
                      utc(2024, 3, 11, 13)]


def test_transitions_with_lead_and_merge() -> None:
    w = Window(cron="0 9 * * *", duration_s=1800, min_containers=3, lead_s=60)
    ts = window_transitions(w, COLD, utc(2024, 5, 6), utc(2024, 5, 8))
    assert ts == [Transition(utc(2024, 5, 6, 9) - 105, 3), Transition(utc(2024, 5, 6, 9, 30), 0),
                  Transition(utc(2024, 5, 7, 9) - 105, 3), Transition(utc(2024, 5, 7, 9, 30), 0)]
    # Already warm at `after_s`: only the end. Touching occurrences: no drop to 0 between.
    assert window_transitions(w, COLD, utc(2024, 5, 6, 9, 10), utc(2024, 5, 6, 12)) == [
        Transition(utc(2024, 5, 6, 9, 30), 0)]
    hourly = Window(cron="0 * * * *", duration_s=3600, min_containers=1, lead_s=0)
    got = window_transitions(hourly, Measured(cold_start_s=0), utc(2024, 5, 6, 0, 30),
                             utc(2024, 5, 6, 5))
    assert got == []  # continuously warm over the range
    t_s, n = window_transitions(w, COLD, utc(2024, 5, 6), utc(2024, 5, 6, 12))[0]
    assert n == 3 and t_s < utc(2024, 5, 6, 9)


def test_shift_cron_simple_and_across_midnight() -> None:
    assert shift_cron("55 8 * * 1-5", -2) == ["53 8 * * 1-5"]
    assert shift_cron("0 0 * * 1", -1) == ["59 23 * * 0"]
    assert shift_cron("0 0 * * *", -1) == ["59 23 * * *"]
    assert sorted(shift_cron("0 0,12 * * 1", -1)) == ["59 11 * * 1", "59 23 * * 0"]
    assert shift_cron("0 9 1 * *", 30) == ["30 9 1 * *"]  # same day: dom kept
    with pytest.raises(CronShiftError):
        shift_cron("0 0 1 * *", -1)
    with pytest.raises(CronShiftError):
        shift_cron("0 0 * * 1#2", -1)


@pytest.mark.parametrize("expr,offset", [("*/15 9-17 * * 1-5", -3), ("0 22 * * 5", 180),
                                         ("30 23 * * 0,6", 45), ("0 9 * * *", -1500)])
def test_shift_cron_matches_shifted_times(expr: str, offset: int) -> None:
    """Every match of the original, moved by `offset`, is a match of the shifted set, over
    two weeks (UTC: no DST)."""
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    orig = croniter(expr, t0)
    want = set()
    for _ in range(400):
        d = orig.get_next(datetime)
        if d > t0 + timedelta(days=14):
            break
        want.add(d + timedelta(minutes=offset))
    got = set()
    for e in shift_cron(expr, offset):
        it = croniter(e, t0 + timedelta(minutes=min(offset, 0)))
        while (d := it.get_next(datetime)) <= t0 + timedelta(days=14, minutes=offset):
            got.add(d)
    lo, hi = t0 + timedelta(minutes=max(offset, 0)), t0 + timedelta(days=14, minutes=offset)
    expected = {d for d in want if lo < d <= hi}
    assert expected and expected == {d for d in got if lo < d <= hi}


def test_autoscaler_crons() -> None:
    w = Window(cron="55 8 * * 1-5", duration_s=3600, min_containers=4,
               timezone="Europe/Paris", lead_s=60)
    calls = autoscaler_crons(w, COLD)  # lead 105 s -> 2 minutes earlier, rounded down
    assert [(c.cron, c.edge, c.min_containers, c.timezone) for c in calls] == [
        ("53 8 * * 1-5", "start", 4, "Europe/Paris"), ("55 9 * * 1-5", "end", 0, "Europe/Paris")]
    late = Window(cron="0 23 * * 5", duration_s=7200, min_containers=1)
    assert [c.cron for c in autoscaler_crons(late, Measured(cold_start_s=0))] == [
        "59 22 * * 5", "0 1 * * 6"]
