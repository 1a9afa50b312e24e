"""The retry policy's pieces, pure: the budget's bound holds whatever the calls and the
clock do, Retry-After parses as RFC 9110 says, jitter only lengthens a wait."""

from __future__ import annotations

import random

import pytest

from floodway.client.retry import (
    PollPolicy,
    RetryBudget,
    RetryPolicy,
    backoff_s,
    jittered,
    parse_retry_after,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seed", range(20))
def test_the_budget_never_grants_more_than_its_bound(seed):
    rng = random.Random(seed)
    clock = Clock()
    budget = RetryBudget(ratio=rng.choice([0.0, 0.1, 0.2, 0.5]),
                         min_per_s=rng.choice([0.0, 0.5, 1.0, 5.0]),
                         max_tokens=rng.choice([0.0, 1.0, 10.0]), clock=clock)
    calls = granted = 0
    for _ in range(2000):
        r = rng.random()
        if r < 0.3:
            budget.deposit()
            calls += 1
        elif r < 0.9:
            granted += budget.try_withdraw()
        else:
            clock.now += rng.expovariate(2.0)
        assert granted <= budget.bound(calls, clock.now) + 1e-9
    assert 0.0 <= budget.tokens <= budget.max_tokens


def test_the_budget_starts_full_refuses_below_one_token_and_refills_at_its_floor():
    clock = Clock()
    budget = RetryBudget(ratio=0.2, min_per_s=1.0, max_tokens=3.0, clock=clock)
    assert [budget.try_withdraw() for _ in range(4)] == [True, True, True, False]
    assert budget.refill_s() == pytest.approx(1.0)
    for _ in range(4):
        budget.deposit()   # 4 calls: 0.8 of a token
    assert not budget.try_withdraw() and budget.refill_s() == pytest.approx(0.2)
    clock.now += 0.2
    assert budget.try_withdraw()
    clock.now += 100
    assert budget.tokens == 3.0   # saved tokens are capped
    floorless = RetryBudget(ratio=0.0, min_per_s=0.0, max_tokens=0.0, clock=clock)
    assert not floorless.try_withdraw() and floorless.refill_s() == float("inf")


@pytest.mark.parametrize("value,seconds", [
    ("3", 3.0), (" 0 ", 0.0), ("120", 120.0), (None, None), ("", None), ("-1", None),
    ("1.5", None), ("soon", None),
    ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),     # an HTTP-date 10 s after now_s
    ("Wed, 21 Oct 2015 07:27:50 GMT", 0.0),      # in the past: now
])
def test_retry_after_is_delay_seconds_or_an_http_date(value, seconds):
    now_s = 1445412480.0   # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after(value, now_s=now_s) == seconds


def test_jitter_only_lengthens_and_backoff_doubles_to_its_cap():
    rng = random.Random(3)
    waits = [jittered(2.0, 0.25, rng) for _ in range(500)]
    assert min(waits) >= 2.0 and max(waits) <= 2.5 and max(waits) - min(waits) > 0.4
    assert jittered(0.0, 0.25, rng) == 0.0
    p = RetryPolicy(backoff_initial_s=0.1, backoff_max_s=1.0)
    assert [backoff_s(p, n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    poll = PollPolicy(initial_s=0.1, factor=2.0, max_s=0.5)
    assert [poll.wait_s(n) for n in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert poll.wait_s(10_000) == 0.5   # no overflow on a long wait


def test_policies_name_every_bad_field():
    from floodway.client.errors import ClientConfigError

    with pytest.raises(ClientConfigError) as e:
        RetryPolicy(retry_statuses=(503, 200), budget_ratio=-1, backoff_max_s=float("nan"))
    text = str(e.value)
    assert "3 problem(s)" in text
    for name in ("retry.retry_statuses", "retry.budget_ratio", "retry.backoff_max_s"):
        assert name in text
    with pytest.raises(ClientConfigError, match="poll.initial_s = 0"):
        PollPolicy(initial_s=0)
