from __future__ import annotations

import math
from dataclasses import replace

import pytest

from floodway.routers.decide import (
    Action,
    ContainerView,
    Request,
    ServiceTime,
    Snapshot,
    decide,
    water_fill,
)

SVC = ServiceTime(per_row_s=0.001, per_batch_s=0.01)   # 32 rows: 0.042 s


def warm(cid: str, free: int = 4, backlog_s: float = 0.0, slots: int = 4) -> ContainerView:
    return ContainerView(cid, "ready" if free else "busy", free_slots=free, slots=slots,
                         backlog_s=backlog_s)


def snap(*containers: ContainerView, **kw) -> Snapshot:
    base = dict(now_s=100.0, containers=containers, service=SVC, cold_start_s=1.0,
                max_batch_rows=32, max_queue=10, max_containers=4)
    return Snapshot(**{**base, **kw})


def req(rows: int = 1, budget_s: float = 2.0, **kw) -> Request:
    return Request(rows=rows, deadline_s=100.0 + budget_s, **kw)


def test_dispatch_to_a_free_warm_slot():
    d = decide(snap(warm("a")), req())
    assert d.action == Action.DISPATCH and d.status == 0


def test_queue_when_no_free_slot_but_the_wait_fits():
    d = decide(snap(warm("a", free=0, backlog_s=0.5)), req())
    assert d.action == Action.QUEUE
    assert d.est_wait_s == pytest.approx(0.5)


def test_queued_work_ahead_means_queue_not_dispatch():
    # Dispatching past queued requests would reorder them.
    d = decide(snap(warm("a"), queued=3, queued_rows=3), req())
    assert d.action == Action.QUEUE


def test_spill_cold_when_the_queue_wait_misses_the_deadline():
    d = decide(snap(warm("a", free=0, backlog_s=5.0)), req(budget_s=2.0))
    assert d.action == Action.SPILL_COLD
    assert "1.00s measured" in d.reason


def test_no_cold_spill_beyond_max_containers_or_when_cold_start_is_too_slow():
    busy = [warm(str(i), free=0, backlog_s=5.0) for i in range(4)]
    assert decide(snap(*busy), req()).action == Action.SPILL_ASYNC
    assert decide(snap(busy[0], cold_start_s=3.0), req()).action == Action.SPILL_ASYNC


def test_shed_with_retry_after_when_async_is_not_allowed():
    d = decide(snap(warm("a", free=0, backlog_s=5.0), spill=()), req())
    assert d.action == Action.SHED and d.status == 503
    assert 1.0 <= d.retry_after_s <= 60.0
    assert decide(snap(warm("a", free=0, backlog_s=5.0)),
                  req(allow_async=False)).action == Action.SPILL_COLD


def test_deadline_already_passed_or_shorter_than_service():
    assert decide(snap(warm("a")), req(budget_s=0)).action == Action.SHED
    d = decide(snap(warm("a", backlog_s=0.01)), req(rows=32, budget_s=0.02))   # 0.042 s
    assert d.action == Action.SPILL_ASYNC and "exceeds the deadline budget" in d.reason
    # An idle container takes it anyway: nothing would be faster than running it now.
    assert decide(snap(warm("a")), req(rows=32, budget_s=0.02)).action == Action.DISPATCH


def test_starting_container_absorbs_the_next_requests():
    # After one spill_cold, the container on its way counts as capacity: no second spill.
    starting = ContainerView("b", "starting", slots=4, ready_in_s=0.8)
    d = decide(snap(warm("a", free=0, backlog_s=5.0), starting), req())
    assert d.action == Action.QUEUE
    assert d.est_wait_s == pytest.approx(0.8)


def test_low_priority_is_refused_queue_room_first():
    s = snap(warm("a", free=0, backlog_s=0.1), queued=5, queued_rows=5, spill=())
    assert decide(s, req(priority=0)).action == Action.SHED      # low: 5 of 10
    assert decide(s, req(priority=1)).action == Action.QUEUE
    full = snap(warm("a", free=0, backlog_s=0.1), queued=9, queued_rows=9, spill=())
    assert decide(full, req(priority=1)).action == Action.SHED   # normal: 9 of 10
    assert decide(full, req(priority=2)).action == Action.QUEUE  # high: all 10


def test_one_tenant_cannot_fill_the_queue():
    s = snap(warm("a", free=0, backlog_s=0.1), queued=6, queued_rows=6, spill=(),
             tenant_queued={"greedy": 5, "other": 1})
    assert decide(s, req(tenant="greedy")).action == Action.SHED
    assert decide(s, req(tenant="other")).action == Action.QUEUE
    # Alone in the queue, a tenant may use all of its priority's room.
    alone = replace(s, tenant_queued={"greedy": 6})
    assert decide(alone, req(tenant="greedy")).action == Action.QUEUE


def test_async_not_offered_when_the_store_is_not_accepting():
    d = decide(snap(warm("a", free=0, backlog_s=5.0), spill=("async",),
                    async_accepting=False), req())
    assert d.action == Action.SHED


def test_water_fill():
    assert water_fill([], 1.0) == math.inf
    assert water_fill([0.0, 0.0], 1.0) == pytest.approx(0.5)
    # One server free at 0, another at 1: 1.5 s of work ends at 1.25.
    assert water_fill([0.0, 1.0], 1.5) == pytest.approx(1.25)
    assert water_fill([0.0, 1.0], 0.5) == pytest.approx(0.5)
    assert water_fill([2.0], 0.0) == pytest.approx(2.0)


def test_service_time_fit():
    prior = ServiceTime(0.5, 0.5)
    assert ServiceTime.fit([], prior) is prior
    fit = ServiceTime.fit([(r, 0.002 * r + 0.01) for r in (1, 8, 32, 32)], prior)
    assert fit.per_row_s == pytest.approx(0.002) and fit.per_batch_s == pytest.approx(0.01)
    one_size = ServiceTime.fit([(8, 0.1), (8, 0.3)], prior)
    assert one_size.per_row_s == pytest.approx(0.025) and one_size.per_batch_s == 0.0
    noisy = ServiceTime.fit([(1, 0.5), (2, 0.1)], prior)
    assert noisy.per_row_s == 0.0 and noisy.per_batch_s == pytest.approx(0.3)   # clamped


def test_scaled_to_zero_a_shed_still_starts_a_container():
    d = decide(snap(cold_start_s=30.0, spill=("cold",)), req())
    assert d.action == Action.SHED and d.start_cold and d.retry_after_s == 30.0
    d = decide(snap(cold_start_s=30.0), req())
    assert d.action == Action.SPILL_ASYNC and d.start_cold
    busy = decide(snap(warm("a", free=0, backlog_s=5.0), cold_start_s=30.0), req())
    assert not busy.start_cold   # a live container exists: no scale-from-zero


def test_lower_priority_work_queued_is_not_ahead():
    # 60 low rows (3 s of work) queued: a normal request is served before them.
    s = snap(warm("a", free=0, backlog_s=0.1), queued=3, queued_rows=60, spill=(),
             queued_rows_by_priority=(60, 0, 0), service=ServiceTime(0.05, 0.0))
    assert decide(s, req(priority=1)).action == Action.QUEUE
    assert decide(s, req(priority=0)).action == Action.SHED


def test_arrivals_fill_the_batch_a_request_rides_in():
    slow = ServiceTime(per_row_s=0.05, per_batch_s=0.0)     # a full 32-row batch: 1.6 s
    quiet = snap(warm("a", free=0, backlog_s=0.2), service=slow, queued=1, queued_rows=1,
                 spill=())
    assert decide(quiet, req(budget_s=1.0)).action == Action.QUEUE     # 2 rows: 0.1 s
    busy = replace(quiet, arrival_rows_per_s=200.0)
    d = decide(busy, req(budget_s=1.0))                     # its batch fills: 1.6 s
    assert d.action == Action.SHED and "service 1.600s" in d.reason


def test_queued_low_priority_requests_take_no_queue_room_from_normal_ones():
    s = snap(warm("a", free=0, backlog_s=0.1), queued=10, queued_rows=10, spill=(),
             queued_by_priority=(10, 0, 0), queued_rows_by_priority=(10, 0, 0))
    assert decide(s, req(priority=1)).action == Action.QUEUE
    assert decide(s, req(priority=0)).action == Action.SHED


def test_spill_targets_are_tried_in_route_order():
    full = warm("a", free=0, backlog_s=5.0)
    # Both a cold start and a job would do: the first target listed takes the request.
    assert decide(snap(full, spill=("cold", "async")), req()).action == Action.SPILL_COLD
    d = decide(snap(full, spill=("async", "cold")), req())
    assert d.action == Action.SPILL_ASYNC and not d.start_cold
    # A target that cannot take it passes it on to the next one, whatever the order.
    assert decide(snap(full, spill=("async", "cold")),
                  req(allow_async=False)).action == Action.SPILL_COLD
    assert decide(snap(full, spill=("async", "cold"), async_accepting=False),
                  req()).action == Action.SPILL_COLD
    assert decide(snap(full, cold_start_s=3.0, spill=("cold", "async")),
                  req()).action == Action.SPILL_ASYNC


def test_async_first_still_scales_from_zero():
    d = decide(snap(cold_start_s=0.5, spill=("async", "cold")), req())
    assert d.action == Action.SPILL_ASYNC and d.start_cold
    d = decide(snap(cold_start_s=0.5, spill=("async",)), req())
    assert d.action == Action.SPILL_ASYNC and not d.start_cold   # no cold starts allowed


def test_a_request_too_long_for_its_budget_only_tries_targets_that_do_not_wait():
    s = snap(warm("a", backlog_s=0.01), cold_start_s=0.0)
    r = req(rows=32, budget_s=0.02)                                # 0.042 s alone
    assert decide(replace(s, spill=("cold",)), r).action == Action.SHED
    assert decide(replace(s, spill=("cold", "async")), r).action == Action.SPILL_ASYNC


def test_the_config_accepts_exactly_the_spill_table():
    from floodway.config import SPILL_TARGETS
    from floodway.routers.decide import SPILLS

    assert SPILL_TARGETS == tuple(SPILLS) == ("cold", "async")
    assert {t.action for t in SPILLS.values()} == {Action.SPILL_COLD, Action.SPILL_ASYNC}


def test_queued_async_jobs_keep_no_sync_request_from_an_idle_container():
    # Only low-priority work (job rows) queued: the batcher serves this request first, so
    # the idle container takes it as if nothing were queued.
    jobs_queued = dict(queued=3, queued_rows=96, queued_rows_by_priority=(96, 0, 0),
                       queued_by_priority=(3, 0, 0))
    d = decide(snap(warm("a"), **jobs_queued), req())
    assert d.action == Action.DISPATCH and d.reason == "an idle warm container"
    # A job (low priority itself) still queues behind them.
    assert decide(snap(warm("a"), **jobs_queued), req(priority=0)).action == Action.QUEUE


def test_the_routers_loop_lag_counts_twice_against_the_time_left():
    """A wait that fits the deadline on a punctual router spills once the router's own lag
    (twice: before it read the request and on the answer's way out) takes that time; a lag
    that takes all of it sheds, and says so."""
    busy = warm("a", free=0, backlog_s=1.4)   # fits 2 s x 0.85, not (2 - 2 x 0.2) x 0.85
    assert decide(snap(busy), req(budget_s=2.0)).action == Action.QUEUE
    d = decide(snap(busy, loop_lag_s=0.2), req(budget_s=2.0, allow_async=True))
    assert d.action in (Action.SPILL_COLD, Action.SPILL_ASYNC)
    shed = decide(snap(warm("a"), loop_lag_s=1.1), req(budget_s=2.0))
    assert shed.action == Action.SHED and shed.status == 503
    assert "event-loop lag (1100 ms)" in shed.reason
    late = decide(snap(warm("a")), req(budget_s=-0.1))
    assert late.action == Action.SHED and late.reason == "deadline already passed"
