"""How long before its deadline a sync request is handed to the async job queue: the router's
deadline hand-off (`floodway.http.handoff`) and the simulator's (`floodway.sim.pool`) read it
here, so both hand off at the same instant.
"""

from __future__ import annotations

# A commit with synchronous=NORMAL in WAL takes well under a millisecond unloaded and a few
# tens of milliseconds on a thread under a burst (measured with benchmarks/burst.py).
HANDOFF_MARGIN_S = 0.1


def handoff_margin_s(budget_s: float, margin_s: float = HANDOFF_MARGIN_S) -> float:
    """Seconds before the deadline of a request with `budget_s` seconds at which it is
    handed off: `margin_s` (the job's durable commit and the 202), at most a tenth of a
    short budget."""
    return min(margin_s, budget_s / 10)


__all__ = ["HANDOFF_MARGIN_S", "handoff_margin_s"]
