"""The compiled segment kernel: edge cases handed back to the event loop exactly, every
reason to stop taken, and the queue it drains at once (decide()'s step 5 with nothing
queued)."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.routers.decide import Action
from floodway.sim import SimConfig, simulate
from floodway.sim.engine import Simulator
from floodway.sim.kernel import REASONS
from tests.unit.sim.cases import assert_same, bulk_cases, code, kernel_edge_cases


@pytest.mark.parametrize("case", list(kernel_edge_cases()))
def test_the_segment_kernel_hands_edge_cases_back_exactly(case) -> None:
    trace, cfg = kernel_edge_cases()[case]
    fast = simulate(trace, SimConfig(**cfg))
    assert_same(fast, simulate(trace, SimConfig(**cfg, fast=False)))


def test_every_reason_for_a_segment_to_stop_is_exercised() -> None:
    """The compiled segment kernel stops where the event loop must take over (at the next
    event, an arrival it would neither dispatch nor queue, a request left in the queue, an
    unknown heap order, a sampled time it has not drawn); the traces compared with decide()
    in these tests take each of those branches."""
    stops = np.zeros(len(REASONS), dtype=np.int64)
    for trace, cfg in [*bulk_cases().values(), *kernel_edge_cases().values()]:
        sim = Simulator(trace, SimConfig(**cfg))
        sim.run()
        if sim.seg is not None:
            stops += sim.seg.stops
    assert np.all(stops > 0), dict(zip(REASONS, stops.tolist(), strict=True))


class Counting(Simulator):
    """Counts the arrivals decided by decide() itself (not by a shortcut)."""

    decided = 0

    def decision(self, i, now, rows):
        self.decided += 1
        return super().decision(i, now, rows)


def test_the_kernel_queues_what_decide_queues_and_drains_it_at_once() -> None:
    """Two batches in a container's pipe: a request that finds both taken is queued and joins
    the newest batch that has not started; the kernel decides those requests itself."""
    trace, cfg = bulk_cases()["bursty, batching rows"]
    sim = Counting(trace, SimConfig(**cfg))
    fast = sim.run()
    queued = fast.decisions == code(Action.QUEUE)
    assert queued.sum() > 5 and fast.expired == 0
    assert sim.decided < queued.sum()          # decide() itself ran for fewer than that
    assert sim.bulk_requests > 0.9 * trace.requests
    # Every queued request went into a batch at once: served as soon as the pipe allowed.
    assert np.all(fast.latencies_s[queued] < 2 * cfg["route"].timeout_s)
    assert_same(fast, simulate(trace, SimConfig(**cfg, fast=False)))
