"""The deadline hand-off: a sync request still unfinished shortly before its deadline becomes
an async job (202 + Location, ``X-Floodway-Handoff: deadline``) instead of a 504, when its
route spills to async, as a Modal web endpoint redirects a long call to its result.

    "submit"  none of its inputs has reached a container, or the backend cannot tell
              (`Pending.dispatched()` False): the inputs are withdrawn from the queue and a
              new job runs them;
    "adopt"   already on a container: the job takes over the work under way
              (`Pending.adopt`, `Jobs.adopt`), so it never runs twice.

The queue's own deadline may fire first (a busy event loop wakes the hand-off late): its
items are then withdrawn (TimeoutError), and a new job runs them ("submit").
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from floodway.http.errors import ClientClosed
from floodway.http.protocols import Clock, Pending

# A commit with synchronous=NORMAL in WAL takes well under a millisecond unloaded and a few
# tens of milliseconds on a thread under a burst (measured with benchmarks/burst.py).
HANDOFF_MARGIN_S = 0.1


class Way(enum.StrEnum):
    SUBMIT = "submit"
    ADOPT = "adopt"


@dataclass(frozen=True)
class HandOff:
    """A request to hand to the job queue: `way`, and for "adopt" the `work` whose results
    (one per input) the job records."""

    way: Way
    work: Awaitable[list[Any]] | None = None


class DeadlineHandoff:
    """Waits for a sync request's work, and hands it off near its deadline. `clock`: what
    the wait is measured on; `margin_s`: how long before the deadline."""

    def __init__(self, clock: Clock, *, margin_s: float = HANDOFF_MARGIN_S):
        self.clock, self.margin_s = clock, margin_s

    def after_s(self, budget_s: float) -> float:
        """Seconds after arrival at which a request with `budget_s` seconds is handed off:
        early enough that the job's durable commit and the 202 fit before the deadline
        (`margin_s`, at most a tenth of a short budget)."""
        return max(0.0, budget_s - min(self.margin_s, budget_s / 10))

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
        the last (neither of the others happened)."""
        timer = asyncio.ensure_future(self.clock.sleep(self.after_s(budget_s)))
        try:
            await asyncio.wait({work, left, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return work.done() or left.done()


__all__ = ["HANDOFF_MARGIN_S", "DeadlineHandoff", "HandOff", "Way"]
