"""The one snapshot builder: container loads and the queue -> decide()'s Snapshot."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import floodway as fw
from floodway.core.snapshot import (
    PIPELINE_DEPTH,
    ContainerLoad,
    QueueLoad,
    build_snapshot,
    pipeline_slots,
)
from floodway.routers.decide import Action, Request, ServiceTime, decide
from floodway.sim.engine import SimConfig

SVC = ServiceTime(per_row_s=0.01, per_batch_s=0.02)


def _endpoint(**route):
    """An endpoint's configs (build_snapshot reads only route, batching and warm)."""
    return SimpleNamespace(route=fw.Route(**route),
                           batching=fw.Batching(max_batch_rows=8, wait_ms=4),
                           warm=fw.WarmPool(min_containers=1, max_containers=5))


def test_pipeline_slots_cap_the_router_side_pipe():
    assert pipeline_slots(8) == PIPELINE_DEPTH == 2
    assert pipeline_slots(1) == 1


def test_container_views_carry_backlog_free_slots_and_remaining_start():
    ep = _endpoint()
    snap = build_snapshot(3.0, ep, [
        ContainerLoad("w", "busy", (8, 3), slots=2),
        ContainerLoad("r", "ready", (), slots=2),
        ContainerLoad("s", "starting", slots=2, starting_for_s=1.5),
    ], service=SVC, cold_start_s=4.0, arrival_rows_per_s=2.5)
    w, r, s = snap.containers
    assert (w.free_slots, w.backlog_s) == (0, pytest.approx(SVC.seconds(8) + SVC.seconds(3)))
    assert (r.free_slots, r.backlog_s) == (2, 0.0)
    assert (s.free_slots, s.ready_in_s) == (0, pytest.approx(2.5))
    assert snap.arrival_rows_per_s == 2.5
    assert snap.batch_wait_s == pytest.approx(0.004)
    assert (snap.max_batch_rows, snap.max_containers) == (8, 5)
    assert snap.now_s == 3.0


def test_a_start_running_longer_than_the_estimate_raises_it():
    snap = build_snapshot(0.0, _endpoint(), [ContainerLoad("s", "warming", starting_for_s=9.0)],
                          service=SVC, cold_start_s=4.0)
    assert snap.cold_start_s == 9.0
    assert snap.containers[0].ready_in_s == 9.0


def test_queue_counts_by_priority_and_tenant():
    q = QueueLoad((1, 4, 2), (1, 2, 1), {"a": 3, "b": 1})
    snap = build_snapshot(0.0, _endpoint(), [], q, service=SVC, cold_start_s=1.0)
    assert (snap.queued, snap.queued_rows) == (4, 7)
    assert snap.queued_rows_by_priority == (1, 4, 2)
    assert snap.queued_by_priority == (1, 2, 1)
    assert snap.tenant_queued == {"a": 3, "b": 1}


def test_a_fifo_queue_is_ahead_of_every_priority():
    fifo = QueueLoad.fifo(rows=6, requests=3, tenant_requests={"t": 3})
    ep = _endpoint(max_queue=4)
    snap = build_snapshot(0.0, ep, [ContainerLoad("w", "busy", (8, 8), slots=2)], fifo,
                          service=SVC, cold_start_s=60.0)
    for prio in (0, 1, 2):
        d = decide(snap, Request(rows=1, deadline_s=10.0, priority=prio, tenant="u"))
        # All 6 rows count ahead, whatever the priority: the wait is the same for each.
        assert d.est_wait_s == pytest.approx(
            decide(snap, Request(rows=1, deadline_s=10.0, tenant="u")).est_wait_s)
        assert d.action in (Action.QUEUE, Action.SPILL_ASYNC, Action.SHED)


def test_the_simulator_config_is_an_endpoint_config():
    cfg = SimConfig()
    snap = build_snapshot(0.0, cfg, [], service=SVC, cold_start_s=1.0)
    assert snap.max_batch_rows == cfg.batching.max_batch_rows
    assert snap.spill == cfg.route.spill


def test_tokens_in_flight_and_queued_reach_the_snapshot():
    tok = ServiceTime(per_row_s=0.001, per_batch_s=0.01, per_token_s=0.0002)
    snap = build_snapshot(0.0, _endpoint(), [
        ContainerLoad("known", "busy", (4, 2), slots=2, batch_tokens=(4 * 256, 2 * 10)),
        ContainerLoad("unknown", "busy", (4,), slots=2),
    ], QueueLoad((0, 3, 0), (0, 1, 0), {"t": 1}, tokens_by_priority=(0, 600, 0)),
        service=tok, cold_start_s=4.0, row_tokens=30.0, max_batch_tokens=2048)
    known, unknown = snap.containers
    assert known.backlog_s == pytest.approx(tok.seconds(6, 4 * 256 + 2 * 10) + 0.01)
    assert unknown.backlog_s == pytest.approx(tok.seconds(4, 4 * 30))   # typical rows
    assert snap.queued_tokens_by_priority == (0, 600, 0)
    assert (snap.row_tokens, snap.max_batch_tokens) == (30.0, 2048)
    # A runtime that knows no tokens (Modal, the simulator): costed by rows, as before.
    plain = build_snapshot(0.0, _endpoint(), [ContainerLoad("w", "busy", (4,), slots=2)],
                           QueueLoad((0, 3, 0), (0, 1, 0)), service=SVC, cold_start_s=4.0)
    assert plain.queued_tokens_by_priority is None and plain.max_batch_tokens == 0
    assert plain.containers[0].backlog_s == pytest.approx(SVC.seconds(4))
