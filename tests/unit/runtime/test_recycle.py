"""The recycling decision on made-up measurements: which container, and when it is drained."""

from __future__ import annotations

import pytest

import floodway as fw
from floodway.runtime.recycle import Retiring, Usage, over_limit, pick, step

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
    from floodway.runtime.pool_replace import Growth
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
