"""When the client retries, and how much: the policy, the retry budget, the waits.

Pure: every function takes the clock and the random source it needs, so tests drive them
with fake ones.

    RetryPolicy         per call: how many retries, which statuses, backoff, jitter, and the
                        retry budget's size (validated when made: ClientConfigError)
    PollPolicy          how a job is polled until its result (backoff between polls)
    RetryBudget         per client: a token bucket every call of one client shares
    parse_retry_after   a Retry-After header -> seconds (RFC 9110 section 10.2.3)
    jittered            a wait never shorter than asked, up to `jitter_ratio` longer
    backoff_s           exponential backoff without a Retry-After

The retry budget follows Finagle's RetryBudget (twitter/finagle,
``com.twitter.finagle.service.RetryBudget``: retries may add ``percentCanRetry`` = 20% on top
of the requests, plus a floor of ``minRetriesPerSec``) and gRPC's retry throttling (gRPC
proposal A6, "Retry throttling": a token bucket per client channel, retries allowed only
while it holds tokens), so that when a server sheds, a fleet of clients adds at most a fifth
more load plus a small floor, instead of multiplying it by the number of retries. Our floor
is 1 retry per second rather than Finagle's 10: a floodway client is usually one of many
callers of one router, and each one's floor adds up.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from floodway.checks import check_int, check_num
from floodway.client.errors import ClientConfigError
from floodway.errors import Problem


@dataclass(frozen=True)
class RetryPolicy:
    """How one call retries (the client retries 429 and 503 answers, and failures to reach
    the server at all, with the call's one Idempotency-Key).

    `max_retries`: retries after the first attempt (0: none). `retry_statuses`: the
    answers retried, each after its ``Retry-After``. `backoff_initial_s`,
    `backoff_max_s`: the wait before retry n when the answer gave no Retry-After (a
    connection that failed): ``initial * 2**n``, at most `backoff_max_s`. `jitter_ratio`:
    every wait is made up to this much longer at random (never shorter), so that clients
    shed together do not come back together. `max_retry_after_s`: a server that asks for a
    longer wait is not retried; the error is raised at once (its `retry_after_s` says when).
    The retry budget (`RetryBudget`, shared by the client's calls): `budget_ratio` of a
    token per call, `budget_min_per_s` tokens per second, at most `budget_max_tokens`
    saved; a retry takes one token, and without one the call raises
    RetryBudgetExhausted. Raises ClientConfigError naming each bad field."""

    max_retries: int = 3
    retry_statuses: tuple[int, ...] = (429, 503)
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    jitter_ratio: float = 0.25
    max_retry_after_s: float = 60.0
    budget_ratio: float = 0.2
    budget_min_per_s: float = 1.0
    budget_max_tokens: float = 10.0

    def __post_init__(self) -> None:
        if problems := self.problems("retry"):
            raise ClientConfigError(problems)

    def problems(self, prefix: str) -> list[Problem]:
        out: list[Problem] = []
        check_int(out, f"{prefix}.max_retries", self.max_retries, 0, 100)
        statuses = self.retry_statuses
        if not (isinstance(statuses, tuple) and all(
                isinstance(s, int) and not isinstance(s, bool) and 400 <= s <= 599
                for s in statuses)):
            out.append(Problem(f"{prefix}.retry_statuses", statuses,
                               "a tuple of HTTP error statuses (400-599), e.g. (429, 503)"))
        check_num(out, f"{prefix}.backoff_initial_s", self.backoff_initial_s, 0, 60)
        check_num(out, f"{prefix}.backoff_max_s", self.backoff_max_s, 0, 3600)
        check_num(out, f"{prefix}.jitter_ratio", self.jitter_ratio, 0, 1)
        check_num(out, f"{prefix}.max_retry_after_s", self.max_retry_after_s, 0, 86400)
        check_num(out, f"{prefix}.budget_ratio", self.budget_ratio, 0, 10)
        check_num(out, f"{prefix}.budget_min_per_s", self.budget_min_per_s, 0, 1000)
        check_num(out, f"{prefix}.budget_max_tokens", self.budget_max_tokens, 0, 1e6)
        return out


@dataclass(frozen=True)
class PollPolicy:
    """How a job is polled (``GET /v1/jobs/<id>``) until it is done: first after
    `initial_s`, each wait `factor` times the last, at most `max_s`, each up to
    `jitter_ratio` longer at random; never sooner than a ``Retry-After`` the poll's answer
    gave. Raises ClientConfigError naming each bad field."""

    initial_s: float = 0.1
    factor: float = 1.5
    max_s: float = 2.0
    jitter_ratio: float = 0.25

    def __post_init__(self) -> None:
        out: list[Problem] = []
        check_num(out, "poll.initial_s", self.initial_s, 0, 60, lo_open=True)
        check_num(out, "poll.factor", self.factor, 1, 10)
        check_num(out, "poll.max_s", self.max_s, 0, 3600, lo_open=True)
        check_num(out, "poll.jitter_ratio", self.jitter_ratio, 0, 1)
        if out:
            raise ClientConfigError(out)

    def wait_s(self, polls: int) -> float:
        """The wait before poll `polls` + 1 (0-based count of polls made), before jitter."""
        return min(self.max_s, self.initial_s * self.factor ** min(polls, 64))


class RetryBudget:
    """A token bucket of retries shared by every call of one client (thread-safe).

    Starts full (`max_tokens`). Each call deposits `ratio` tokens, and `min_per_s` tokens
    accrue per second of `clock` (seconds, monotonic); the bucket holds at most
    `max_tokens`. A retry takes one whole token (`try_withdraw`). So over any span of T
    seconds in which a client makes C calls, it makes at most
    ``max_tokens + ratio * C + min_per_s * T`` retries (`bound`), whatever the servers
    answer. Sources: see the module."""

    def __init__(self, *, ratio: float, min_per_s: float, max_tokens: float,
                 clock: Callable[[], float]):
        self.ratio, self.min_per_s, self.max_tokens = ratio, min_per_s, max_tokens
        self.clock = clock
        self._tokens = max_tokens
        self._at_s = clock()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, policy: RetryPolicy, clock: Callable[[], float]) -> RetryBudget:
        return cls(ratio=policy.budget_ratio, min_per_s=policy.budget_min_per_s,
                   max_tokens=policy.budget_max_tokens, clock=clock)

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(self.max_tokens,
                           self._tokens + max(0.0, now - self._at_s) * self.min_per_s)
        self._at_s = now

    @property
    def tokens(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def deposit(self) -> None:
        """One call made: `ratio` tokens more (up to `max_tokens`)."""
        with self._lock:
            self._refill()
            self._tokens = min(self.max_tokens, self._tokens + self.ratio)

    def try_withdraw(self) -> bool:
        """Take one token for a retry -> True; False (nothing taken) when under one."""
        with self._lock:
            self._refill()
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def refill_s(self) -> float:
        """Seconds until a whole token is back at the floor rate (inf without a floor)."""
        with self._lock:
            self._refill()
            missing = 1.0 - self._tokens
            if missing <= 0:
                return 0.0
            return missing / self.min_per_s if self.min_per_s > 0 else math.inf

    def bound(self, calls: int, elapsed_s: float) -> float:
        """The most retries `calls` calls over `elapsed_s` seconds can make."""
        return self.max_tokens + self.ratio * calls + self.min_per_s * max(0.0, elapsed_s)


def parse_retry_after(value: str | None, *, now_s: float | None = None) -> float | None:
    """A Retry-After header value in seconds from now: delay-seconds (``"3"``) or an
    HTTP-date (against `now_s`, Unix seconds; default the system's time). None when absent
    or not understood (the caller backs off instead). RFC 9110 section 10.2.3."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text[:12]))   # over 30,000 years: clipped before int() is slow
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now_s is None else now_s))


def jittered(wait_s: float, ratio: float, rng: random.Random) -> float:
    """`wait_s` made up to `ratio` longer at random: in [wait_s, wait_s * (1 + ratio)]."""
    return wait_s * (1.0 + ratio * rng.random())


def backoff_s(policy: RetryPolicy, retries: int) -> float:
    """The wait before retry `retries` + 1 without a Retry-After (before jitter)."""
    return min(policy.backoff_max_s, policy.backoff_initial_s * 2.0 ** min(retries, 64))


__all__ = ["PollPolicy", "RetryBudget", "RetryPolicy", "backoff_s", "jittered",
           "parse_retry_after"]
