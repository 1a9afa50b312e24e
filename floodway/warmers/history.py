"""Traffic history: per-minute user arrivals per endpoint, in SQLite, for the warm policies.

    store = TrafficHistory(path)            # or ":memory:"
    store.record("embed", now_s)            # on the request path, user requests only
    h = store.history("embed", now_s, minutes=1440)   # -> History for desired()

Only user requests are recorded. Warm-up inferences, health probes and warmer pings must not
be: they would make an idle endpoint look active (Modal's buffer containers stay up while it
is) and teach the idle-time histogram a pattern that is the warmer's own.

Cost on the request path: `record` adds to an in-memory counter under a lock. The counts of a
minute are written once that minute is over, by the first `record` (or `history`) call of a
later minute, as one ``INSERT ... ON CONFLICT DO UPDATE`` per endpoint and minute, in one
transaction: at most one small write per minute, not one per request. `flush` writes
everything now, the current minute included (on shutdown; `close` calls it). Rows add up, so
several processes may share one file, and a minute flushed early and again later is counted
once per arrival.

The database is in WAL mode (https://www.sqlite.org/wal.html: readers do not block the
writer) with ``synchronous=NORMAL``, which in WAL mode is durable except for the last
transactions on a power loss (https://www.sqlite.org/pragma.html#pragma_synchronous) -- a
lost minute of counts costs a slightly worse prediction, never correctness. Rows older than
`retention_days` (default 14) are deleted by `prune`, which `flush` runs at most once an hour.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np

from floodway.warmers.target import History, minute_of

RETENTION_DAYS = 14
_PRUNE_EVERY_MIN = 60

_SCHEMA = """
CREATE TABLE IF NOT EXISTS arrivals (
    endpoint TEXT NOT NULL,
    minute   INTEGER NOT NULL,   -- epoch minute: floor(unix seconds / 60)
    count    INTEGER NOT NULL,
    PRIMARY KEY (endpoint, minute)
) WITHOUT ROWID
"""


class TrafficHistory:
    """Per-minute arrival counts per endpoint in a SQLite file (or ``":memory:"``).

    Thread-safe: every method takes one lock (the connection is shared across threads).
    Times are unix seconds passed in by the caller (no clock inside: tests and the simulator
    drive it). Raises `sqlite3.Error` on an unusable file.
    """

    def __init__(self, path: str | Path, retention_days: float = RETENTION_DAYS):
        if retention_days <= 0:
            raise ValueError(f"retention_days must be > 0, got {retention_days!r}")
        self.path = str(path)
        self.retention_days = retention_days
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(_SCHEMA)
        self._pending: dict[tuple[str, int], int] = defaultdict(int)
        self._oldest_pending: int | None = None
        self._last_prune_min: int | None = None

    # ------------------------------------------------------------ writing

    def record(self, endpoint: str, now_s: float, n: int = 1) -> None:
        """Count `n` user requests to `endpoint` arriving at `now_s`. Cheap: an in-memory add;
        the first call in a new minute also writes the finished minutes (see module doc)."""
        if n <= 0:
            return
        minute = minute_of(now_s)
        with self._lock:
            self._pending[(endpoint, minute)] += n
            if self._oldest_pending is None or minute < self._oldest_pending:
                self._oldest_pending = minute
            if self._oldest_pending < minute:
                self._flush_locked(before_minute=minute, now_min=minute)

    def flush(self, now_s: float | None = None) -> None:
        """Write every pending count now, the current minute included; prune if due
        (`now_s` gives the time for the retention cut; None: the newest pending minute)."""
        with self._lock:
            now_min = minute_of(now_s) if now_s is not None else self._oldest_pending
            self._flush_locked(before_minute=None, now_min=now_min)

    def _flush_locked(self, before_minute: int | None, now_min: int | None) -> None:
        rows = [(ep, m, c) for (ep, m), c in self._pending.items()
                if before_minute is None or m < before_minute]
        if rows:
            with self._db:  # one transaction
                self._db.executemany(
                    "INSERT INTO arrivals(endpoint, minute, count) VALUES (?, ?, ?) "
                    "ON CONFLICT(endpoint, minute) DO UPDATE SET count = count + excluded.count",
                    rows)
            for ep, m, _ in rows:
                del self._pending[(ep, m)]
            self._oldest_pending = min((m for _, m in self._pending), default=None)
        if now_min is not None and (self._last_prune_min is None
                                    or now_min - self._last_prune_min >= _PRUNE_EVERY_MIN):
            self._prune_locked(now_min)

    def prune(self, now_s: float) -> int:
        """Delete stored minutes older than `retention_days` before `now_s`; returns how many
        rows went."""
        with self._lock:
            return self._prune_locked(minute_of(now_s))

    def _prune_locked(self, now_min: int) -> int:
        cut = now_min - int(self.retention_days * 1440)
        with self._db:
            cur = self._db.execute("DELETE FROM arrivals WHERE minute < ?", (cut,))
        self._last_prune_min = now_min
        return cur.rowcount

    # ------------------------------------------------------------ reading

    def history(self, endpoint: str, now_s: float, minutes: int) -> History:
        """The last `minutes` minutes of `endpoint` ending with the minute of `now_s`
        (included, with its counts so far), as a `History` of shape (minutes,).
        Finished minutes still in memory are written first."""
        if minutes <= 0:
            raise ValueError(f"minutes must be > 0, got {minutes!r}")
        end = minute_of(now_s)
        start = end - minutes + 1
        counts = np.zeros(minutes, dtype=np.int64)
        with self._lock:
            if self._oldest_pending is not None and self._oldest_pending < end:
                self._flush_locked(before_minute=end, now_min=end)
            for m, c in self._db.execute(
                    "SELECT minute, count FROM arrivals WHERE endpoint = ? AND minute BETWEEN "
                    "? AND ?", (endpoint, start, end)):
                counts[m - start] += c
            for (ep, m), c in self._pending.items():
                if ep == endpoint and start <= m <= end:
                    counts[m - start] += c
        return History(start, counts)

    def endpoints(self) -> list[str]:
        """Endpoints with stored or pending counts, sorted."""
        with self._lock:
            stored = {r[0] for r in self._db.execute("SELECT DISTINCT endpoint FROM arrivals")}
            return sorted(stored | {ep for ep, _ in self._pending})

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush pending counts and close the database. Idempotent."""
        with self._lock:
            if self._db is None:
                return
            self._flush_locked(before_minute=None, now_min=None)
            self._db.close()
            self._db = None  # type: ignore[assignment]

    def __enter__(self) -> TrafficHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RETENTION_DAYS", "TrafficHistory"]
