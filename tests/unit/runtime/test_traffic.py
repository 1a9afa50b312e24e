"""One endpoint's traffic record: per-minute arrivals in memory or in the shared store."""

from __future__ import annotations

import pytest

from floodway.runtime.traffic import Traffic
from floodway.warmers.history import TrafficHistory

T = 1_700_000_040.0     # an epoch-minute boundary (28_333_334 * 60)


@pytest.fixture(params=["memory", "store"])
def traffic(request):
    if request.param == "memory":
        yield Traffic("embed", minutes=5)
        return
    with TrafficHistory(":memory:") as store:
        yield Traffic("embed", store, minutes=5)


def test_counts_arrivals_per_minute_up_to_the_current_one(traffic):
    for t in (T + 1, T + 2, T + 61, T + 250):
        traffic.record(t)
    h = traffic.history(T + 250)
    assert h.start_minute == int(T // 60) and list(h.counts) == [2, 1, 0, 0, 1]
    assert h.last_arrival_exact_s == T + 250


def test_minutes_older_than_the_window_are_left_out(traffic):
    traffic.record(T)
    traffic.record(T + 600)
    h = traffic.history(T + 600)
    assert list(h.counts) == [0, 0, 0, 0, 1]


def test_no_arrival_yet():
    h = Traffic("embed", minutes=3).history(T)
    assert list(h.counts) == [0, 0, 0] and h.last_arrival_exact_s is None
