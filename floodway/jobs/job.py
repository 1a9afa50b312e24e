"""One async job: its states, the legal transitions between them, and its wire form.

    queued -> running -> succeeded -> expired
       ^       |    \\-> failed -------^
       '-------'   fail(retry=True), release, or its lease expired (the owner died)

`TRANSITIONS` is the whole state machine: the store checks every write against it
(`check_transition`) and raises IllegalTransition for anything else. Succeeded and failed
are final but for expiry; expired is terminal.

Attempts count work that started, not claims: a running job is first only claimed (its
owner holds it, nothing runs yet), then started (its rows went to a container: one
attempt). A job handed back before it started (its lease expired, or it was released)
costs no attempt; see `floodway.jobs.store`.

Idempotency keys and body hashes (`check_key`, `body_sha256`) are shared by every job queue
(local SQLite and Modal), so that the same key means the same thing on both.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from floodway.errors import RequestError

# Lower rank is claimed first; anything else is refused at submit.
PRIORITIES: dict[str, int] = {"high": 0, "normal": 1, "low": 2}
MAX_KEY_LEN = 255   # as Stripe's API
ID_RE = re.compile(r"[0-9a-f]{32}")
KEY_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LEN}}}")   # visible ASCII: a header value


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # queued -> failed: claimed with its attempts already used up (`floodway.jobs.leases`).
    # queued -> succeeded: a stale owner delivers after its job was re-queued (first wins).
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.SUCCEEDED}),
    # running -> running: re-claimed by another owner after its lease expired.
    JobState.RUNNING: frozenset({JobState.RUNNING, JobState.QUEUED, JobState.SUCCEEDED,
                                 JobState.FAILED}),
    JobState.SUCCEEDED: frozenset({JobState.EXPIRED}),
    JobState.FAILED: frozenset({JobState.EXPIRED}),
    JobState.EXPIRED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


def check_transition(old: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless TRANSITIONS allows `old` -> `new`."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"job: {old} -> {new}")


def iso_utc(t: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC string with milliseconds (None stays None)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Job:
    """One job as stored. Times are epoch seconds; `finished_s`/`expires_s` are None until
    the job succeeded or failed. `error` holds the last error while a job is retried.
    `outputs`: the outputs once succeeded; for a job failed on some items only, its partial
    result ``{"outputs", "item_errors"}``. `inputs` are kept until the job finishes ([]
    after). `attempts`: attempts whose work started (or that failed); `started_s`: when the
    attempt under way started (None while only claimed); `claims`: times handed out;
    `lost`: attempts lost with their router (its lease expired after the work started);
    `completions`: results delivered (the first one kept)."""

    id: str
    endpoint: str
    tenant: str | None
    priority: str
    state: JobState
    inputs: list[Any]
    outputs: list[Any] | dict[str, Any] | None
    error: str | None
    attempts: int
    created_s: float
    updated_s: float
    finished_s: float | None
    expires_s: float | None
    started_s: float | None = None
    claims: int = 0
    lost: int = 0
    completions: int = 0

    @property
    def done(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.EXPIRED)

    def to_wire(self) -> dict[str, Any]:
        """The ``GET /v1/jobs/<id>`` answer. Inputs are never echoed; times are RFC 3339 UTC
        strings (``finished_at`` null until done); ``outputs`` when succeeded, ``error``
        when failed (with ``outputs``, null per failed item, and ``item_errors`` when only
        some items failed, as a sync 500)."""
        out: dict[str, Any] = {"id": self.id, "endpoint": self.endpoint,
                               "status": str(self.state), "attempts": self.attempts,
                               "created_at": iso_utc(self.created_s),
                               "finished_at": iso_utc(self.finished_s)}
        if self.state == JobState.SUCCEEDED:
            out["outputs"] = self.outputs
        elif self.state == JobState.FAILED:
            out["error"] = self.error
            if isinstance(self.outputs, dict):   # only some items failed (see `fail`)
                out.update(self.outputs)
        return out


def body_sha256(endpoint: str, inputs: list[Any]) -> str:
    """What an idempotency key is bound to: the sha256 of the endpoint and its inputs."""
    blob = json.dumps([endpoint, inputs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def check_key(key: str) -> None:
    """Raise RequestError (400, field Idempotency-Key) unless `key` is 1 to MAX_KEY_LEN
    visible ASCII characters."""
    if not KEY_RE.fullmatch(key):
        raise RequestError(f"an idempotency key is 1 to {MAX_KEY_LEN} visible ASCII "
                           "characters", status=400, field="Idempotency-Key")
