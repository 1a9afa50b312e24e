"""Recycling: the decision on made-up measurements (which container, and when it is drained),
and the local pool carrying it out on fake containers with made-up resident memory and a fake
clock: new before old when the floor needs it, in-flight work finished, one at a time,
counted and logged, never a failure."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import floodway as fw
from floodway.runtime.container import State
from floodway.runtime.pool import TICK_S, Pool
from floodway.runtime.recycle import Retiring, Usage, over_limit, pick, step
from tests.unit.runtime.fakes import FakeContainer, StepClock, app_with, settle

RSS = fw.Recycle(max_rss_mib=100)


def u(cid: str, rss: float | None = 50, calls: int = 5, state: str = "ready", busy: bool = False,
      started_s: float = 0.0) -> Usage:
    return Usage(cid, state, rss, calls, busy, started_s)


def test_over_limit_names_the_measure_and_the_limit_and_takes_the_larger_ratio():
    assert over_limit(u("1", rss=100), RSS) is None           # at the limit is within it
    o = over_limit(u("1", rss=150.25), RSS)
    assert o is not None and o.ratio == 1.5025
    assert o.reason == "resident 150.2 MiB > max_rss_mib 100"
    both = fw.Recycle(max_rss_mib=100, max_requests=10)
    o = over_limit(u("1", rss=110, calls=30), both)
    assert o is not None and o.ratio == 3.0 and o.reason == "30 calls >= max_requests 10"
    assert over_limit(u("1", rss=None, calls=9), both) is None  # not measured: no RSS verdict
    assert over_limit(u("1", rss=None, calls=10), both).reason.startswith("10 calls")


def test_pick_takes_the_furthest_past_then_the_oldest_and_only_warm_ones_that_served():
    cs = [u("a", rss=120, started_s=5), u("b", rss=180, started_s=9),
          u("c", rss=500, state="starting"), u("d", rss=900, state="draining"),
          u("e", rss=400, calls=0)]
    assert pick(cs, RSS).container == "b"
    ties = [u("young", rss=150, started_s=9), u("old", rss=150, started_s=1)]
    assert pick(ties, RSS).container == "old"
    assert pick([u("a", rss=99), u("b", rss=None)], RSS) is None
    busy = [u("a", rss=130, state="busy")]
    assert pick(busy, RSS).container == "a"


def test_alone_at_the_floor_a_replacement_first_then_the_drain():
    first = step(None, [u("1", rss=130)], RSS, floor=1)
    assert first.marked.container == "1" and first.drain is None
    assert first.retiring == Retiring("1", 1, "resident 130.0 MiB > max_rss_mib 100")
    # its replacement is starting: it serves on
    waiting = step(first.retiring, [u("1", rss=140), u("2", rss=None, calls=0,
                                                          state="starting")], RSS, floor=1)
    assert waiting.drain is None and waiting.marked is None
    assert waiting.retiring == first.retiring
    done = step(waiting.retiring, [u("1", rss=150), u("2", rss=40, calls=0)], RSS, floor=1)
    assert done.drain == "1" and done.retiring is None


def test_drained_at_once_when_the_others_hold_the_floor():
    cs = [u("1", rss=130), u("2", rss=40)]
    out = step(None, cs, RSS, floor=1)
    assert (out.drain, out.retiring, out.marked.container) == ("1", None, "1")
    # a floor of two needs its replacement first
    out = step(None, cs, RSS, floor=2)
    assert out.drain is None and out.retiring.keep == 2


def test_a_busy_container_has_its_work_go_somewhere_even_at_floor_zero():
    idle = step(None, [u("1", rss=130)], RSS, floor=0)
    assert idle.drain == "1"                      # nothing asked for: it just leaves
    busy = step(None, [u("1", rss=130, state="busy", busy=True)], RSS, floor=0)
    assert busy.drain is None and busy.retiring.keep == 1


def test_one_recycle_at_a_time_and_a_marked_one_that_exited_ends_it():
    both = [u("1", rss=130), u("2", rss=170)]
    out = step(None, both, RSS, floor=2)
    assert out.retiring.id == "2" and out.drain is None
    # while "2" waits for its replacement, "1" (also over) is not marked
    later = step(out.retiring, [*both, u("3", rss=None, calls=0, state="starting")], RSS, 2)
    assert later.retiring.id == "2" and later.marked is None
    gone = step(out.retiring, [u("1", rss=130), u("2", rss=170, state="failed")], RSS, 2)
    assert gone.marked.container == "1" and gone.retiring.id == "1"


def test_a_limit_below_a_fresh_worker_is_reported_not_acted_on():
    out = step(None, [u("1", rss=300, calls=0)], RSS, floor=1)
    assert out.retiring is None and out.drain is None and out.marked is None
    assert out.too_big.container == "1" and "300.0 MiB" in out.too_big.reason


def test_requests_alone_count_calls():
    limits = fw.Recycle(max_requests=100)
    assert step(None, [u("1", rss=9999, calls=99)], limits, 1).marked is None
    out = step(None, [u("1", rss=None, calls=100), u("2", calls=3)], limits, 1)
    assert out.drain == "1" and out.marked.reason == "100 calls >= max_requests 100"


def test_a_container_growing_toward_its_limit_is_recycled_a_cold_start_early():
    from floodway.runtime.recycle import Growth
    limits = fw.Recycle(max_rss_mib=100)
    g = Growth()
    for t, mib in ((0.0, 60.0), (0.5, 65.0), (1.0, 70.0)):   # 10 MiB/s
        per_s = g.add(t, mib)
    assert per_s == pytest.approx(10.0)
    steady = Usage("1", "ready", rss_mib=70.0, calls=3, rss_ahead_mib=70.0 + per_s * 2.0)
    fast = Usage("1", "ready", rss_mib=70.0, calls=3, rss_ahead_mib=70.0 + per_s * 4.0)
    assert over_limit(steady, limits) is None            # 90 MiB when a replacement is ready
    over = over_limit(fast, limits)                      # 110 MiB by then: go now
    assert over is not None and "before a replacement could be ready" in over.reason
    assert g.add(1.6, 50.0) >= 0.0                       # freed memory: no negative rate


LIMIT = fw.Recycle(max_rss_mib=100)


class Fake(FakeContainer):
    """A FakeContainer whose stop drains as a real one does: no new work, then its
    in-flight batches finish, then it stops."""

    async def stop(self, grace_s: float = 10.0) -> None:
        if self.state in (State.STOPPED, State.FAILED):
            return
        if self.state != State.DRAINING:
            self._to(State.DRAINING)
        pending = [f for f in self.inflight.values() if not f.done()]
        if pending:
            await asyncio.wait(pending)
        self._to(State.STOPPED)
        self._ready.set()
        self._exited.set()


async def one_ready(app: fw.App, tmp_path, rss_mib: float | None = None
                    ) -> tuple[Pool, StepClock, Fake]:
    """A started pool whose one container is ready (at `rss_mib` resident, where given)."""
    pool, clock = make_pool(app, tmp_path)
    await pool.start()
    (c,) = pool.containers["embed"]
    c.become_ready()
    if rss_mib is not None:
        c.rss_mib = rss_mib
    await settle()
    return pool, clock, c


def make_pool(app: fw.App, tmp_path) -> tuple[Pool, StepClock]:
    clock = StepClock()
    pool = Pool(app, "app.py", str(tmp_path), clock=clock,
                make_container=lambda ep: Fake(ep, clock), tick_s=None)
    pool.machine_cap = 8
    pool.recycler.rss_of = lambda c: c.rss_mib
    return pool, clock


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def states(pool: Pool, name: str = "embed") -> list[str]:
    return [str(c.state) for c in pool.containers[name]]


def warm(pool: Pool, name: str = "embed") -> int:
    return sum(1 for c in pool.containers[name] if c.state in (State.READY, State.BUSY))


async def serve_one(pool: Pool, text: str, name: str = "embed") -> tuple[Any, Fake]:
    """A request of one input through the pool, answered by whichever container got it."""
    pending = pool.enqueue(name, [text], timeout_s=5.0)
    pool.clock.advance(0.01)                   # past the batch wait
    pool.endpoints[name].batcher.notify()
    await settle()
    c = next(c for c in pool.containers[name]
             if c.inflight and [v for _, v in getattr(c, "items", ())] == [text])
    c.answer(next(reversed(c.inflight)), {item_id: item.upper() for item_id, item in c.items})
    return (await pending)[0], c


def test_alone_at_its_floor_a_container_is_replaced_new_before_old(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="floodway.pool")

    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), recycle=LIMIT)
        pool, clock, old = await one_ready(app, tmp_path)
        assert await serve_one(pool, "a") == ("A", old)
        seen = {"warm": [warm(pool)]}
        old.rss_mib = 130.0
        pool.tick(clock.advance(TICK_S))          # past its limit: a replacement starts
        seen["marked"] = states(pool)
        new = pool.containers["embed"][1]
        pool.tick(clock.advance(TICK_S))          # still starting: the old one serves on
        seen["warm"].append(warm(pool))
        seen["served_while_waiting"] = await serve_one(pool, "b")
        new.become_ready()                        # ready: the old one drains at once,
        await settle()                            # not at the next tick
        seen["after"] = states(pool)
        seen["served_after"] = await serve_one(pool, "c")
        seen["warm"].append(warm(pool))
        ep = pool.endpoints["embed"]
        seen["events"], seen["failures"] = dict(ep.events), ep.failures
        seen["recycling"] = ep.recycling
        pool.tick(clock.advance(TICK_S))          # settled: nothing more starts or stops
        seen["settled"] = states(pool)
        await pool.stop()
        return seen, old, new

    seen, old, new = run(go())
    assert seen["marked"] == ["ready", "starting"]
    assert seen["served_while_waiting"] == ("B", old)
    assert seen["after"] == ["ready"] and old.state == State.STOPPED
    assert [s for _, s in old.history][-2:] == [State.DRAINING, State.STOPPED]
    assert seen["served_after"] == ("C", new)
    assert seen["warm"] == [1, 1, 1]                      # the floor held throughout
    assert seen["events"] == {"start": 2, "recycled": 1}  # no "failed", no backoff
    assert seen["failures"] == 0 and seen["recycling"] is None
    assert seen["settled"] == ["ready"]
    logged = caplog.text
    assert f"container {old.id} of embed: resident 130.0 MiB > max_rss_mib 100" in logged
    assert "a replacement warms first" in logged
    assert f"container {old.id} of embed recycled: drained (resident 130.0 MiB, " \
           "max_rss_mib 100" in logged


def test_in_flight_work_finishes_on_the_recycled_container(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), recycle=LIMIT)
        pool, clock, old = await one_ready(app, tmp_path)
        await serve_one(pool, "warm")
        pending = pool.enqueue("embed", ["slow"], timeout_s=5.0)
        clock.advance(0.01)
        pool.endpoints["embed"].batcher.notify()
        await settle()
        (batch_id,) = old.inflight                # busy when it goes past its limit
        old.rss_mib = 150.0
        pool.tick(clock.advance(TICK_S))
        new = pool.containers["embed"][1]
        new.become_ready()
        await settle()
        pool.tick(clock.advance(TICK_S))
        await settle()
        draining = (str(old.state), len(old.inflight))
        later = await serve_one(pool, "next")     # new work goes to the new one
        old.answer(batch_id, {iid: "SLOW" for iid, _ in old.items})
        result = await pending
        await settle()
        final = str(old.state)
        await pool.stop()
        return draining, later, result, final, new, dict(pool.event_counts["embed"])

    draining, later, result, final, new, events = run(go())
    assert draining == ("draining", 1)
    assert later == ("NEXT", new)
    assert result == ["SLOW"] and final == "stopped"
    assert events == {"start": 2, "recycled": 1}


def test_the_pool_drains_at_once_when_the_others_hold_the_floor(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), recycle=LIMIT)
        pool, clock = make_pool(app, tmp_path)
        await pool.start()
        assert pool.start_cold("embed")
        a, b = pool.containers["embed"]
        for c in (a, b):
            c.become_ready()
        await settle()
        _, served_by = await serve_one(pool, "x")
        served_by.rss_mib = 120.0
        pool.tick(clock.advance(TICK_S))
        await settle()
        out = (states(pool), dict(pool.event_counts["embed"]))
        await pool.stop()
        return out, served_by

    (after, events), victim = run(go())
    assert after == ["ready"] and victim.state == State.STOPPED
    assert events == {"start": 2, "recycled": 1}          # no replacement was needed


def test_one_recycle_at_a_time_the_furthest_past_first(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=2), recycle=LIMIT)
        pool, clock = make_pool(app, tmp_path)
        await pool.start()
        a, b = pool.containers["embed"]
        for c in (a, b):
            c.become_ready()
            c.batches_done = 3
        await settle()
        a.rss_mib, b.rss_mib = 120.0, 190.0
        pool.tick(clock.advance(TICK_S))
        first = (pool.endpoints["embed"].recycling.id, len(pool.containers["embed"]))
        pool.tick(clock.advance(TICK_S))          # b still waits: a is not marked too
        again = (pool.endpoints["embed"].recycling.id, len(pool.containers["embed"]))
        pool.containers["embed"][2].become_ready()
        await settle()                            # b drained; a waits for the next tick
        mid = (states(pool), warm(pool), pool.endpoints["embed"].recycling)
        pool.tick(clock.advance(TICK_S))          # now a: floor 2 needs a replacement
        await settle()
        last = (pool.endpoints["embed"].recycling.id, states(pool))
        pool.containers["embed"][-1].become_ready()
        await settle()
        out = first, again, mid, last, states(pool), dict(pool.event_counts["embed"])
        await pool.stop()
        return out, a, b

    (first, again, mid, last, final, events), a, b = run(go())
    assert first == (str(b.id), 3) and again == (str(b.id), 3)
    assert mid == (["ready", "ready"], 2, None)
    assert last == (str(a.id), ["ready", "ready", "starting"])
    assert final == ["ready", "ready"] and a.state == b.state == State.STOPPED
    assert events == {"start": 4, "recycled": 2}


def test_max_requests_recycles_by_calls_and_the_cap_is_passed_by_one_meanwhile(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1, max_containers=1),
                       recycle=fw.Recycle(max_requests=2))
        pool, clock, old = await one_ready(app, tmp_path)
        await serve_one(pool, "a")
        pool.tick(clock.advance(TICK_S))
        one_call = len(pool.containers["embed"])
        await serve_one(pool, "b")
        pool.tick(clock.advance(TICK_S))          # 2 calls: replaced, one above the cap
        surge = len(pool.containers["embed"])
        pool.containers["embed"][1].become_ready()
        await settle()
        pool.tick(clock.advance(TICK_S))
        await settle()
        out = one_call, surge, states(pool), dict(pool.event_counts["embed"])
        await pool.stop()
        return out

    one_call, surge, after, events = run(go())
    assert (one_call, surge, after) == (1, 2, ["ready"])
    assert events == {"start": 2, "recycled": 1}


def test_no_replacement_while_starts_fail_so_the_old_one_serves_on(tmp_path):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), recycle=LIMIT)
        pool, clock, old = await one_ready(app, tmp_path)
        await serve_one(pool, "a")
        old.rss_mib = 140.0
        pool.tick(clock.advance(TICK_S))
        pool.containers["embed"][1].fail_start()  # the replacement cannot start
        await settle()
        pool.tick(clock.advance(TICK_S))          # backing off: the old one keeps serving
        out = (states(pool), await serve_one(pool, "b"), pool.endpoints["embed"].failures)
        await pool.stop()
        return out, old

    (after, served, failures), old = run(go())
    assert after == ["ready"] and served == ("B", old) and failures == 1


def test_a_limit_below_a_fresh_worker_is_warned_once_and_nothing_is_drained(tmp_path, caplog):
    async def go():
        app = app_with(warm=fw.WarmPool(min_containers=1), recycle=LIMIT)
        pool, clock, c = await one_ready(app, tmp_path, rss_mib=400.0)   # before any call
        for _ in range(3):
            pool.tick(clock.advance(TICK_S))
        out = states(pool), dict(pool.event_counts["embed"])
        await pool.stop()
        return out

    after, events = run(go())
    assert after == ["ready"] and events == {"start": 1}
    warnings = [r for r in caplog.records if "raise max_rss_mib" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_an_endpoint_without_limits_is_never_measured(tmp_path):
    async def go():
        pool, clock = make_pool(app_with(warm=fw.WarmPool(min_containers=1)), tmp_path)

        def measure(c):
            raise AssertionError("measured an endpoint without fw.Recycle")
        pool.recycler.rss_of = measure
        await pool.start()
        (c,) = pool.containers["embed"]
        c.become_ready()
        c.rss_mib = 10_000.0
        await settle()
        pool.tick(clock.advance(TICK_S))
        out = states(pool)
        await pool.stop()
        return out

    assert run(go()) == ["ready"]


def test_rss_of_a_real_process_reads_its_resident_memory():
    import mmap
    import os

    from floodway.runtime.recycle import container_rss_mib, rss_mib

    class WithPid:
        pid = os.getpid()

    mine = rss_mib(os.getpid())
    if mine is None:                 # no /proc on this system: nothing is measured
        assert container_rss_mib(WithPid()) is None
        return
    before = mine
    # 64 MiB of fresh anonymous pages, each written: resident. (A plain allocation could be
    # served from memory this long-lived process freed earlier, already resident.)
    ballast = mmap.mmap(-1, 64 << 20)
    for offset in range(0, len(ballast), mmap.PAGESIZE):
        ballast[offset] = 1
    grown = container_rss_mib(WithPid())
    assert grown is not None and grown - before > 48, (before, grown)
    ballast.close()
    assert rss_mib(None) is None and rss_mib(2 ** 30) is None   # no such process
