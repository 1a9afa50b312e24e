"""TrafficHistory: per-minute aggregation in memory, SQLite roundtrip, retention, reopen,
threads."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from floodway.warmers.history import TrafficHistory
from floodway.warmers.target import History

M = 60.0
T0 = 1_700_000_040.0  # the start of an epoch minute
T0_MIN = int(T0 // 60)


def stored_rows(path: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT endpoint, minute, count FROM arrivals"))


def test_roundtrip_and_minute_aggregation(tmp_path: Path) -> None:
    path = tmp_path / "traffic.sqlite"
    store = TrafficHistory(path)
    for dt in (0.0, 10.0, 59.9):
        store.record("embed", T0 + dt)
    store.record("rerank", T0 + 5, n=3)
    # The minute is still open: nothing written yet, but history sees it.
    assert stored_rows(path) == []
    h = store.history("embed", T0 + 30, minutes=3)
    assert isinstance(h, History) and h.start_minute == T0_MIN - 2
    assert list(h.counts) == [0, 0, 3]
    # The first record of a later minute writes the finished one: one row per endpoint.
    store.record("embed", T0 + M + 1)
    assert stored_rows(path) == [("embed", T0_MIN, 3), ("rerank", T0_MIN, 3)]
    h = store.history("embed", T0 + 2 * M, minutes=4)
    assert list(h.counts) == [0, 3, 1, 0]
    assert store.endpoints() == ["embed", "rerank"]
    store.close()


def test_flush_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "traffic.sqlite"
    with TrafficHistory(path) as store:
        store.record("embed", T0, n=2)
        store.record("embed", T0 + 3 * M)
        store.flush(T0 + 3 * M)
        assert stored_rows(path) == [("embed", T0_MIN, 2), ("embed", T0_MIN + 3, 1)]
        store.record("embed", T0 + 3 * M + 1)  # pending again at close
    with TrafficHistory(path) as again:
        assert list(again.history("embed", T0 + 3 * M, 4).counts) == [2, 0, 0, 2]
        again.record("embed", T0 + 3 * M + 2)  # adds to the stored row
        assert list(again.history("embed", T0 + 3 * M, 1).counts) == [3]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_retention_prune(tmp_path: Path) -> None:
    store = TrafficHistory(tmp_path / "t.sqlite", retention_days=14)
    day = 86400.0
    store.record("embed", T0)
    store.record("embed", T0 + 10 * day)
    store.flush(T0 + 10 * day)
    assert store.prune(T0 + 14 * day) == 0          # exactly 14 days: kept
    assert store.prune(T0 + 14 * day + M) == 1      # older than 14 days: gone
    h = store.history("embed", T0 + 14 * day + M, minutes=15 * 1440)
    assert h.total == 1
    # flush prunes by itself (at most once an hour).
    store.record("embed", T0 + 30 * day)
    store.flush(T0 + 30 * day)
    assert store.history("embed", T0 + 30 * day, minutes=30 * 1440).total == 1
    store.close()
    store.close()  # idempotent


def test_threads_lose_no_arrival() -> None:
    store = TrafficHistory(":memory:")

    def work(k: int) -> None:
        for i in range(500):
            store.record("embed", T0 + (i % 5) * M + k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h = store.history("embed", T0 + 4 * M, minutes=5)
    assert h.total == 2000 and list(h.counts) == [400] * 5
    store.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        TrafficHistory(":memory:", retention_days=0)
    store = TrafficHistory(":memory:")
    with pytest.raises(ValueError):
        store.history("embed", T0, minutes=0)
    store.record("embed", T0, n=0)  # nothing to count
    assert store.endpoints() == []
