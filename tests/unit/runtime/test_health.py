"""Container health as pure functions: stuck, silent and dead containers."""

from __future__ import annotations

import pytest

from floodway.runtime.health import (
    BACKOFF_S,
    PING_EVERY_S,
    PING_TIMEOUT_S,
    Liveness,
    Verdict,
    after_exit,
    backoff_s,
    check,
    checks,
)


def box(state: str = "ready", inflight: int = 0, *, progress_s: float = 0.0,
        ping_s: float | None = None, pong_s: float = 0.0, cid: str = "1") -> Liveness:
    return Liveness(cid, state, inflight, progress_s, ping_s, pong_s)


def test_busy_without_a_completion_for_stuck_after_s_is_killed():
    assert check(box("busy", 2), 60.0, 60.0).verdict == Verdict.OK
    stuck = check(box("busy", 2), 60.5, 60.0)
    assert stuck.verdict == Verdict.KILL
    assert stuck.reason == ("stuck: 2 batches in flight and no completion for 60.5s "
                            "(stuck_after_s=60)")
    # A completion resets the clock.
    assert check(box("ready", 1, progress_s=30.0), 60.5, 60.0).verdict == Verdict.OK


@pytest.mark.parametrize("state", ["starting", "warming", "draining", "stopped", "failed"])
def test_only_serving_containers_are_checked(state):
    assert check(box(state, 1), 1e6, 1.0).verdict == Verdict.OK
    assert check(box(state), 1e6, 1.0).verdict == Verdict.OK


def test_an_idle_container_is_pinged_every_ping_every_s():
    assert check(box(pong_s=10.0), 10.0 + PING_EVERY_S - 0.01, 60.0).verdict == Verdict.OK
    assert check(box(pong_s=10.0), 10.0 + PING_EVERY_S, 60.0).verdict == Verdict.PING


def test_an_unanswered_ping_kills_after_the_shorter_of_its_timeout_and_stuck_after_s():
    waiting = box(ping_s=100.0)
    assert check(waiting, 100.0 + PING_TIMEOUT_S, 60.0).verdict == Verdict.OK
    silent = check(waiting, 100.0 + PING_TIMEOUT_S + 0.1, 60.0)
    assert silent.verdict == Verdict.KILL and silent.reason.startswith("unresponsive: ")
    assert check(waiting, 103.5, 3.0).verdict == Verdict.KILL   # stuck_after_s is shorter


def test_checks_lists_only_what_asks_for_something():
    found = checks([box(cid="a"), box("busy", 1, cid="b"), box(pong_s=-5.0, cid="c")],
                   5.0, 60.0)
    assert [(c.container, c.verdict) for c in found] == [("a", Verdict.PING),
                                                         ("c", Verdict.PING)]


def test_backoff_grows_with_failed_starts_and_stops_growing():
    assert [backoff_s(n) for n in range(8)] == [*BACKOFF_S, BACKOFF_S[-1], BACKOFF_S[-1]]
    assert backoff_s(-1) == BACKOFF_S[0]


def test_a_failed_start_counts_and_is_replaced_after_the_backoff_under_the_floor():
    first = after_exit(False, 0, live=0, floor=1)
    assert (first.failures, first.replace_in_s) == (1, BACKOFF_S[0])
    third = after_exit(False, 2, live=0, floor=1)
    assert (third.failures, third.replace_in_s) == (3, BACKOFF_S[2])


def test_a_container_that_served_then_died_is_no_failed_start():
    out = after_exit(True, 0, live=0, floor=1)
    assert (out.failures, out.replace_in_s) == (0, BACKOFF_S[0])


def test_no_replacement_at_or_above_the_floor():
    assert after_exit(False, 0, live=1, floor=1).replace_in_s is None
    assert after_exit(False, 0, live=1, floor=1).failures == 1
    assert after_exit(True, 0, live=2, floor=1).replace_in_s is None


@pytest.mark.parametrize("state", ["starting", "warming"])
def test_a_container_not_ready_within_start_timeout_s_is_killed(state):
    def starting(for_s: float) -> Liveness:
        return Liveness("1", state, 0, 0.0, None, 0.0, starting_for_s=for_s)

    assert check(starting(300.0), 300.0, 60.0, 300.0).verdict == Verdict.OK
    slow = check(starting(300.5), 300.5, 60.0, 300.0)
    assert slow.verdict == Verdict.KILL
    assert slow.reason == "not ready 300s after its start (start_timeout_s=300)"
    # Without a start timeout a starting container is left alone, as before.
    assert check(starting(1e6), 1e6, 60.0).verdict == Verdict.OK


def test_an_endpoint_is_failing_after_failed_starts_in_a_row_or_one_with_none_to_follow():
    from floodway.runtime.health import FAILING_STARTS, failing

    assert not failing(0, warm=0, starts_coming=False)          # nothing failed yet
    assert not failing(FAILING_STARTS - 1, warm=0, starts_coming=True)   # the next may load
    assert failing(FAILING_STARTS, warm=0, starts_coming=True)  # a crash loop
    assert failing(1, warm=0, starts_coming=False)               # scaled to zero: no retry
    assert not failing(FAILING_STARTS + 5, warm=1, starts_coming=True)   # one serves
