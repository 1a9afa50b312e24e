"""One endpoint's state: the views the pure functions read, and the snapshot it builds through
the one snapshot builder, checked against the local pool's previous builder."""

from __future__ import annotations

import asyncio

import pytest

import floodway as fw
from floodway.core.estimators import start_remaining_s
from floodway.core.priors import COLD_START_PRIOR_S
from floodway.core.reconcile import Box, Do
from floodway.routers.batcher import Batcher
from floodway.routers.decide import LIVE, ContainerView, Request, Snapshot, decide
from floodway.runtime.container import State
from floodway.runtime.endpoint_pool import EndpointPool
from tests.unit.runtime.fakes import T0, FakeContainer, StepClock, app_with

PIPELINE_DEPTH = 2   # the previous builder's own constant


def previous_snapshot(ep: EndpointPool, now: float, cap: int) -> Snapshot:
    """How the local pool built its snapshot before the one builder (kept as the reference:
    the same state must give the same snapshot, and so the same decisions)."""
    cfg, b = ep.endpoint, ep.batcher
    svc, cold = ep.service.fit, ep.cold.estimate_s()
    starting = [now - c.history[0][0] for c in ep.containers
                if c.state in (State.STARTING, State.WARMING)]
    views = []
    for c in ep.containers:
        backlog = sum(svc.seconds(r) for r in c.inflight_rows.values())
        ready_in = start_remaining_s(cold, now - c.history[0][0]) \
            if c.state in (State.STARTING, State.WARMING) else 0.0
        free = min(c.free_slots, max(0, PIPELINE_DEPTH - len(c.inflight)))
        views.append(ContainerView(str(c.id), str(c.state), free,
                                   min(c.slots, PIPELINE_DEPTH), backlog, ready_in))
    if ep.failures:
        cap = min(cap, sum(1 for v in views if v.state in LIVE))
    cold = max([cold, *starting])
    return Snapshot(now_s=now, containers=tuple(views), service=svc, cold_start_s=cold,
                    max_batch_rows=cfg.batching.max_batch_rows,
                    max_queue=cfg.route.max_queue, max_containers=cap,
                    spill=cfg.route.spill, queued=b.queued, queued_rows=b.queued_rows,
                    tenant_queued=b.tenant_queued(),
                    queued_rows_by_priority=tuple(b.rows_by_priority),
                    queued_by_priority=tuple(b.requests_by_priority),
                    arrival_rows_per_s=b.arrival_rows_per_s(now),
                    batch_wait_s=cfg.batching.wait_ms / 1000.0)


def endpoint_pool(**kw) -> tuple[EndpointPool, StepClock]:
    clock = StepClock()
    kw.setdefault("batching", fw.Batching(max_batch_rows=8, wait_ms=5))
    ep = EndpointPool(app_with(**kw)["embed"], clock=clock)
    ep.batcher = Batcher("embed", max_batch_rows=8, wait_ms=5, pick=ep.pick,
                         clock=clock.monotonic)
    return ep, clock


def add(ep: EndpointPool, clock: StepClock, state: State, *batches: int,
        started_s_ago: float = 0.0) -> FakeContainer:
    c = FakeContainer("embed", clock)
    c.history = [(clock.monotonic() - started_s_ago, State.STARTING)]
    c.state = state
    for i, rows in enumerate(batches):
        c.inflight[i] = asyncio.get_running_loop().create_future()
        c.inflight_rows[i] = rows
    ep.containers.append(c)
    return c


def scenarios():
    """(name, build) pairs: each build fills an endpoint pool with one state."""
    def idle(ep, clock):
        add(ep, clock, State.READY)

    def loaded(ep, clock):
        ep.service.extend([(8, 0.05), (4, 0.03), (1, 0.015)] * 3)
        ep.cold.record(6.0)
        add(ep, clock, State.READY, 3)
        add(ep, clock, State.BUSY, 8, 8)
        add(ep, clock, State.DRAINING, 2)
        ep.batcher.submit("r1", list("abcde"), deadline_s=T0 + 5, tenant="t1")
        ep.batcher.submit("r2", list("xy"), deadline_s=T0 + 5, priority=2, tenant="t2")
        ep.batcher.submit("r3", list("j"), deadline_s=T0 + 50, priority=0, tenant="t1")

    def starting(ep, clock):
        ep.cold.record(4.0)
        add(ep, clock, State.READY, 8)
        add(ep, clock, State.WARMING, started_s_ago=1.5)
        ep.batcher.submit("r1", list("abcdefghij"), deadline_s=T0 + 5)

    def overdue_start(ep, clock):
        ep.cold.record(2.0)
        add(ep, clock, State.STARTING, started_s_ago=3.0)

    def failing(ep, clock):
        add(ep, clock, State.READY, 4)
        add(ep, clock, State.STARTING, started_s_ago=1.0)
        ep.failures = 2

    def prior_only(ep, clock):
        add(ep, clock, State.STARTING, started_s_ago=0.5)

    return [("idle", idle), ("loaded", loaded), ("starting", starting),
            ("overdue_start", overdue_start), ("failing", failing), ("prior", prior_only)]


@pytest.mark.parametrize("name,build", scenarios(), ids=[n for n, _ in scenarios()])
def test_snapshot_is_the_previous_local_snapshot_and_decides_the_same(name, build):
    async def go():
        ep, clock = endpoint_pool(route=fw.Route(max_inflight_per_container=8, max_queue=32,
                                                 spill=("cold", "async")))
        build(ep, clock)
        clock.advance(0.25)
        now = clock.monotonic()
        return ep.snapshot(now, 4), previous_snapshot(ep, now, 4)

    new, old = asyncio.run(go())
    assert new == old
    for rows in (1, 4, 16):
        for budget_s in (0.01, 0.2, 2.0, 20.0, 200.0):
            for priority in (0, 1, 2):
                req = Request(rows, new.now_s + budget_s, priority, "t1")
                assert decide(new, req) == decide(old, req), (rows, budget_s, priority)


def test_snapshot_without_a_batcher_sees_an_empty_queue_and_the_cold_prior():
    clock = StepClock()
    ep = EndpointPool(app_with()["embed"], clock=clock)
    snap = ep.snapshot(clock.monotonic(), 3)
    assert (snap.queued, snap.queued_rows, snap.arrival_rows_per_s) == (0, 0, 0.0)
    assert snap.cold_start_s == COLD_START_PRIOR_S and snap.max_containers == 3


def test_boxes_and_reconcile_use_the_containers_idle_times_and_may_start():
    async def go():
        ep, clock = endpoint_pool(warm=fw.WarmPool(min_containers=1, scaledown_window_s=10))
        a = add(ep, clock, State.READY)
        b = add(ep, clock, State.READY, 2)
        add(ep, clock, State.FAILED).history.insert(1, (T0, State.READY))   # it served
        a.idle_since_s = T0 - 20.0
        boxes = ep.boxes()
        ep.floor = 1
        stop = ep.reconcile(clock.monotonic())
        ep.floor, ep.failures = 3, 1
        blocked = ep.reconcile(clock.monotonic())
        ep.failures = 0
        start = ep.reconcile(clock.monotonic())
        return a, b, boxes, stop, blocked, start

    a, b, boxes, stop, blocked, start = asyncio.run(go())
    assert boxes[:2] == (Box(str(a.id), "ready", False, T0 - 20.0),
                         Box(str(b.id), "ready", True, T0))
    assert [(x.do, x.container) for x in stop.actions] == [(Do.STOP, str(a.id))]
    assert blocked.actions == () and [x.do for x in start.actions] == [Do.START]


def test_pick_prefers_the_least_loaded_and_respects_the_pipeline_depth():
    async def go():
        ep, clock = endpoint_pool()
        full = add(ep, clock, State.READY, 1, 1)
        one = add(ep, clock, State.READY, 1)
        add(ep, clock, State.WARMING)
        picked = ep.pick()
        idle_only = ep.pick(idle_only=True)
        idle = add(ep, clock, State.READY)
        return full, one, idle, picked, idle_only, ep.pick(), ep.pick(idle_only=True), ep

    full, one, idle, picked, idle_only, least, idle_pick, ep = asyncio.run(go())
    assert ep.free(full) == 0 and picked is one and idle_only is None
    assert least is idle and idle_pick is idle


def test_retarget_follows_the_traffic_record_and_keeps_the_buffer_on_top_of_busy():
    async def go():
        ep, clock = endpoint_pool(warm=fw.WarmPool(min_containers=1, buffer_containers=1,
                                                   scaledown_window_s=60))
        idle = ep.retarget(clock.wall(), cap=5)
        ep.traffic.record(clock.wall())
        add(ep, clock, State.BUSY, 3)
        add(ep, clock, State.READY)
        active = ep.retarget(clock.wall(), cap=5)
        floor = ep.floor
        clock.advance(61.0)
        quiet = ep.retarget(clock.wall(), cap=5)
        pinned = ep.retarget(clock.wall(), cap=5, pinned=3)
        return idle, active, floor, quiet, pinned, ep

    idle, active, floor, quiet, pinned, ep = asyncio.run(go())
    assert (idle.min_containers, idle.buffer_containers) == (1, 0)
    assert active.buffer_containers == 1 and floor == 2          # busy 1 + buffer 1
    assert quiet.buffer_containers == 0
    assert pinned.min_containers == 3 and ep.floor == 3


def text_pool() -> tuple[EndpointPool, StepClock]:
    app = fw.App("t")

    @app.endpoint(model=fw.HFModel("org/model", revision="a" * 40),
                  batching=fw.Batching(max_batch_rows=8, wait_ms=5))
    def embed(model, texts: list[str]) -> list[str]:
        return texts

    clock = StepClock()
    return EndpointPool(app.endpoints["embed"], clock=clock), clock


def test_a_text_endpoint_costs_its_batches_in_padded_tokens():
    from floodway.core.priors import TEXT_SERVICE_PRIOR

    async def go():
        ep, clock = text_pool()
        assert ep.service.fit == TEXT_SERVICE_PRIOR
        b = ep.new_batcher(on_batch=lambda r, c: None, on_send=lambda c: None)
        assert (b.cost("abcd" * 40), b.max_batch_tokens) == (42, 8 * 128)
        for rows, longest in ((1, 10), (8, 40), (8, 200), (4, 100)):
            ep.record_batch(rows, 0.01 + 0.0001 * rows * longest, rows * longest)
        assert ep.service.fit.per_token_s == pytest.approx(1e-4, rel=1e-2)
        b.submit("r", ["abcd" * 40, "abcd"], deadline_s=clock.monotonic() + 5)
        snap = ep.snapshot(clock.monotonic(), 4)
        assert snap.max_batch_tokens == 8 * 128
        assert snap.queued_tokens_by_priority == (0, 42 + 3, 0)
        assert snap.row_tokens == pytest.approx((10 + 320 + 1600 + 400) / 21)
    asyncio.run(go())


def test_an_endpoint_not_taking_text_costs_by_rows_alone():
    ep, _ = endpoint_pool()
    assert ep.tokens is None
    ep.record_batch(4, 0.02, 4 * 256)   # tokens of a batch not of text are not counted
    assert ep.service.fit.per_token_s == 0 and ep.service.row_tokens() == 0


def seeded_store(tmp_path, probe_s: float = 0.4):
    """A store whose latest build of "embed" recorded a cold-start probe of `probe_s`."""
    from tests.unit.build.test_starts import fake_build

    return fake_build(tmp_path, cold_start_s=probe_s)


def test_the_cold_start_estimate_comes_from_the_build_before_any_start(tmp_path):
    from floodway.core.estimators import build_start_s

    clock = StepClock()
    ep = EndpointPool(app_with()["embed"], clock=clock, store=seeded_store(tmp_path))
    assert ep.snapshot(clock.monotonic(), 3).cold_start_s == build_start_s(0.4)


def test_measured_starts_are_kept_for_the_next_run(tmp_path):
    store = seeded_store(tmp_path)
    ep = EndpointPool(app_with()["embed"], clock=StepClock(), store=store)
    ep.started(1.25, build="k1")
    ep.started(0.75, build="k1")
    again = EndpointPool(app_with()["embed"], clock=StepClock(), store=store)
    assert again.cold.estimate_s() == 1.25 and again.cold.seeded_from == "earlier starts"


def test_the_first_request_to_a_scaled_to_zero_endpoint_with_a_fast_build_spills_cold(
        tmp_path):
    """With the prior (30 s) a request with a 3 s deadline and no container becomes a job;
    with what the build measured it starts a container and waits for it."""
    from floodway.routers.decide import Action

    app = app_with(warm=fw.WarmPool(min_containers=0, max_containers=2))
    clock = StepClock()
    req = Request(1, clock.monotonic() + 3.0, 0, "t1")
    known = EndpointPool(app["embed"], clock=clock, store=seeded_store(tmp_path))
    assert decide(known.snapshot(clock.monotonic(), 2), req).action == Action.SPILL_COLD
    unknown = EndpointPool(app["embed"], clock=clock)
    assert decide(unknown.snapshot(clock.monotonic(), 2), req).action == Action.SPILL_ASYNC
