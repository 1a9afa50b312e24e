"""Container health: which containers are stuck or silent, and how a dead one is replaced.

    check(container, now_s, stuck_after_s, start_timeout_s=) -> Check(verdict, reason)
    after_exit(started, failures, live, floor) -> Exit(failures, replace_in_s)
    failing(failures, warm, starts_coming) -> bool

Pure functions of a container's facts and a clock (seconds on the runtime's monotonic
clock); the pool carries out what they say (ping, kill, replace).

- stuck: work in flight and no completion for `Route.stuck_after_s` -> kill (its batches
  fail over: the batcher retries each once elsewhere). A streaming container's progress is
  any chunk or item end (`streaming`): one whose sequences all wait for a first chunk while
  none streams is stuck; one that streams, however long, is not.
- slow start: not ready `Route.start_timeout_s` after it was started (a load hook that
  hangs) -> kill; it counts as a failed start, so the next start backs off.
- silent: an idle ready container is pinged every `PING_EVERY_S`; one that has not answered
  within ``min(stuck_after_s, PING_TIMEOUT_S)`` (a hung or stopped process) -> kill, before a
  request finds it. An idle worker's reply needs no model work, so that is long enough.
- dead: a container whose process exited is replaced while the pool is under its floor,
  after `BACKOFF_S` seconds that grow with the failed starts in a row, so that a broken
  build cannot crash-loop the machine. Only a failed *start* counts: one that served and
  then died (killed, crashed) says nothing about the next start.
- failing: an endpoint with no warm container whose last `FAILING_STARTS` starts in a row
  failed (its `load` hook raises, say), or whose last start failed with none to follow (no
  replacement waits, none is starting: a scaled-to-zero endpoint). Its requests are
  refused (503 with the load error) and its jobs fail, instead of waiting for a container
  that does not come; the replacements go on with their backoff, and the first start that
  succeeds ends it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass

from floodway.core.snapshot import STARTING
from floodway.routers.decide import WARM

PING_EVERY_S = 2.0
PING_TIMEOUT_S = 10.0
# Seconds before replacing a container, by failed starts in a row (the last repeats).
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# Failed starts in a row after which an endpoint with no warm container is failing (with
# the backoff above: about 1.5 s and three loads after the first start).
FAILING_STARTS = 3


class Verdict(enum.StrEnum):
    OK = "ok"
    PING = "ping"      # send a liveness ping now
    KILL = "kill"      # declare it broken: stop routing to it, kill the process


@dataclass(frozen=True)
class Liveness:
    """What health needs of one container (times on the runtime's monotonic clock).

    `inflight`: batches sent and not answered; `last_progress_s`: its last completion (or
    when work was first sent to it idle); `ping_sent_s`: the outstanding ping (None: none);
    `last_pong_s`: when the last ping was answered; `starting_for_s`: seconds since a
    container that is not ready yet was started (0 once ready); `streaming`: its work is
    sequences (one per batch), whose progress is a chunk or an item's end."""

    id: str
    state: str
    inflight: int
    last_progress_s: float
    ping_sent_s: float | None
    last_pong_s: float
    starting_for_s: float = 0.0
    streaming: bool = False


@dataclass(frozen=True)
class Check:
    container: str
    verdict: Verdict
    reason: str = ""


def check(c: Liveness, now_s: float, stuck_after_s: float,
          start_timeout_s: float = math.inf) -> Check:
    """The verdict on one container at `now_s` (see the module docstring)."""
    if c.state in STARTING and c.starting_for_s > start_timeout_s:
        return Check(c.id, Verdict.KILL, f"not ready {c.starting_for_s:.0f}s after its start "
                                         f"(start_timeout_s={start_timeout_s:g})")
    if c.inflight and c.state in WARM:
        quiet_s = now_s - c.last_progress_s
        if quiet_s > stuck_after_s:
            work, none = ("sequences", "chunk or end") if c.streaming else \
                ("batches", "completion")
            return Check(c.id, Verdict.KILL,
                         f"stuck: {c.inflight} {work} in flight and no {none} for "
                         f"{quiet_s:.1f}s (stuck_after_s={stuck_after_s:g})")
        return Check(c.id, Verdict.OK)
    if c.inflight or c.state != "ready":
        return Check(c.id, Verdict.OK)
    if c.ping_sent_s is None:
        due = now_s - c.last_pong_s >= PING_EVERY_S
        return Check(c.id, Verdict.PING if due else Verdict.OK)
    waited_s = now_s - c.ping_sent_s
    if waited_s > min(stuck_after_s, PING_TIMEOUT_S):
        return Check(c.id, Verdict.KILL, f"unresponsive: no answer to a liveness ping for "
                                         f"{waited_s:.1f}s while idle")
    return Check(c.id, Verdict.OK)


def checks(containers: Iterable[Liveness], now_s: float, stuck_after_s: float,
           start_timeout_s: float = math.inf) -> tuple[Check, ...]:
    """The verdicts that ask for something (ping or kill), in the containers' order."""
    found = (check(c, now_s, stuck_after_s, start_timeout_s) for c in containers)
    return tuple(v for v in found if v.verdict != Verdict.OK)


@dataclass(frozen=True)
class Exit:
    """After a container's process exited: failed starts in a row now, and seconds until a
    replacement starts (None: not replaced, the pool is at or above its floor without it)."""

    failures: int
    replace_in_s: float | None


def backoff_s(failed_starts: int) -> float:
    """Seconds to wait before the next start after `failed_starts` failed starts in a row."""
    return BACKOFF_S[min(max(0, failed_starts), len(BACKOFF_S) - 1)]


def after_exit(started: bool, failures: int, live: int, floor: int) -> Exit:
    """A container exited without being asked to: `started` tells whether it ever became
    ready, `failures` the failed starts in a row before it, `live` the live containers left
    and `floor` how many the warm target keeps. Re-check ``live < floor`` when the delay
    has passed: the pool may have filled up meanwhile."""
    failures_now = failures if started else failures + 1
    if live >= floor:
        return Exit(failures_now, None)
    return Exit(failures_now, backoff_s(0 if started else failures))


def failing(failures: int, warm: int, starts_coming: bool) -> bool:
    """Whether an endpoint is failing (see the module): `failures` failed starts in a
    row, `warm` warm containers, `starts_coming`: a container is starting or a replacement
    waits out its backoff."""
    if failures == 0 or warm:
        return False
    return failures >= FAILING_STARTS or not starts_coming


__all__ = ["BACKOFF_S", "FAILING_STARTS", "PING_EVERY_S", "PING_TIMEOUT_S", "Check", "Exit",
           "Liveness", "Verdict", "after_exit", "backoff_s", "check", "checks", "failing"]
