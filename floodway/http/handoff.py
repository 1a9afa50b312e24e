"""The deadline hand-off: a sync request still unfinished shortly before its deadline becomes
an async job (202 + Location, ``X-Floodway-Handoff: deadline``) instead of a 504, when its
route spills to async, as a Modal web endpoint redirects a long call to its result.

    "submit"  none of its inputs has reached a container, or the backend cannot tell
              (`Pending.dispatched()` False): the inputs are withdrawn from the queue and a
              new job runs them;
    "adopt"   already on a container: the job takes over the work under way
              (`Pending.adopt`, `Jobs.adopt`), so it never runs twice.

It fires `after_s` into the time left: early enough for the job's durable commit and the
202 (`margin_s`), and earlier by twice the router's recent event-loop lag
(`floodway.http.looplag`; `floodway.routers.decide.LAG_FACTOR`): a loop that runs late wakes
the timer late and answers late. The queue's own deadline may still fire first (a loop
later than it has been): its items are then withdrawn (TimeoutError), and a new job runs
them ("submit").
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from floodway.core.backend import Pending
from floodway.core.clock import Clock
from floodway.core.handoff import HANDOFF_MARGIN_S, handoff_margin_s
from floodway.http.errors import ClientClosed
from floodway.routers.decide import LAG_FACTOR

# The timer looks at the lag again until the hand-off is this close.
RECHECK_S = 0.1


class Way(enum.StrEnum):
    SUBMIT = "submit"
    ADOPT = "adopt"


@dataclass(frozen=True)
class HandOff:
    """A request to hand to the job queue: `way`, and for "adopt" the `work` whose results
    (one per input) the job records."""

    way: Way
    work: Awaitable[list[Any]] | None = None


def _no_lag() -> float:
    return 0.0


class DeadlineHandoff:
    """Waits for a sync request's work, and hands it off near its deadline. `clock`: what
    the wait is measured on; `margin_s`: how long before the deadline; `lag()`: the router's
    recent event-loop lag in seconds (`floodway.http.looplag.LoopLag.recent_s`)."""

    def __init__(self, clock: Clock, *, margin_s: float = HANDOFF_MARGIN_S,
                 lag: Callable[[], float] = _no_lag):
        self.clock, self.margin_s, self.lag = clock, margin_s, lag

    def after_s(self, budget_s: float, lag_s: float = 0.0) -> float:
        """Seconds from now at which a request with `budget_s` seconds left is handed off:
        early enough that the job's durable commit and the 202 fit before the deadline
        (`margin_s`, at most a tenth of a short budget), and LAG_FACTOR x `lag_s` earlier."""
        return max(0.0, budget_s - handoff_margin_s(budget_s, self.margin_s) -
                   LAG_FACTOR * max(0.0, lag_s))

    async def wait(self, pending: Pending, gone: Awaitable[None], *, budget_s: float,
                   may_hand_off: bool) -> list[Any] | HandOff:
        """The request's results (one per input: output or exception) once its work is
        done; with `may_hand_off`, a `HandOff` when the work is still unfinished
        `after_s(budget_s)` seconds on, or when its queue's deadline fired first. `gone`
        completes when the client leaves: raises ClientClosed, the queued inputs withdrawn.
        Raises what the work raised otherwise (TimeoutError past the deadline, Unavailable).
        """
        work = asyncio.ensure_future(pending)
        left = asyncio.ensure_future(gone)
        handoff: HandOff | None = None
        try:
            if may_hand_off and not await self._done_in_time(work, left, budget_s):
                handoff = HandOff(Way.ADOPT, pending.adopt()) if pending.dispatched() \
                    else HandOff(Way.SUBMIT)
            if handoff is None:
                await asyncio.wait({work, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            unfinished = not work.done()
            if unfinished:
                work.cancel()   # the client left or the hand-off: withdraw queued inputs
        if handoff is not None:
            return handoff
        if unfinished:
            raise ClientClosed("the client closed the connection")
        if may_hand_off and not work.cancelled() and isinstance(work.exception(), TimeoutError):
            return HandOff(Way.SUBMIT)
        return work.result()

    async def _done_in_time(self, work: asyncio.Future, left: asyncio.Future,
                            budget_s: float) -> bool:
        """Wait until the work is done, the client left, or the hand-off time; False for
        the last (neither of the others happened). The hand-off time moves with the lag:
        the timer wakes halfway there (at most `RECHECK_S` before it) and looks again, a
        few wake-ups a request."""
        # The margin is the whole budget's; the lag is read again at every wake-up.
        fire_at_s = self.clock.monotonic() + self.after_s(budget_s)
        while not (work.done() or left.done()):
            fire_in = fire_at_s - self.clock.monotonic() - LAG_FACTOR * max(0.0, self.lag())
            if fire_in <= 0:
                return False
            nap = fire_in if fire_in <= RECHECK_S else max(RECHECK_S, fire_in / 2)
            timer = asyncio.ensure_future(self.clock.sleep(nap))
            try:
                await asyncio.wait({work, left, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
        return True


__all__ = ["DeadlineHandoff", "HandOff", "Way"]
