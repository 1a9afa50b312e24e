"""Following a job to its result, whatever the transport: `JobWait` reads each poll's
answer (``GET /v1/jobs/<id>``) and says how long to wait before the next one.

A job is done when its status is succeeded (its outputs), failed (JobFailed) or expired
(JobExpired; the router answers 410 once the result is gone). Polls back off
(`floodway.client.retry.PollPolicy`), never sooner than a Retry-After the poll's answer
gave, and stop at the call's `wait_s` (JobTimeout: the job still runs; its id is in the
error). A poll is a read, so a poll that failed to connect, or was shed (429, 502, 503,
504 from the router or a gateway in front of it), is simply made again later; these do not
draw on the retry budget, and `wait_s` bounds them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from floodway.client.calls import Job, read_json
from floodway.client.errors import BadResponse, JobExpired, JobFailed, JobTimeout, error_from_answer
from floodway.client.retry import PollPolicy, jittered, parse_retry_after

# Answers to a poll that say "not now", not "no such job": polled again later.
TRANSIENT = frozenset({429, 502, 503, 504})
DONE = frozenset({"succeeded", "failed", "expired"})


class JobWait:
    """Waiting on `job` for at most `wait_s` seconds of `clock`. `first()` reads the
    answer that named the job (a repeated key's job may be done already); then, in turn,
    `next_wait()` (seconds to sleep; raises JobTimeout past `wait_s`) and `read()` or
    `failed()` for each poll, until `read` returns the outputs."""

    def __init__(self, job: Job, *, wait_s: float, policy: PollPolicy,
                 clock: Callable[[], float], rng: random.Random):
        self.job, self.policy, self.clock, self.rng = job, policy, clock, rng
        self.until_s = clock() + max(0.0, wait_s)
        self.polls = 0
        self._retry_after_s: float | None = None
        self._last_problem = ""

    def first(self) -> list[Any] | None:
        """The outputs when the job's own answer shows it done; None to poll."""
        return self._wire(self.job.wire) if self.job.status in DONE else None

    def next_wait(self) -> float:
        """Seconds before the next poll. Raises JobTimeout when `wait_s` is over (or the
        server asked for a wait that ends past it)."""
        left = self.until_s - self.clock()
        floor = self._retry_after_s or 0.0
        if left <= 0 or floor > left:
            raise JobTimeout(
                f"job {self.job.id} is still {self.job.status} after the call's wait_s; "
                f"it keeps running: Client.result({self.job.id!r}) waits again"
                + (f" (last poll: {self._last_problem})" if self._last_problem else ""),
                job_id=self.job.id, location=self.job.location, status=self.job.status)
        wait = jittered(max(self.policy.wait_s(self.polls), floor), self.policy.jitter_ratio,
                        self.rng)
        return min(wait, left)

    def read(self, status: int, headers: Mapping[str, str], body: bytes) -> list[Any] | None:
        """A poll's answer -> the outputs once succeeded, None to poll again. Raises
        JobFailed, JobExpired (410), or the error of another error answer (404: no such
        job, or another tenant's)."""
        self.polls += 1
        self._retry_after_s = None
        if status in TRANSIENT:
            self._retry_after_s = parse_retry_after(headers.get("retry-after"))
            self._last_problem = f"HTTP {status}"
            return None
        if status != 200:
            raise error_from_answer(status, body)
        wire = read_json(status, body)
        if not isinstance(wire, dict) or not isinstance(wire.get("status"), str):
            raise BadResponse(f"a job answer without a status: {body[:200]!r}", status=status)
        self._last_problem = ""
        self.job = replace(self.job, status=wire["status"], wire=wire)
        return self._wire(wire) if wire["status"] in DONE else None

    def failed(self, exc: Exception) -> None:
        """A poll failed before any answer: poll again later (it only reads)."""
        self.polls += 1
        self._retry_after_s = None
        self._last_problem = f"{type(exc).__name__}: {exc}"

    def _wire(self, wire: Mapping[str, Any]) -> list[Any]:
        state = wire.get("status")
        if state == "succeeded":
            outputs = wire.get("outputs")
            if not isinstance(outputs, list):
                raise BadResponse(f"job {self.job.id} succeeded without outputs")
            return outputs
        if state == "failed":
            raise JobFailed(str(wire.get("error") or "the job failed"), job_id=self.job.id,
                            outputs=wire.get("outputs"), item_errors=wire.get("item_errors"))
        raise JobExpired(f"job {self.job.id} finished and its result expired", status=410,
                         kind="expired")


__all__ = ["DONE", "TRANSIENT", "JobWait"]
