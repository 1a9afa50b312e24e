"""Bounded job storage: the job store's quotas on stored bytes, checked at submit.

What counts: the bytes a job row stores (its inputs, its result and error, as UTF-8 JSON;
`floodway.jobs.schema` keeps the sums per tenant with triggers). A job's inputs are dropped
when it finishes, so a backlog's bytes shrink as it drains; results stay until the job
expires (the store's ``ttl_s``).

A submit is refused with `Unavailable` (503 + Retry-After) when the job's inputs would take
the tenant's bytes past `max_tenant_bytes` or everyone's past `max_bytes`: what is stored
frees by itself (jobs finish, results expire), so a retry later succeeds, and nothing
already stored is touched. A job larger than a quota by itself can never be stored: 413.

Results count as much as inputs, and are checked as they arrive (`result_refusal`): a job
whose result would take the tenant's or everyone's bytes past a quota fails instead ("the
job's result of N bytes exceeds the job store's quota ..."), its result not stored, so
results never take the store past a quota (a burst of jobs admitted while their small
inputs fitted cannot fill it with large results). Only error texts are not refused: a
failed job's error is stored whatever its size (counted, and short).

A full disk (SQLite's ``SQLITE_FULL``, "database or disk is full") answers the same 503
(`disk_full`): the write is rolled back, the file is as before.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from dataclasses import dataclass, field

from floodway.errors import RequestError, Unavailable

MAX_BYTES = 1 << 30            # 1 GiB of jobs in all
MAX_TENANT_BYTES = 256 << 20   # 256 MiB per tenant: a quarter, so no one tenant fills it
# Retry-After when the jobs of the refused scope are still running: their inputs are
# dropped when they finish, seconds later for a backlog the pool drains.
UNFINISHED_RETRY_S = 5.0
# Retry-After when only results fill the quota: they go when they expire, but never wait
# longer than this to try again (an operator may raise the quota or clear jobs).
MAX_RETRY_S = 3600.0
# Retry-After for a full disk: someone has to free space.
DISK_FULL_RETRY_S = 30.0
# Refusals counted: submits past the total or the tenant's quota, or on a full disk, and
# results not stored (their job failed) because they would pass a quota.
REASONS = ("total", "tenant", "disk_full", "result")


def is_disk_full(e: BaseException) -> bool:
    """Whether `e` is SQLite's "database or disk is full" (SQLITE_FULL)."""
    return isinstance(e, sqlite3.OperationalError) and (
        getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
        or "database or disk is full" in str(e))


@dataclass
class Quota:
    """Limits on a job store's bytes (see the module). `rejections`: submits refused since
    this process opened the store, by reason (`REASONS`)."""

    max_bytes: int = MAX_BYTES
    max_tenant_bytes: int = MAX_TENANT_BYTES
    rejections: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.max_tenant_bytes < 1:
            raise ValueError(f"job store quotas must be >= 1 byte, got max_bytes="
                             f"{self.max_bytes}, max_tenant_bytes={self.max_tenant_bytes}")

    def check(self, db: sqlite3.Connection, tenant: str | None, size: int) -> str | None:
        """Which quota a new job of `size` bytes for `tenant` would pass: "tenant",
        "total" or None (it fits). Raises RequestError (413) for a job larger than a quota
        by itself."""
        limit = min(self.max_bytes, self.max_tenant_bytes)
        if size > limit:
            raise RequestError(f"the job's inputs take {size} bytes as stored; the job store "
                               f"takes at most {limit} bytes per tenant", status=413,
                               field="inputs")
        mine = db.execute("SELECT bytes FROM job_bytes WHERE tenant = ?",
                          (tenant or "",)).fetchone()
        if (mine[0] if mine else 0) + size > self.max_tenant_bytes:
            return "tenant"
        total = db.execute("SELECT coalesce(SUM(bytes), 0) FROM job_bytes").fetchone()[0]
        return "total" if total + size > self.max_bytes else None

    def result_refusal(self, db: sqlite3.Connection, tenant: str | None, size: int,
                       grow: int, *, count: bool = True) -> str | None:
        """The error of a job whose result of `size` bytes makes its row `grow` bytes
        larger (its inputs dropped), when that would take `tenant`'s or everyone's bytes
        past a quota (`count`: counted under "result"); None when it fits."""
        if grow <= 0:
            return None
        mine = db.execute("SELECT bytes FROM job_bytes WHERE tenant = ?",
                          (tenant or "",)).fetchone()
        mine_now = (mine[0] if mine else 0) + grow
        total = db.execute("SELECT coalesce(SUM(bytes), 0) FROM job_bytes").fetchone()[0] \
            + grow
        if mine_now > self.max_tenant_bytes:
            who, took, limit = f"the jobs of tenant {tenant!r}", mine_now, self.max_tenant_bytes
        elif total > self.max_bytes:
            who, took, limit = "all jobs", total, self.max_bytes
        else:
            return None
        if count:
            self.rejections["result"] += 1
        return (f"the job's result of {size} bytes exceeds the job store's quota: with it "
                f"{who} would take {took} bytes, over their quota of {limit} bytes; the "
                "result was not stored (fetch results sooner, lower the job TTL, or raise "
                "--job-max-mib / --job-tenant-mib)")

    def refuse(self, db: sqlite3.Connection, reason: str, tenant: str | None,
               now: float) -> Unavailable:
        """The 503 for a submit over the `reason` quota, counted, with a Retry-After for
        when room may be back (`retry_after_s`)."""
        self.rejections[reason] += 1
        limit = self.max_tenant_bytes if reason == "tenant" else self.max_bytes
        who = f"the jobs of tenant {tenant!r}" if reason == "tenant" else "all jobs"
        return Unavailable(f"the job store is full: {who} take their quota of {limit} bytes "
                           "(inputs of unfinished jobs, results of finished ones); retry "
                           "when jobs have finished or their results expired",
                           retry_after_s=retry_after_s(db, tenant if reason == "tenant"
                                                       else None, now))

    def disk_full(self, path: str) -> Unavailable:
        self.rejections["disk_full"] += 1
        return Unavailable(f"the job store {path!r} cannot grow: its disk is full; nothing "
                           "was stored", retry_after_s=DISK_FULL_RETRY_S)


def retry_after_s(db: sqlite3.Connection, tenant: str | None, now: float) -> float:
    """Seconds until the bytes of `tenant` (None: everyone) may shrink: soon while some of
    its jobs are unfinished (`UNFINISHED_RETRY_S`), else when its first result expires
    (at least 1 s, at most `MAX_RETRY_S`)."""
    scope, args = ("", ()) if tenant is None else (" AND tenant = ?", (tenant,))
    unfinished = db.execute("SELECT 1 FROM jobs WHERE state IN ('queued', 'running')"
                            f"{scope} LIMIT 1", args).fetchone()
    if unfinished:
        return UNFINISHED_RETRY_S
    first = db.execute(f"SELECT MIN(expires_s) FROM jobs WHERE expires_s > ?{scope}",
                       (now, *args)).fetchone()[0]
    if first is None:
        return MAX_RETRY_S
    return min(max(1.0, math.ceil(first - now)), MAX_RETRY_S)


def stored_bytes(db: sqlite3.Connection) -> tuple[int, dict[str, int]]:
    """(bytes of all jobs, bytes per tenant with any), as the triggers keep them."""
    per = {str(t): int(b) for t, b in db.execute(
        "SELECT tenant, bytes FROM job_bytes WHERE bytes != 0")}
    return sum(per.values()), per


__all__ = ["DISK_FULL_RETRY_S", "MAX_BYTES", "MAX_TENANT_BYTES", "MAX_RETRY_S", "REASONS",
           "UNFINISHED_RETRY_S", "Quota", "is_disk_full", "retry_after_s", "stored_bytes"]
