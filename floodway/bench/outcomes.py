"""What a bench replay's answers add up to: outcome per request, counts, latency
percentiles and goodput. Pure functions of the per-request records (no I/O, no clock).

Outcomes, in the order they are reported (`OUTCOMES`):

    ok      200 answered within the request's deadline (send -> answer, client-side)
    late    200 answered after it
    async   202: the router made it an async job (bench follows it: `floodway.bench.jobs`)
    429     shed by the tenant's rate limit
    503     shed (no capacity within the deadline)
    504     deadline exceeded
    other   any other status, or no answer (a connection error or the client's timeout)

An answer is honest in time (`honest`) when it is a 200 within the deadline, or a 202, 429
or 503 (a job, or a shed with Retry-After) within the deadline plus `HONEST_SLACK_S`:
floodway's promise for every request of a spike.

Goodput is the number of ``ok`` requests per second. Given the endpoint's capacity
(requests/s, e.g. its closed-loop capacity for this request mix), it is counted over the
seconds where arrivals exceed that capacity (the overloaded seconds: what a burst tests),
each request in the second it was sent; without one, or when no second exceeds it, over
the whole run. `Goodput.basis` says which.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

OUTCOMES = ("ok", "late", "async", "429", "503", "504", "other")
LABELS = {"ok": "200 within deadline", "late": "200 late", "async": "202 (async job)",
          "429": "429 (rate limit)", "503": "503 (shed)", "504": "504 (deadline)",
          "other": "other / no answer"}


def outcome(status: int, latency_s: float, deadline_s: float) -> str:
    """The outcome (one of `OUTCOMES`) of an answer with HTTP `status` (0: no answer) that
    took `latency_s` seconds, for a request with a deadline of `deadline_s` seconds."""
    if status == 200:
        return "ok" if latency_s <= deadline_s else "late"
    if status == 202:
        return "async"
    if status in (429, 503, 504):
        return str(status)
    return "other"


# A 202 or a shed may come this much after the deadline and still count as in time.
HONEST_SLACK_S = 0.050


def honest(status: int, latency_s: float, deadline_s: float) -> bool:
    """Whether an answer is honest in time (module docstring)."""
    if status == 200:
        return latency_s <= deadline_s
    return status in (202, 429, 503) and latency_s <= deadline_s + HONEST_SLACK_S


def counts(outcomes: Iterable[str]) -> dict[str, int]:
    """Requests per outcome, every one of `OUTCOMES` present (0 when none)."""
    out = dict.fromkeys(OUTCOMES, 0)
    for o in outcomes:
        out[o if o in out else "other"] += 1
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `values`: the smallest value
    with at least q % of them at or below it; NaN when there are none. Nearest rank, not
    interpolation, so that a reported p99 is a latency some request really had."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile q must be in (0, 100], got {q}")
    s = sorted(values)
    if not s:
        return math.nan
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def arrivals_per_second(send_s: Sequence[float], span_s: float | None = None) -> list[int]:
    """Requests sent in each whole second [k, k+1) from the replay's start: the seconds up
    to the last send, and at least ceil(`span_s`) of them."""
    n = math.floor(max([*send_s, 0.0])) + 1
    per = [0] * max(n, 0 if span_s is None else math.ceil(span_s))
    for t in send_s:
        per[max(0, math.floor(t))] += 1
    return per


@dataclass(frozen=True)
class Goodput:
    """`per_s` ok requests per second over `seconds` seconds (`good` of them); `basis`:
    "overloaded" (seconds whose arrivals exceeded `capacity_rps`) or "whole run"."""

    per_s: float
    good: int
    seconds: int
    basis: str
    capacity_rps: float | None

    def describe(self) -> str:
        if self.basis == "overloaded":
            return (f"{self.per_s:.1f} requests/s within deadline over the {self.seconds} s "
                    f"whose arrivals exceeded the capacity of {self.capacity_rps:g} requests/s")
        why = ("capacity unknown (give --capacity-rps)" if self.capacity_rps is None else
               f"no second's arrivals exceeded the capacity of {self.capacity_rps:g} "
               "requests/s")
        return (f"{self.per_s:.1f} requests/s within deadline over the whole run "
                f"({self.seconds} s; {why})")


def goodput(send_s: Sequence[float], ok: Sequence[bool], capacity_rps: float | None = None,
            span_s: float | None = None) -> Goodput:
    """Goodput of a replay (module docstring): `send_s` per request (seconds from the
    start), `ok` whether it was answered 200 within its deadline; `span_s` the replay's
    length (default: up to the last send). Raises ValueError when the lengths differ or the
    capacity is not positive."""
    if len(send_s) != len(ok):
        raise ValueError(f"{len(send_s)} send times but {len(ok)} outcomes")
    if capacity_rps is not None and not capacity_rps > 0:
        raise ValueError(f"capacity_rps must be > 0, got {capacity_rps}")
    per = arrivals_per_second(send_s, span_s)
    over = set() if capacity_rps is None else {k for k, n in enumerate(per) if n > capacity_rps}
    if over:
        good = sum(1 for t, g in zip(send_s, ok, strict=True)
                   if g and max(0, math.floor(t)) in over)
        return Goodput(good / len(over), good, len(over), "overloaded", capacity_rps)
    good = sum(1 for g in ok if g)
    return Goodput(good / len(per), good, len(per), "whole run", capacity_rps)


__all__ = ["HONEST_SLACK_S", "LABELS", "OUTCOMES", "Goodput", "arrivals_per_second", "counts",
           "goodput", "honest", "outcome", "percentile"]
