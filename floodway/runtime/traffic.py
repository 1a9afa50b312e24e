"""One endpoint's traffic record: user arrivals per minute, as the warm-pool policy reads them.

Arrivals go to the shared `TrafficHistory` store when the router has one (it survives
restarts), else to an in-memory count of the last `HISTORY_MIN` minutes. Only user requests
are recorded: warm-ups and probes never are (`floodway.warmers.target` says why).
"""

from __future__ import annotations

import numpy as np

from floodway.warmers.history import TrafficHistory
from floodway.warmers.target import History, minute_of

HISTORY_MIN = 240   # the hybrid histogram's range (Shahrad et al. 2020, section 4.2)


class Traffic:
    """Arrivals of `endpoint` (unix seconds, as `desired()` reads them)."""

    def __init__(self, endpoint: str, store: TrafficHistory | None = None,
                 minutes: int = HISTORY_MIN):
        self.endpoint, self.store, self.minutes = endpoint, store, minutes
        self.last_arrival_s: float | None = None
        self._counts: dict[int, int] = {}

    def record(self, now_s: float) -> None:
        """Count one user request arriving at unix time `now_s`."""
        self.last_arrival_s = now_s
        if self.store is not None:
            self.store.record(self.endpoint, now_s)
            return
        minute = minute_of(now_s)
        self._counts[minute] = self._counts.get(minute, 0) + 1
        for old in [m for m in self._counts if m < minute - self.minutes]:
            del self._counts[old]

    def history(self, now_s: float) -> History:
        """The last `minutes` minutes up to and including the one holding `now_s`."""
        if self.store is not None:
            h = self.store.history(self.endpoint, now_s, self.minutes)
            return History(h.start_minute, h.counts, self.last_arrival_s)
        end = minute_of(now_s)
        start = end - self.minutes + 1
        counts = np.asarray([self._counts.get(m, 0) for m in range(start, end + 1)])
        return History(start, counts, self.last_arrival_s)


__all__ = ["HISTORY_MIN", "Traffic"]
