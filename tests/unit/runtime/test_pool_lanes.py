"""A job backlog counts as warm-pool demand on the lane that will run it: the store's
backlog on the last lane (which takes every request), each lane's own queued job rows on
itself; a plain endpoint keeps its whole backlog."""

from __future__ import annotations

from types import SimpleNamespace

from floodway.runtime.pool_lanes import job_backlog


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
