"""The same state, seen by the local pool, the Modal router and the simulator, gives the same
snapshot and the same `decide()` answers: all three build it with
`floodway.core.snapshot.build_snapshot` from the same estimators.

The state: two warm containers with one 8-row batch in flight each, one container asked for
1 s ago, 6 rows queued in 3 normal-priority requests of one tenant, 12 rows admitted in the
last 5 s, a fitted service time and a measured cold start. Each runtime is put in that state
through its own structures (fake containers and a real batcher; the Modal router's counters;
the simulator's containers and queue); none of them is asked to build a snapshot any other
way than it does when serving.

One difference is by design: Modal serves its input queue in arrival order, so its queued work
counts as ahead of every priority (`QueueLoad.fifo`); the local batcher and the simulator
serve high priority first. Low- and normal-priority requests see the same queue either way,
so their answers must be identical; high priority is not compared.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import numpy as np

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.core.estimators import ServiceEstimator
from floodway.modal.kv import MemoryKV
from floodway.modal.router.backend import ModalBackend
from floodway.modal.stats import BOOT_S
from floodway.routers.batcher import Batcher
from floodway.routers.decide import Action, Request, Snapshot, decide
from floodway.runtime.container import State
from floodway.runtime.endpoint_pool import EndpointPool
from floodway.sim import ColdStartModel, ServiceModel, Trace
from floodway.sim.engine import TENANT, SimConfig, Simulator
from floodway.sim.pool import SimBatch
from tests.unit.modal.router.test_backend import FakeModal
from tests.unit.runtime.fakes import T0, FakeContainer, StepClock

ROUTE = fw.Route(max_inflight_per_container=8, max_queue=32, timeout_s=2.0,
                 spill=("cold", "async"))
WARM = fw.WarmPool(min_containers=2, max_containers=4)
BATCHING = fw.Batching(max_batch_rows=8, wait_ms=5)
COLD_S = BOOT_S + 4.0                    # Modal adds its boot time to what containers measure
QUEUED = (2, 2, 2)                       # rows of each queued request
ARRIVALS = ((-6.0, 50), (-4.5, 4), (-2.0, 2), (-0.5, 6))   # (seconds before now, rows)
RATE = sum(r for t, r in ARRIVALS if t >= -5.0) / 5.0


def fitted():
    est = ServiceEstimator()
    est.extend([(1, 0.026), (4, 0.041), (8, 0.062), (8, 0.060), (2, 0.031)])
    return est


def app() -> fw.App:
    a = fw.App("same")
    a.endpoint(name="embed", model=fw.HFModel("org/model", revision="a" * 40), route=ROUTE,
               warm=WARM, batching=BATCHING)(lambda model, texts: texts)
    return a


def local_snapshot() -> Snapshot:
    async def go() -> Snapshot:
        clock = StepClock()
        ep = EndpointPool(app()["embed"], clock=clock)
        ep.batcher = Batcher("embed", max_batch_rows=8, wait_ms=5, pick=lambda idle: None,
                             clock=clock.monotonic)
        ep.service = fitted()
        ep.cold.record(COLD_S)
        now = clock.monotonic()
        for state, rows in ((State.READY, 8), (State.READY, 8), (State.STARTING, 0)):
            c = FakeContainer("embed", clock)
            c.state = state
            if rows:
                c.inflight[0] = asyncio.get_running_loop().create_future()
                c.inflight_rows[0] = rows
            else:
                c.history = [(now - 1.0, State.STARTING)]
            ep.containers.append(c)
        for t, rows in ARRIVALS:
            ep.batcher.arrivals.record(now + t, rows)
        for i, rows in enumerate(QUEUED):
            ep.batcher.submit(f"r{i}", ["x"] * rows, deadline_s=now + 60, tenant=TENANT)
            ep.batcher.arrivals._arrivals.pop()   # queued above, counted in ARRIVALS
            ep.batcher.arrivals._rows -= rows
        return ep.snapshot(now, WARM.container_cap)
    return asyncio.run(go())


def modal_snapshot() -> Snapshot:
    now = [T0]
    backend = ModalBackend(app(), {"embed": FakeModal().cls()}, stats=MemoryKV(),
                           clock=ManualClock(monotonic_s=now[0]), stats_ttl_s=1e9)
    st = backend._eps["embed"]
    st.tried_at = now[0]                  # stats just read: no refresh from a snapshot
    st.runners, st.inflight_rows = 2, 16
    st.backlog = sum(QUEUED)
    st.request_rows.extend(QUEUED)
    st.inflight[TENANT] = len(QUEUED)
    st.service = fitted()
    st.cold.replace([COLD_S - BOOT_S])
    st.cold_asked.append(now[0] - 1.0)
    for t, rows in ARRIVALS:
        st.arrivals.record(now[0] + t, rows)
    return backend.snapshot("embed")


def sim_snapshot() -> Snapshot:
    cfg = SimConfig(route=ROUTE, warm=WARM, batching=BATCHING, cold=ColdStartModel.of(COLD_S),
                    service=ServiceModel(fitted().fit), fast=False)
    sim = Simulator(Trace.from_times(np.array([0.0]), minutes=1), cfg)
    now = T0
    for rows in (8, 8):
        box = sim.start_box(now, warm_now=True)
        b = SimBatch()
        b.rows = rows
        box.batches.append(b)
    sim.start_box(now - 1.0)
    for i, rows in enumerate(QUEUED):
        sim.queue.append(i)
        sim.queued_rows += rows
    for t, rows in ARRIVALS:
        sim.arrivals.record(now + t, rows)
    return sim.snapshot(now, 0)


def comparable(s: Snapshot) -> Snapshot:
    """Without what names the runtime: container ids, and how the queue's priorities are
    kept (totals stay: every low- or normal-priority request sees all of it ahead)."""
    return replace(s, containers=tuple(replace(c, id="") for c in s.containers),
                   queued_rows_by_priority=None, queued_by_priority=None)


def requests(now_s: float):
    for rows in (1, 3, 8, 20):
        for budget_s in (0.01, 0.05, 0.1, 0.2, 0.5, 2.0, 10.0, 60.0):
            for priority in (0, 1):
                yield Request(rows, now_s + budget_s, priority, TENANT)


def test_local_modal_and_simulator_snapshots_are_the_same():
    snaps = {"local": local_snapshot(), "modal": modal_snapshot(), "sim": sim_snapshot()}
    for name, s in snaps.items():
        assert s.arrival_rows_per_s == RATE > 0, name
        assert (s.queued, s.queued_rows) == (len(QUEUED), sum(QUEUED)), name
        assert sum(s.queued_rows_by_priority[:2]) == 0 or name != "modal"
        assert [c.state for c in s.containers] == ["ready", "ready", "starting"], name
        assert math.isclose(s.containers[2].ready_in_s, COLD_S - 1.0), name
    local = comparable(snaps["local"])
    assert comparable(snaps["modal"]) == local
    assert comparable(snaps["sim"]) == local
    assert snaps["sim"].queued_rows_by_priority == snaps["local"].queued_rows_by_priority


def test_the_same_state_gets_the_same_decisions_everywhere():
    snaps = {"local": local_snapshot(), "modal": modal_snapshot(), "sim": sim_snapshot()}
    seen = set()
    for name in ("modal", "sim"):
        other = snaps[name]
        assert other.now_s == snaps["local"].now_s == T0
        for req in requests(T0):
            mine = decide(snaps["local"], req)
            assert decide(other, req) == mine, (name, req)
            seen.add(mine.action)
    # The grid reaches several outcomes, so the comparison is not of one trivial answer.
    assert {Action.QUEUE, Action.SPILL_ASYNC} <= seen


def test_the_arrival_rate_changes_the_answer():
    """The rate is part of the state compared above: without it a decision differs."""
    s = local_snapshot()
    still = replace(s, arrival_rows_per_s=0.0)
    assert any(decide(s, r) != decide(still, r) for r in requests(s.now_s))

