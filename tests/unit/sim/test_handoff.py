"""The simulator does what the local runtime does near a deadline and between batches: the
deadline hand-off (a request still queued, or answered, after its hand-off instant is an
async job, as `floodway.http.handoff` answers it 202) and the batcher's cut (a batch is
sent `wait_ms` after it opens, and one behind another stops growing then), in both modes."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.config import Batching, Route, WarmPool
from floodway.core.clock import SYSTEM_CLOCK
from floodway.core.handoff import HANDOFF_MARGIN_S
from floodway.http.handoff import DeadlineHandoff
from floodway.routers.service import ServiceTime
from floodway.sim import ServiceModel, SimConfig, Trace, simulate
from floodway.sim.pool import handoff_margin_s
from tests.unit.sim.cases import assert_same

ONE = WarmPool(min_containers=1, max_containers=1, scaledown_window_s=600)


@pytest.mark.parametrize("budget_s", [0.05, 0.5, 2.0, 30.0])
def test_the_hand_off_instant_is_the_routers(budget_s: float) -> None:
    route = Route(timeout_s=budget_s, spill=("cold", "async"))
    assert handoff_margin_s(route) == min(HANDOFF_MARGIN_S, budget_s / 10)
    after = DeadlineHandoff(SYSTEM_CLOCK).after_s(budget_s)
    assert budget_s - handoff_margin_s(route) == pytest.approx(after)
    assert handoff_margin_s(Route(timeout_s=budget_s, spill=("cold",))) == 0.0


def _cfg(spill: tuple[str, ...], fast: bool) -> SimConfig:
    # One container, batches of one row that decide() plans at 0.1 s but that run 0.45 s (a
    # measured time by size), a 1 s budget (hand-off at 0.9 s): of five requests at once,
    # two ride the pipe (done at 0.45 and 0.9 s), the third runs 0.9-1.35 s (answered after
    # its hand-off: a 202), the fourth and fifth are still queued at 0.9 s.
    return SimConfig(route=Route(max_queue=100, timeout_s=1.0, spill=spill), warm=ONE,
                     batching=Batching(max_batch_rows=1, wait_ms=0),
                     service=ServiceModel(ServiceTime(0.0, 0.1), by_rows=((1, 0.45),)),
                     fast=fast)


@pytest.mark.parametrize("fast", [True, False])
def test_late_and_queued_requests_are_handed_off_where_the_route_spills_to_async(fast):
    tr = Trace.from_times(np.zeros(5), minutes=1)
    res = simulate(tr, _cfg(("cold", "async"), fast))
    assert (res.dispatched, res.queued, res.spill_async) == (2, 3, 0)
    assert res.served == 2 and res.handed_off == 3 and res.async_jobs == 3
    assert res.expired == 0                            # the hand-off comes first
    assert list(res.latencies_s[:2]) == pytest.approx([0.45, 0.9])
    assert np.isnan(res.latencies_s[2:]).all() and res.p99_s <= 0.9
    # without an async spill nothing is handed off: the third and fourth are served late
    # (the fourth left the queue at 0.9 s, before its deadline), the fifth is dropped at
    # its deadline
    plain = simulate(tr, _cfg(("cold",), fast))
    assert plain.handed_off == 0 and plain.async_jobs == 0
    assert plain.served == 4 and plain.expired == 1
    assert list(plain.latencies_s[2:4]) == pytest.approx([1.35, 1.8])


def test_the_hand_off_gives_the_same_result_in_both_modes() -> None:
    rng = np.random.default_rng(3)
    tr = Trace.from_times(np.sort(rng.random(400) * 60.0), minutes=1)
    # sampled batch times: decide() plans with their mean, some run much longer
    cfg = dict(route=Route(max_queue=20, timeout_s=0.5), warm=ONE,
               batching=Batching(max_batch_rows=4, wait_ms=5),
               service=ServiceModel.of([0.02, 0.05, 0.3]))
    fast, slow = simulate(tr, **cfg), simulate(tr, **cfg, fast=False)
    assert_same(fast, slow)
    assert fast.handed_off == slow.handed_off > 0


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_behind_another_stops_growing_when_it_is_cut(fast: bool) -> None:
    # One container, 1 s batches, a 10 ms batcher wait. A at 0 runs 0.01-1.01; B at 0.1
    # opens the batch behind it, cut at 0.11; C at 0.5 finds it cut and both slots taken,
    # so it waits in the queue and runs in a third batch (2.01-3.01) instead of riding B's.
    tr = Trace.from_times(np.array([0.0, 0.1, 0.5]), minutes=1)
    cfg = SimConfig(route=Route(max_queue=100, timeout_s=30.0, spill=()), warm=ONE,
                    batching=Batching(max_batch_rows=8, wait_ms=10),
                    service=ServiceModel.of(1.0), fast=fast)
    res = simulate(tr, cfg)
    assert res.served == 3
    assert list(res.latencies_s) == pytest.approx([1.01, 1.91, 2.51])
