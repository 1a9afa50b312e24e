"""The durable async job queue: one SQLite file, one explicit state machine per job
(`floodway.jobs.job`: every write is checked against its transition table).

A job is committed (WAL) before `submit` returns, so a `202` means the job survives a kill -9
of the router right after it. `sync="NORMAL"` (the default) is enough for that: a committed
transaction is in the WAL in the OS's hands, and only an OS crash or power loss can lose the
last ones (https://www.sqlite.org/pragma.html#pragma_synchronous). `sync="FULL"` fsyncs every
commit and survives those too, at milliseconds per job, serialized: a burst of hundreds
of jobs spilled at once waits seconds for its 202s (this project's burst probe).

Delivery is lease-based and at-least-once, and attempts count work, not claims
(`floodway.jobs.leases`: claim, start, renew, complete, fail, release).

Storage is bounded (`floodway.jobs.quota`): a submit past the total or the tenant's quota
of stored bytes, or on a full disk, is refused with Unavailable (503) and stores nothing; a
job's inputs are dropped when it finishes, and a result that would pass a quota is not
stored: its job fails with the quota's error.

Idempotency keys work as in Stripe's API and the IETF Idempotency-Key draft: the same
(tenant, endpoint, key) returns the job already created, whatever its state; the same key with
a different body is a 409. A key lives as long as its job (until the job expires).

Expiry: a finished job expires ``ttl_s`` after it finished. `get` answers an expired job as a
tombstone (state ``expired``, no inputs or outputs: the router's 410). `purge` (it also runs
lazily from `submit` and `claim`) drops an expired job's inputs, outputs, error and
idempotency key, and keeps its tombstone for `tombstone_s` more (default `TOMBSTONE_S`, 7
days), after which the row is deleted and `get` returns None (404): a client polling an old
job learns that its result expired, not that it never existed. Queued and running jobs never
expire.

Times are epoch seconds from the injectable `clock` (stored and compared across restarts
and processes, so not monotonic). Every method takes one short transaction on one
connection guarded by a lock; several processes may share the file (``BEGIN IMMEDIATE``
makes claims atomic across them, ``busy_timeout`` makes them wait).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, overload

from floodway.codec import dumps, loads
from floodway.errors import FloodwayError, RequestError, Unavailable
from floodway.jobs.job import (
    ID_RE,
    PRIORITIES,
    Job,
    JobState,
    body_sha256,
    check_key,
    check_transition,
)
from floodway.jobs.leases import MAX_LOST_ATTEMPTS, Leases
from floodway.jobs.quota import MAX_BYTES, MAX_TENANT_BYTES, Quota, is_disk_full, stored_bytes
from floodway.jobs.schema import SCHEMA_VERSION, migrate

BUSY_TIMEOUT_MS = 5000
# How long an expired job answers as expired (410) before its row is deleted (then 404).
TOMBSTONE_S = 7 * 86400.0

@overload
def _scope(tenant: str | None, endpoint: str, key: str) -> str: ...


@overload
def _scope(tenant: str | None, endpoint: str, key: None) -> None: ...


def _scope(tenant: str | None, endpoint: str, key: str | None) -> str | None:
    """Where an idempotency key is unique: per tenant and endpoint (None: no key)."""
    return None if key is None else json.dumps([tenant, endpoint, key])


class JobStore(Leases):
    """Durable jobs in the SQLite file at `path` (created with its schema if missing).

    `ttl_s`: how long a finished job (and its idempotency key) is kept. `tombstone_s`: how
    long after that an expired job still answers as expired. `max_attempts`: how many
    attempts a job gets before it fails for good, `max_lost_attempts`: how many it may lose
    with their router (`floodway.jobs.leases`). `max_bytes`,
    `max_tenant_bytes`: the quotas on stored bytes (`floodway.jobs.quota`). `clock`: epoch
    seconds. Raises ValueError for a bad setting, FloodwayError for a file of a newer schema.
    """

    def __init__(self, path: str | os.PathLike[str], *, ttl_s: float = 86400.0,
                 max_attempts: int = 3, clock: Callable[[], float] = time.time,
                 sync: str = "NORMAL", tombstone_s: float = TOMBSTONE_S,
                 max_bytes: int = MAX_BYTES, max_tenant_bytes: int = MAX_TENANT_BYTES,
                 max_lost_attempts: int = MAX_LOST_ATTEMPTS):
        if ttl_s <= 0 or max_attempts < 1 or sync not in ("NORMAL", "FULL") or \
                tombstone_s < 0 or max_lost_attempts < 1:
            raise ValueError("ttl_s must be > 0, max_attempts >= 1, max_lost_attempts >= 1, "
                             "sync NORMAL or FULL, tombstone_s >= 0")
        self.max_lost_attempts = max_lost_attempts
        self.path, self.ttl_s, self.max_attempts, self.clock = path, ttl_s, max_attempts, clock
        self.tombstone_s = tombstone_s
        self.quota = Quota(max_bytes, max_tenant_bytes)
        self._purge_every_s = min(ttl_s, 60.0)
        self._next_purge_s = 0.0
        self._lock = threading.Lock()
        # Autocommit mode: every write below is one explicit BEGIN IMMEDIATE ... COMMIT.
        self._db = sqlite3.connect(os.fspath(path), check_same_thread=False,
                                   isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute(f"PRAGMA synchronous = {sync}")
        try:
            with self._write() as db:   # one migration at a time, however many processes
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise FloodwayError(f"job store {os.fspath(path)!r} has schema version "
                                        f"{version}; this floodway knows up to "
                                        f"{SCHEMA_VERSION}")
                migrate(db, version)
        except BaseException:
            self._db.close()
            raise

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                # A failed COMMIT (a full disk) is rolled back too: never left open.
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _job(self, row: sqlite3.Row) -> Job:
        return Job(id=row["id"], endpoint=row["endpoint"], tenant=row["tenant"],
                   priority=row["priority"], state=JobState(row["state"]),
                   inputs=loads(row["inputs"]),
                   outputs=None if row["outputs"] is None else loads(row["outputs"]),
                   error=row["error"], attempts=row["attempts"], created_s=row["created_s"],
                   updated_s=row["updated_s"], finished_s=row["finished_s"],
                   expires_s=row["expires_s"], started_s=row["started_s"],
                   claims=row["claims"], lost=row["lost"], completions=row["completions"])

    def _update(self, db: sqlite3.Connection, row: sqlite3.Row, new: JobState,
                **cols: Any) -> None:
        check_transition(JobState(row["state"]), new)
        cols = {"state": str(new), **cols}
        sets = ", ".join(f"{k} = ?" for k in cols)
        db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*cols.values(), row["id"]])

    def _finish(self, now: float) -> dict[str, Any]:
        # A finished job's inputs are dropped: only its result is kept (bounded storage).
        return {"owner": None, "lease_until_s": None, "updated_s": now, "finished_s": now,
                "expires_s": now + self.ttl_s, "inputs": "[]"}

    def _maybe_purge(self, db: sqlite3.Connection, now: float) -> None:
        if now >= self._next_purge_s:
            self._purge(db, now)

    def _purge(self, db: sqlite3.Connection, now: float) -> int:
        """Expired jobs become tombstones (payload and key dropped); tombstones older than
        `tombstone_s` are deleted. Returns how many jobs this turned into tombstones."""
        self._next_purge_s = now + self._purge_every_s
        db.execute("DELETE FROM jobs WHERE expires_s <= ?", (now - self.tombstone_s,))
        return db.execute(
            "UPDATE jobs SET inputs = '[]', outputs = NULL, error = NULL, idem_scope = NULL "
            "WHERE expires_s <= ? AND (inputs != '[]' OR outputs IS NOT NULL "
            "OR error IS NOT NULL OR idem_scope IS NOT NULL)", (now,)).rowcount

    # ------------------------------------------------------------------ API
    def submit(self, endpoint: str, inputs: list[Any], *, tenant: str | None = None,
               priority: str = "normal", idempotency_key: str | None = None,
               owner: str | None = None, lease_s: float = 0.0) -> tuple[Job, bool]:
        """Store a new queued job durably; return (job, True). With an `idempotency_key`
        already used by this tenant on this endpoint, return (that job, False) whatever its
        state. With an `owner`, the new job starts running, leased to it for `lease_s` s
        (its first attempt: work under way, adopted as a job). Raises RequestError: 409 when
        the key was used for another request (endpoint or inputs), 400 for a malformed key,
        422 for an unknown priority or inputs JSON cannot store (a lone surrogate), 413 for
        inputs larger than a quota; Unavailable (503) past a quota or on a full disk
        (`floodway.jobs.quota`), nothing stored."""
        if priority not in PRIORITIES:
            raise RequestError(f"priority must be one of {sorted(PRIORITIES)}, got {priority!r}",
                               status=422, field="priority")
        if idempotency_key is not None:
            check_key(idempotency_key)
        try:
            inputs_json = dumps(inputs).decode()
        except (TypeError, ValueError) as e:   # escaped: the answer is JSON too
            why = str(e).encode("utf-8", "backslashreplace").decode()[:200]
            raise RequestError(f"inputs cannot be stored as JSON: {why}", status=422,
                               field="inputs") from None
        try:
            return self._insert(endpoint, inputs, inputs_json, tenant, priority,
                                idempotency_key, owner, lease_s)
        except sqlite3.OperationalError as e:
            if not is_disk_full(e):
                raise
            raise self.quota.disk_full(os.fspath(self.path)) from None

    def _insert(self, endpoint: str, inputs: list[Any], inputs_json: str, tenant: str | None,
                priority: str, idempotency_key: str | None, owner: str | None,
                lease_s: float) -> tuple[Job, bool]:
        body_sha = body_sha256(endpoint, inputs)
        scope = _scope(tenant, endpoint, idempotency_key)
        refused: Unavailable | None = None
        with self._write() as db:
            now = self.clock()
            self._maybe_purge(db, now)
            if scope is not None and idempotency_key is not None:
                row = self._keyed(db, scope, body_sha, idempotency_key, now)
                if row is not None:
                    return self._job(row), False
            size = len(inputs_json.encode())
            if self.quota.check(db, tenant, size) is not None:
                self._purge(db, now)   # expired results free their bytes first
                if (over := self.quota.check(db, tenant, size)) is not None:
                    refused = self.quota.refuse(db, over, tenant, now)
            if refused is None:
                running = owner is not None
                job = Job(id=uuid.uuid4().hex, endpoint=endpoint, tenant=tenant,
                          priority=priority,
                          state=JobState.RUNNING if running else JobState.QUEUED,
                          inputs=inputs, outputs=None, error=None, attempts=int(running),
                          created_s=now, updated_s=now, finished_s=None, expires_s=None,
                          started_s=now if running else None, claims=int(running))
                db.execute(
                    "INSERT INTO jobs (id, endpoint, tenant, priority, rank, state, inputs, "
                    "attempts, owner, lease_until_s, not_before_s, created_s, updated_s, "
                    "idem_scope, body_sha256, started_s, claims) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.id, endpoint, tenant, priority, PRIORITIES[priority], str(job.state),
                     inputs_json, job.attempts, owner, now + lease_s if running else None,
                     now, now, now, scope, body_sha, job.started_s, job.claims))
        if refused is not None:   # raised after the commit: the purge above is kept
            raise refused
        return job, True

    def find(self, endpoint: str, inputs: list[Any], *, tenant: str | None,
             idempotency_key: str) -> Job | None:
        """The live job this tenant stored under `idempotency_key` on `endpoint`, or None.
        Raises RequestError 409 when the key names a job of other inputs, 400 for a
        malformed key (as `submit`)."""
        check_key(idempotency_key)
        scope = _scope(tenant, endpoint, idempotency_key)
        with self._write() as db:
            row = self._keyed(db, scope, body_sha256(endpoint, inputs), idempotency_key,
                              self.clock())
            return None if row is None else self._job(row)

    def _keyed(self, db: sqlite3.Connection, scope: str, body_sha: str, key: str,
               now: float) -> sqlite3.Row | None:
        """The row holding idempotency `scope` (an expired one is deleted: its key is free
        again). Raises RequestError 409 when it was stored for other inputs."""
        row = db.execute("SELECT * FROM jobs WHERE idem_scope = ?", (scope,)).fetchone()
        if row is not None and row["expires_s"] is not None and row["expires_s"] <= now:
            self._purge(db, now)     # its key is free again; the job stays a tombstone
            return None
        if row is not None and row["body_sha256"] != body_sha:
            raise RequestError(f"Idempotency-Key {key!r} was already used for a different "
                               "request (other inputs); use a new key for a new request",
                               status=409, field="Idempotency-Key")
        return row

    def fail_queued(self, endpoint: str, error: str) -> int:
        """Fail every queued job of `endpoint` with `error` (it cannot run: its containers
        cannot start), as finished jobs (inputs dropped, expiring after `ttl_s`); how many.
        Jobs claimed by a router are left to it."""
        with self._write() as db:
            check_transition(JobState.QUEUED, JobState.FAILED)
            cols = {**self._finish(self.clock()), "state": str(JobState.FAILED),
                    "error": error}
            sets = ", ".join(f"{k} = ?" for k in cols)
            return db.execute(f"UPDATE jobs SET {sets} WHERE state = 'queued' AND "
                              "endpoint = ?", [*cols.values(), endpoint]).rowcount

    def get(self, job_id: str) -> Job | None:
        """The job, or None for an unknown, malformed or purged id. An expired job not yet
        purged comes back as a tombstone: state expired, no inputs, outputs or error."""
        if not isinstance(job_id, str) or not ID_RE.fullmatch(job_id):
            return None
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        job = self._job(row)
        if job.expires_s is not None and job.expires_s <= self.clock():
            check_transition(job.state, JobState.EXPIRED)
            return replace(job, state=JobState.EXPIRED, inputs=[], outputs=None, error=None)
        return job

    def purge(self) -> int:
        """Turn every expired job into a tombstone (its payload and idempotency key dropped)
        and delete tombstones older than `tombstone_s`; return how many became tombstones."""
        with self._write() as db:
            return self._purge(db, self.clock())

    def counts(self) -> dict[str, int]:
        """Jobs by state, every state present (queued is the queue depth); expired counts
        jobs past their expiry that are not purged yet."""
        with self._lock:
            rows = self._db.execute(
                "SELECT CASE WHEN expires_s <= ? THEN 'expired' ELSE state END AS s, COUNT(*) "
                "FROM jobs GROUP BY s", (self.clock(),)).fetchall()
        out = {str(s): 0 for s in JobState}
        out.update({s: n for s, n in rows})
        return out

    def stored_bytes(self) -> tuple[int, dict[str, int]]:
        """(bytes all jobs store, bytes per tenant with any; "" for jobs of no tenant):
        inputs of unfinished jobs, results and errors of finished ones, as UTF-8 JSON."""
        with self._lock:
            return stored_bytes(self._db)

    def backlog_rows(self) -> dict[str, int]:
        """Rows (inputs) of the jobs not finished, queued or running, per endpoint with
        any: the demand a backlog puts on the warm pool."""
        with self._lock:
            rows = self._db.execute(
                "SELECT endpoint, SUM(json_array_length(inputs)) FROM jobs "
                "WHERE state IN ('queued', 'running') GROUP BY endpoint").fetchall()
        return {str(ep): int(n or 0) for ep, n in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
