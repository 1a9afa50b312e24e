"""The job store's leases and attempts: the writes of the jobs handed out (`JobStore`'s
`claim`, `start`, `renew`, `complete`, `fail`, `release`).

Delivery is lease-based and at-least-once, like SQS visibility timeouts or Celery's
``acks_late``: `claim` hands a job out with a lease (``lease_s``); the owner `renew`s it while
it runs and `complete`s or `fail`s it. A job whose lease ran out (its worker or router died)
goes back to the queue, claimable again by anyone. The first `complete` wins, even from an
owner whose lease had expired (its result is as good as a re-run's); later ones change
nothing but the count of ``completions``.

Attempts count work, not claims: a claim costs nothing; `start` counts an attempt when the
job's work reaches a model (the local router: when its rows go to a container); a failure
counts one too (`fail`), and so does a result that came without a `start` (`complete`). So
a router killed again and again only costs attempts to the jobs it was running at each
kill, not to those it had claimed; a job handed back before its work started (lease expired,
`release`) goes back to the queue uncharged.

Giving up: a job is failed at its next claim instead of being handed out again when its
attempts that ended in a failure or lost their container (`release` after a start) reach
``max_attempts``: it crashes what runs it. An attempt lost with its router (the lease
expired after the work started) counts too, but against a bound of its own,
``max_lost_attempts`` (`MAX_LOST_ATTEMPTS`): a router killed again and again is no sign
against the jobs it was running (a job's work runs in its container, not in the router),
yet a job that did kill every router running it must end some day.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from floodway.codec import dumps
from floodway.jobs.job import Job, JobState
from floodway.jobs.quota import Quota

# Attempts a job may lose with its router (lease expired after its work started) before it
# is failed: more than a crash-looping router costs a job (each kill hits the few jobs on
# containers at that moment, and those again only if it is killed while they run again).
MAX_LOST_ATTEMPTS = 10


class Leases:
    """The lease and attempt half of `floodway.jobs.store.JobStore` (a mixin: the store
    gives it its connection, transactions and row helpers)."""

    max_attempts: int
    max_lost_attempts: int
    quota: Quota
    clock: Callable[[], float]
    _lock: threading.Lock
    _write: Callable[[], AbstractContextManager[sqlite3.Connection]]
    _job: Callable[[sqlite3.Row], Job]
    _update: Callable[..., None]
    _finish: Callable[[float], dict[str, Any]]
    _maybe_purge: Callable[[sqlite3.Connection, float], None]
    _purge: Callable[[sqlite3.Connection, float], int]

    def claim(self, owner: str, *, lease_s: float, endpoints: Iterable[str] | None = None,
              limit: int = 1, max_rows: int | None = None) -> list[Job]:
        """Atomically take up to `limit` queued jobs for `owner` with a lease of `lease_s`
        seconds (high priority first, then oldest), whole jobs while fewer than `max_rows`
        rows (inputs) are taken (None: no bound; the first job is taken whatever its rows).
        A claim counts no attempt (`start` does). Jobs whose lease expired go back to the
        queue first (`_requeue_expired`). A job whose attempts are used up (`used_up`) is
        failed ("gave up after N attempts: ...") instead of being returned."""
        eps = None if endpoints is None else list(endpoints)
        where = "state = 'queued' AND not_before_s <= :now"
        if eps is not None:
            where += f" AND endpoint IN ({', '.join(f':e{i}' for i in range(len(eps)))})"
        taken: list[Job] = []
        rows_taken = 0
        with self._write() as db:
            now = self.clock()
            self._maybe_purge(db, now)
            self._requeue_expired(db, now)
            params: dict[str, Any] = {"now": now, **{f"e{i}": e for i, e in enumerate(eps or [])}}
            while len(taken) < limit and (max_rows is None or rows_taken < max_rows):
                rows = db.execute(f"SELECT * FROM jobs WHERE {where} "
                                  "ORDER BY rank, created_s, rowid LIMIT :n",
                                  {**params, "n": limit - len(taken)}).fetchall()
                if not rows:
                    break
                for row in rows:
                    if max_rows is not None and rows_taken >= max_rows:
                        break
                    if self.used_up(row["attempts"], row["lost"]):
                        last = row["error"] or "no error recorded"
                        self._update(db, row, JobState.FAILED, **self._finish(now),
                                     error=f"gave up after {row['attempts']} attempts: {last}")
                        continue
                    self._update(db, row, JobState.RUNNING, owner=owner,
                                 lease_until_s=now + lease_s, claims=row["claims"] + 1,
                                 started_s=None, updated_s=now)
                    job = replace(self._job(row), state=JobState.RUNNING, updated_s=now,
                                  started_s=None, claims=row["claims"] + 1)
                    taken.append(job)
                    rows_taken += max(1, len(job.inputs))
        return taken

    @staticmethod
    def _requeue_expired(db: sqlite3.Connection, now: float) -> int:
        """Running jobs whose lease expired (their owner died or stalled) go back to the
        queue, oldest first as before. One whose work had not started is uncharged (it cost
        no attempt); one whose work started keeps the attempt `start` counted, and its error
        says so. Returns how many went back."""
        return db.execute(
            "UPDATE jobs SET state = 'queued', error = CASE WHEN started_s IS NULL THEN error "
            "ELSE 'lease of ' || coalesce(owner, '?') || ' expired after its work started' "
            "END, lost = lost + (started_s IS NOT NULL), owner = NULL, lease_until_s = NULL, "
            "started_s = NULL, updated_s = :now "
            "WHERE state = 'running' AND lease_until_s <= :now", {"now": now}).rowcount

    def start(self, job_ids: Iterable[str], owner: str) -> list[str]:
        """The work of these jobs (held by `owner`) reached a model: one attempt each, once
        per claim. Returns the ids counted now (not those already started, or no longer
        held by `owner`)."""
        ids = list(job_ids)
        if not ids:
            return []
        with self._write() as db:
            now = self.clock()
            marks = ", ".join("?" * len(ids))
            rows = db.execute(
                "UPDATE jobs SET started_s = ?, attempts = attempts + 1, updated_s = ? "
                f"WHERE id IN ({marks}) AND state = 'running' AND owner = ? "
                "AND started_s IS NULL RETURNING id", (now, now, *ids, owner)).fetchall()
        return [r[0] for r in rows]

    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        """Extend `owner`'s lease to now + `lease_s`; False if it no longer holds the job."""
        with self._write() as db:
            now = self.clock()
            cur = db.execute("UPDATE jobs SET lease_until_s = ?, updated_s = ? "
                             "WHERE id = ? AND state = 'running' AND owner = ?",
                             (now + lease_s, now, job_id, owner))
            return cur.rowcount == 1

    def complete(self, job_id: str, owner: str, outputs: list[Any]) -> bool:
        """Record the result, once: True if this call finished the job, False if it was
        already finished (or never handed out). Any owner that ran the job may deliver, even
        after its lease expired. Every delivery is counted (``completions``: more than one
        means the work ran to completion twice). A result that came without a `start`
        counts its attempt. A result that would take the store past a quota is not
        stored: the job fails with the quota's error instead (`floodway.jobs.quota`), and
        this still returns True. Raises TypeError/ValueError if `outputs` is not JSON."""
        outputs_json = dumps(outputs).decode()
        with self._write() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["claims"] == 0:
                return False
            if row["state"] not in (JobState.RUNNING, JobState.QUEUED):
                db.execute("UPDATE jobs SET completions = completions + 1 WHERE id = ?",
                           (job_id,))
                return False
            now = self.clock()
            over = self._over_quota(db, row, outputs_json, now)
            # The owner is kept on a finished job: it says who delivered the result.
            done = {**self._finish(now), "owner": owner, "completions": row["completions"] + 1,
                    "attempts": self._charged(row)}
            if over is not None:
                self._update(db, row, JobState.FAILED, **done, outputs=None, error=over)
            else:
                self._update(db, row, JobState.SUCCEEDED, **done, outputs=outputs_json,
                             error=None)
            return True

    def _over_quota(self, db: sqlite3.Connection, row: sqlite3.Row, outputs_json: str,
                    now: float) -> str | None:
        """The quota's error when `row` finishing with `outputs_json` stored (its inputs and
        error dropped) would pass a quota, after expired results freed their bytes; None
        when it fits."""
        size = len(outputs_json.encode())
        grow = len("[]") + size - _row_bytes(row)
        if self.quota.result_refusal(db, row["tenant"], size, grow, count=False) is None:
            return None
        self._purge(db, now)
        return self.quota.result_refusal(db, row["tenant"], size, grow)

    def used_up(self, attempts: int, lost: int) -> bool:
        """Whether a job with these `attempts`, `lost` of them with their router, has none
        left (see the module)."""
        return attempts - lost >= self.max_attempts or lost >= self.max_lost_attempts

    @staticmethod
    def _charged(row: sqlite3.Row) -> int:
        """The row's attempts with the one under way counted (unless `start` did)."""
        return row["attempts"] + (row["started_s"] is None)

    @staticmethod
    def _held(db: sqlite3.Connection, job_id: str, owner: str) -> sqlite3.Row | None:
        """The job's row if `owner` holds it now (running under its lease)."""
        return db.execute("SELECT * FROM jobs WHERE id = ? AND state = 'running' "
                          "AND owner = ?", (job_id, owner)).fetchone()

    def fail(self, job_id: str, owner: str, error: str, *, retry: bool,
             delay_s: float = 0.0, partial: dict[str, Any] | None = None) -> bool:
        """Report that `owner`'s attempt failed with `error` (an attempt, started or not).
        `retry`: put the job back in the
        queue (claimable after `delay_s` seconds) unless its attempts are used up, in which
        case it fails ("gave up after N attempts: <error>"). `partial`: what the failed
        job's answer carries beside its error (``{"outputs", "item_errors"}`` when only some
        items failed; not stored where it would pass a quota, which the error then says).
        False if `owner` no longer holds the job (its lease was taken over, or the job
        already finished)."""
        partial_json = None if partial is None else dumps(partial).decode()
        with self._write() as db:
            row = self._held(db, job_id, owner)
            if row is None:
                return False
            now = self.clock()
            attempts = self._charged(row)
            if retry and not self.used_up(attempts, row["lost"]):
                self._update(db, row, JobState.QUEUED, owner=None, lease_until_s=None,
                             updated_s=now, not_before_s=now + max(0.0, delay_s), error=error,
                             attempts=attempts, started_s=None)
            else:
                if retry:
                    error = f"gave up after {attempts} attempts: {error}"
                if partial_json is not None and (
                        over := self._over_quota(db, row, partial_json, now)) is not None:
                    partial_json, error = None, f"{error} (its partial result: {over})"
                self._update(db, row, JobState.FAILED, **self._finish(now), error=error,
                             outputs=partial_json, attempts=attempts)
            return True

    def release(self, job_id: str, owner: str, *, delay_s: float = 0.0,
                error: str | None = None, uncharge: bool = False) -> bool:
        """Hand a job back to the queue, claimable again after `delay_s` seconds: not a
        failure (no capacity yet, the work lost with its container). Its attempt counts
        only if its work started (a job whose containers die under it uses its attempts up);
        `uncharge`: not even then (a graceful stop interrupted it: not the job's doing).
        `error`: why, kept as its last error. False if `owner` no longer holds it."""
        with self._write() as db:
            row = self._held(db, job_id, owner)
            if row is None:
                return False
            now = self.clock()
            started = row["started_s"] is not None
            self._update(db, row, JobState.QUEUED, owner=None, lease_until_s=None,
                         updated_s=now, not_before_s=now + max(0.0, delay_s), started_s=None,
                         attempts=row["attempts"] - int(started and uncharge),
                         error=row["error"] if error is None else error)
            return True


def _row_bytes(row: sqlite3.Row) -> int:
    """The bytes `row` stores as the quotas count them (`floodway.jobs.schema`)."""
    return sum(len(row[k].encode()) for k in ("inputs", "outputs", "error")
               if row[k] is not None)
