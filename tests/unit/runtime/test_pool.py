"""The local pool carrying out reconcile, health and rollout, on fake containers and a fake
clock (no processes, no waiting on the real clock); a job backlog counted as warm-pool demand
on the lane that will run it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import floodway as fw
from floodway.core.estimators import start_remaining_s
from floodway.errors import Unavailable
from floodway.runtime import health
from floodway.runtime.container import State
from floodway.runtime.pool import BUILD_CHECK_S, Pool, job_backlog
from tests.unit.runtime.fakes import T0, FakeContainer, StepClock, app_with, settle


def make_pool(app: fw.App, tmp_path, *, containers: int | None = None,
              builds: dict[str, str | None] | None = None) -> tuple[Pool, StepClock]:
    clock = StepClock()
    pool = Pool(app, "app.py", str(tmp_path), containers=containers, clock=clock,
                make_container=lambda ep: FakeContainer(ep, clock), tick_s=None)
    pool.machine_cap = 8          # whatever this machine's cores
    if builds is not None:
        pool._build_of = lambda ep: builds.get(ep)
    return pool, clock


def run(coro):
    # The timeout only guards against a hung test; nothing waits on it.
    return asyncio.run(asyncio.wait_for(coro, 10))


def starting(pool: Pool, name: str = "embed") -> list[FakeContainer]:
    return [c for c in pool.containers[name] if c.state == State.STARTING]


def test_start_brings_up_the_floor_and_a_tick_adds_nothing_more(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=2)), tmp_path)
        await pool.start()
        first = len(pool.containers["embed"])
        pool.tick(clock.advance(1.0))          # both still starting: live == floor
        second = len(pool.containers["embed"])
        ready = pool.readiness()["ready"]
        for c in pool.containers["embed"]:
            c.become_ready(2.5)
        await settle()
        detail = pool.readiness()
        await pool.stop()
        return first, second, ready, detail, pool

    first, second, ready, detail, pool = run(go())
    assert (first, second, ready) == (2, 2, False)
    assert detail["ready"] is True and detail["container_events"]["embed"] == {"start": 2}
    assert detail["warm_targets"]["embed"]["min_containers"] == 2
    ep = pool.endpoints["embed"]
    assert ep.cold.estimate_s() == 2.5 and ep.measured().cold_start_s == 2.5


def test_idle_containers_past_the_scaledown_window_are_drained_longest_idle_first(tmp_path):
    async def go():
        warm = fw.WarmPool(min_containers=1, scaledown_window_s=30)
        pool, clock = make_pool(app_with(warm=warm), tmp_path)
        await pool.start()
        assert pool.start_cold("embed")         # a second one, above the floor
        a, b = pool.containers["embed"]
        b.become_ready()
        clock.advance(5.0)
        a.become_ready()                         # b has been idle longer
        await settle()
        pool.tick(T0 + 29.0)
        before = [str(c.state) for c in (a, b)]
        pool.tick(clock.advance(30.0))
        await settle()
        after = [str(c.state) for c in (a, b)]
        pool.tick(clock.advance(60.0))           # at the floor: the last one stays
        await settle()
        events, final = dict(pool.event_counts["embed"]), a.state
        await pool.stop()
        return before, after, final, events

    before, after, a_state, events = run(go())
    assert before == ["ready", "ready"]
    assert after == ["ready", "stopped"]
    assert a_state == State.READY and events == {"start": 2, "scale_down": 1}


def test_failing_starts_back_off_and_block_other_starts(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.fail_start()
        await settle()
        ep = pool.endpoints["embed"]
        seen = (ep.failures, ep.replacing, ep.may_start, pool.start_cold("embed"),
                pool.snapshot("embed").max_containers)
        pool.tick(clock.advance(1.0))            # waiting out the backoff: no start
        seen += (len(pool.containers["embed"]),)
        await pool.stop()
        return seen

    failures, replacing, may_start, cold, cap, n = run(go())
    assert (failures, replacing, may_start, cold) == (1, 1, False, False)
    assert cap == 0 and n == 0                  # no cold spills onto a failing build


def test_no_start_between_a_containers_failure_and_the_handling_of_its_exit(tmp_path):
    # A worker reports its load failed, then its process takes a moment to exit: a tick in
    # between must not start a replacement at once, skipping the backoff.
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.error = "ValueError: boom"
        c._to(State.FAILED)                      # failed, not exited yet
        pool.tick(clock.advance(0.5))
        during = len(pool.containers["embed"])
        c._ready.set()                           # the process exits
        c._exited.set()
        await settle()
        after = len(pool.containers["embed"]), pool.endpoints["embed"].replacing
        await pool.stop()
        return during, after

    during, after = run(go())
    assert during == 1                            # only the failed one: nothing started
    assert after == (0, 1)                        # its replacement waits out the backoff


def test_a_failed_start_is_replaced_after_its_backoff_and_a_ready_one_resets_it(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)
        await pool.start()
        pool.containers["embed"][0].fail_start()
        await settle()
        clock.advance(health.BACKOFF_S[0] - 0.01)
        await settle()
        waiting = len(pool.containers["embed"])
        clock.advance(0.01)
        await settle()
        (replacement,) = pool.containers["embed"]
        failures = pool.endpoints["embed"].failures
        replacement.fail_start()                  # the second failure waits longer
        await settle()
        clock.advance(health.BACKOFF_S[1] - 0.01)
        await settle()
        waiting += len(pool.containers["embed"])
        clock.advance(0.01)
        await settle()
        (third,) = pool.containers["embed"]
        third.become_ready()
        await settle()
        out = (waiting, failures, pool.endpoints["embed"].failures,
               dict(pool.event_counts["embed"]))
        await pool.stop()
        return out

    assert run(go()) == (0, 1, 0, {"start": 3, "failed": 2})


def test_a_batch_sent_to_a_container_starts_the_buffer_at_once(tmp_path):
    async def go():
        warm = fw.WarmPool(min_containers=1, buffer_containers=1, max_containers=3)
        pool, clock = make_pool(app_with(warm=warm), tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        pool.record_arrival("embed")             # the endpoint is active: a buffer is due
        pool.tick(clock.advance(0.5))
        floor = pool.endpoints["embed"].floor    # max(min 1, busy 0 + buffer 1)
        pending = pool.enqueue("embed", ["a"], timeout_s=5)
        clock.advance(0.01)                      # past the batch wait
        pool.endpoints["embed"].batcher.notify()
        await settle()
        n = len(pool.containers["embed"])        # busy 1 + buffer 1, before any tick
        (batch_id,) = c.inflight
        c.answer(batch_id, {f"{c.items[0][0]}": "A"})
        out = await pending
        await pool.stop()
        return floor, n, out

    assert run(go()) == (1, 2, ["A"])


def test_pinned_pool_never_adds_a_buffer(tmp_path):
    async def go():
        warm = fw.WarmPool(min_containers=1, buffer_containers=1, max_containers=3)
        pool, clock = make_pool(app_with(warm=warm), tmp_path, containers=1)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        pool.record_arrival("embed")
        pool.tick(clock.advance(0.5))
        pool.enqueue("embed", ["a"], timeout_s=5)
        clock.advance(0.01)
        pool.endpoints["embed"].batcher.notify()
        await settle()
        n = len(pool.containers["embed"])
        await pool.stop()
        return n, pool.readiness()["warm_targets"]["embed"]["reason"]

    assert run(go()) == (1, "pinned to 1 (--containers)")


def test_a_stuck_container_is_killed_and_replaced_in_the_same_tick(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), route=fw.Route(stuck_after_s=5))
        pool, clock = make_pool(app, tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        c.submit([("r1:0", "a")])
        pool.tick(clock.advance(5.0))            # not past stuck_after_s yet
        alive = c.state
        pool.tick(clock.advance(0.5))
        await settle()
        out = alive, c.state, c.error, dict(pool.event_counts["embed"]), \
            len(pool.containers["embed"])
        await pool.stop()
        return out

    alive, state, error, events, n = run(go())
    assert alive == State.READY and state == State.FAILED and error.startswith("stuck: 1 ")
    assert events == {"start": 2, "stuck": 1, "failed": 1} and n == 1


def test_an_endpoint_whose_starts_keep_failing_refuses_requests_with_its_load_error(
        tmp_path):
    from floodway.errors import StartFailing

    boom = "RuntimeError: load() raised: no such file 'weights.bin'"

    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)
        await pool.start()
        for i in range(health.FAILING_STARTS):
            seen = pool.snapshot("embed")          # not failing yet: a start follows
            pool.containers["embed"][0].fail_start(boom)
            await settle()
            clock.advance(health.BACKOFF_S[i])
            await settle()
        with pytest.raises(StartFailing) as refused:
            pool.snapshot("embed")
        detail = pool.readiness()
        pool.containers["embed"][0].become_ready()   # the next start loads: it is over
        await settle()
        after = pool.snapshot("embed"), pool.failing("embed"), pool.readiness()["ready"]
        await pool.stop()
        return seen, refused.value, detail, after

    seen, refused, detail, (snap, failing, ready) = run(go())
    assert seen.max_containers == 1             # before: the start under way counts
    assert isinstance(refused, Unavailable) and refused.retry_after_s >= 1.0
    assert str(refused) == (f"endpoint 'embed' cannot start: its last 3 container start(s) "
                            f"in a row failed; the last: {boom}")
    assert detail["ready"] is False and detail["failures"]["embed"]["failing"] == str(refused)
    assert snap.max_containers >= 1 and failing is None and ready is True


def test_a_scaled_to_zero_endpoint_whose_start_failed_retries_on_a_request_after_backoff(
        tmp_path):
    from floodway.errors import StartFailing

    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=0)), tmp_path)
        await pool.start()
        assert pool.start_cold("embed")            # a first request starts one
        pool.containers["embed"][0].fail_start("ValueError: boom")
        await settle()
        with pytest.raises(StartFailing):          # none follows by itself: failing
            pool.snapshot("embed")
        waiting = len(pool.containers["embed"])
        ready_then = pool.readiness()["ready"]
        clock.advance(health.BACKOFF_S[0])
        snap = pool.snapshot("embed")              # past the backoff: a request retries
        retried = len(pool.containers["embed"])
        await pool.stop()
        return waiting, ready_then, snap, retried

    waiting, ready_then, snap, retried = run(go())
    assert (waiting, ready_then, retried) == (0, False, 1)
    assert snap.max_containers == 1                 # the retry, starting


def test_a_container_that_never_becomes_ready_is_killed_as_a_failed_start(tmp_path):
    """A load hook that hangs: the container is killed `start_timeout_s` after its start,
    and the failed start makes the next one back off."""
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), route=fw.Route(start_timeout_s=30))
        pool, clock = make_pool(app, tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        pool.tick(clock.advance(30.0))           # not past start_timeout_s yet
        alive = c.state
        pool.tick(clock.advance(0.5))
        await settle()
        out = alive, c.state, c.error, pool.readiness()["failures"]["embed"]
        await pool.stop()
        return out

    alive, state, error, failures = run(go())
    assert alive == State.STARTING and state == State.FAILED
    assert error == "not ready 30s after its start (start_timeout_s=30)"
    # In /readyz; not failing: a start follows (one failed start says little).
    assert failures == {"failed_starts_in_a_row": 1, "last_error": error, "failing": None}


def test_a_silent_idle_container_is_pinged_then_killed(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        c.silent = True
        pool.tick(clock.advance(health.PING_EVERY_S))
        pinged = c.pings
        pool.tick(clock.advance(health.PING_TIMEOUT_S))   # not past the timeout yet
        alive = c.state
        pool.tick(clock.advance(0.5))
        out = pinged, alive, c.state, pool.event_counts["embed"]["stuck"]
        await pool.stop()
        return out

    assert run(go()) == (1, State.READY, State.FAILED, 1)


def test_a_new_build_warms_new_containers_before_draining_the_old(tmp_path):
    async def go():
        builds = {"embed": "b1"}
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=2)), tmp_path,
                                builds=builds)
        await pool.start()
        old = list(pool.containers["embed"])
        for c in old:
            c.become_ready()
        pool.tick(clock.advance(1.0))
        builds["embed"] = "b2"
        pool.tick(clock.advance(BUILD_CHECK_S))
        new = [c for c in pool.containers["embed"] if c.build == "b2"]
        pool.tick(clock.advance(0.5))            # the new ones count while starting
        steps = [len(new), len(pool.containers["embed"])]
        new[0].become_ready()
        pool.tick(clock.advance(0.5))
        await settle()
        steps.append([str(c.state) for c in old])
        new[1].become_ready()
        pool.tick(clock.advance(0.5))
        await settle()
        steps.append([str(c.state) for c in old])
        events = dict(pool.event_counts["embed"])
        await pool.stop()
        return steps, events

    steps, events = run(go())
    assert steps == [2, 4, ["ready", "ready"], ["stopped", "stopped"]]
    assert events == {"start": 4, "rolled": 2}


def test_enqueue_before_start_is_unavailable_and_run_returns_outputs(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(batching=fw.Batching(max_batch_rows=4, wait_ms=0)),
                                tmp_path, containers=1)
        with pytest.raises(Unavailable):
            pool.enqueue("embed", ["a"], timeout_s=1)
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        seen: list[tuple[str, int, float, int, float]] = []
        pool.add_batch_listener(lambda *a: seen.append(a))
        work = asyncio.ensure_future(pool.enqueue("embed", ["a", "b"], timeout_s=5))
        await settle()
        (batch_id,) = c.inflight
        c.answer(batch_id, {i: v.upper() for i, v in c.items})
        out = await work
        fit = pool.endpoints["embed"].service.samples
        await pool.stop()
        return out, seen, list(fit)

    out, seen, fit = run(go())
    assert out == ["A", "B"] and seen == [("embed", 2, 0.01, 0, 0.02)]
    assert fit == [(2, 0.02)]                    # the router-side service time is fitted


def test_pending_tells_when_its_inputs_left_the_queue(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(batching=fw.Batching(max_batch_rows=4, wait_ms=0)),
                                tmp_path, containers=1)
        await pool.start()
        pending = pool.enqueue("embed", ["a"], timeout_s=5, tenant="t1")
        queued = pool.snapshot("embed")
        before = pending.dispatched()
        (c,) = pool.containers["embed"]
        c.become_ready()
        await settle()
        after = pending.dispatched()
        adopted = pending.adopt()
        (batch_id,) = c.inflight
        c.answer(batch_id, {i: v.upper() for i, v in c.items})
        out = await adopted
        await pool.stop()
        return queued, before, after, out

    queued, before, after, out = run(go())
    assert queued.queued == 1 and queued.tenant_queued == {"t1": 1}
    assert (before, after, out) == (False, True, ["A"])


def test_a_start_within_the_measured_cold_start_has_the_rest_to_go():
    assert start_remaining_s(2.0, 0.5) == 1.5


def test_an_overdue_start_is_never_counted_as_ready_now():
    # Measured 0.7 s (an idle machine); this start has taken 1.0 s and is still going.
    assert start_remaining_s(0.7, 1.0) == 1.0
    assert start_remaining_s(0.7, 0.7) > 0


def test_adopted_work_still_queued_outlives_the_clients_deadline(tmp_path):
    """A job that adopts a request must get every input's result: none is dropped at the
    client's deadline (the job would run it a second time)."""
    async def go():
        pool, clock = make_pool(app_with(batching=fw.Batching(max_batch_rows=1, wait_ms=0),
                                         route=fw.Route(max_inflight_per_container=1)),
                                tmp_path, containers=1)
        await pool.start()
        pending = pool.enqueue("embed", ["a", "b"], timeout_s=1)
        (c,) = pool.containers["embed"]
        c.become_ready()
        await settle()
        adopted = pending.adopt()              # "a" is on the container, "b" still queued
        assert len(c.inflight) == 1 and pending.dispatched()
        pool.tick(clock.advance(5.0))          # well past the client's 1 s deadline
        await settle()
        dropped = dict(pool.endpoints["embed"].batcher.dropped)
        for _ in range(2):
            (batch_id,) = c.inflight
            c.answer(batch_id, {i: v.upper() for i, v in c.items})
            await settle()
        out = await adopted
        await pool.stop()
        return dropped, out

    dropped, out = run(go())
    assert dropped == {} and out == ["A", "B"]


def test_a_pinned_pool_spills_no_further_than_the_cores_or_the_pin(tmp_path):
    pool, _ = make_pool(app_with(warm=fw.WarmPool(max_containers=8)), tmp_path, containers=2)
    pool.machine_cap = 1
    assert pool.cap("embed") == 2
    pool.machine_cap = 4
    assert pool.cap("embed") == 4
    free, _ = make_pool(app_with(warm=fw.WarmPool(max_containers=8)), tmp_path)
    free.machine_cap = 3
    assert free.cap("embed") == 3


# A job backlog counts as warm-pool demand on the lane that will run it: the store's backlog
# on the last lane (which takes every request), each lane's own queued job rows on itself; a
# plain endpoint keeps its whole backlog.
def unit(key: str, low_rows: int) -> SimpleNamespace:
    return SimpleNamespace(name=key, batcher=SimpleNamespace(rows_by_priority=[low_rows, 3, 0]))


def test_the_store_backlog_goes_to_the_last_lane_and_queued_rows_to_their_own():
    eps = {"echo:short": unit("echo:short", 2), "echo:long": unit("echo:long", 5),
           "plain": unit("plain", 7)}
    rows = {"echo": 40, "plain": 9}
    assert job_backlog(eps, eps["echo:short"], rows) == 2
    assert job_backlog(eps, eps["echo:long"], rows) == 5 + 40
    assert job_backlog(eps, eps["plain"], rows) == 9
    assert job_backlog(eps, eps["echo:short"], {}) == 2
