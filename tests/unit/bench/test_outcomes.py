"""bench's outcomes: classification by status and deadline, counts that add up, nearest-rank
percentiles, and goodput over the overloaded seconds or the whole run."""

import math

import pytest

from floodway.bench.outcomes import (
    OUTCOMES,
    arrivals_per_second,
    counts,
    goodput,
    outcome,
    percentile,
)


@pytest.mark.parametrize(("status", "latency", "want"), [
    (200, 0.5, "ok"), (200, 1.0, "ok"), (200, 1.0001, "late"), (202, 0.01, "async"),
    (429, 0.01, "429"), (503, 0.01, "503"), (504, 1.2, "504"), (500, 0.1, "other"),
    (422, 0.1, "other"), (0, math.nan, "other")])
def test_outcome_by_status_and_deadline(status, latency, want):
    assert outcome(status, latency, deadline_s=1.0) == want


def test_counts_cover_every_outcome_and_add_up():
    outs = ["ok", "ok", "late", "503", "other", "weird"]
    c = counts(outs)
    assert list(c) == list(OUTCOMES)
    assert c["ok"] == 2 and c["late"] == 1 and c["503"] == 1 and c["other"] == 2
    assert c["async"] == c["429"] == c["504"] == 0
    assert sum(c.values()) == len(outs)


def test_percentile_is_nearest_rank():
    xs = list(range(1, 101))                # 1..100
    assert percentile(xs, 50) == 50
    assert percentile(xs, 99) == 99
    assert percentile(xs, 100) == 100
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="percentile"):
        percentile(xs, 0)


def test_arrivals_per_second_bins_whole_seconds():
    assert arrivals_per_second([0.0, 0.5, 0.99, 1.0, 3.2]) == [3, 1, 0, 1]
    assert arrivals_per_second([0.1], span_s=2.5) == [1, 0, 0]
    assert arrivals_per_second([0.1, 1.2], span_s=3.0) == [1, 1, 0]


def test_goodput_over_the_overloaded_seconds():
    # second 0: 2 arrivals, second 1: 5 (over a capacity of 3), second 2: 4 (over it)
    send = [0.1, 0.2] + [1.0 + i / 10 for i in range(5)] + [2.0 + i / 10 for i in range(4)]
    ok = [True, True] + [True, True, False, True, False] + [True, False, False, False]
    g = goodput(send, ok, capacity_rps=3)
    assert g.basis == "overloaded" and g.seconds == 2 and g.good == 4
    assert g.per_s == pytest.approx(2.0)
    assert "2 s whose arrivals exceeded the capacity of 3" in g.describe()


def test_goodput_over_the_whole_run_without_capacity_or_overload():
    send, ok = [0.0, 0.5, 1.5, 3.9], [True, False, True, True]
    g = goodput(send, ok)
    assert (g.basis, g.seconds, g.good) == ("whole run", 4, 3)
    assert g.per_s == pytest.approx(0.75)
    assert "capacity unknown" in g.describe()
    g = goodput(send, ok, capacity_rps=10)
    assert g.basis == "whole run" and "no second's arrivals exceeded" in g.describe()
    assert goodput(send, ok, span_s=9.5).seconds == 10


def test_goodput_refuses_mismatched_lengths_and_bad_capacity():
    with pytest.raises(ValueError, match="2 send times but 1"):
        goodput([0.0, 1.0], [True])
    with pytest.raises(ValueError, match="capacity_rps"):
        goodput([0.0], [True], capacity_rps=0)


def test_honest_in_time_allows_a_job_or_a_shed_50_ms_past_the_deadline_not_a_200():
    from floodway.bench.outcomes import HONEST_SLACK_S, honest

    assert honest(200, 1.5, 1.5) and not honest(200, 1.51, 1.5)
    for status in (202, 429, 503):
        assert honest(status, 1.5 + HONEST_SLACK_S, 1.5)
        assert not honest(status, 1.5 + HONEST_SLACK_S + 0.001, 1.5)
    assert not honest(504, 0.1, 1.5) and not honest(0, 0.1, 1.5)
