"""One logical call, whatever the transport: its headers, its attempts and what each
answer means. `floodway.client.sync` and `floodway.client.aio` only send and sleep.

    Attempts     one call's Idempotency-Key (made once, sent on every attempt), deadline and
                 retries: after a 429/503 or a failed connection, the wait before the next
                 attempt, or the error to raise
    read_answer  a final answer -> the outputs, a `Job` to follow, or the error it stands for
    Job          a job's handle (id, Location, last status)
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from floodway.client.errors import (
    BadResponse,
    ClientError,
    ConnectionFailed,
    RetryBudgetExhausted,
    error_from_answer,
)
from floodway.client.retry import (
    RetryBudget,
    RetryPolicy,
    backoff_s,
    jittered,
    parse_retry_after,
)

# Failures before any answer, retried with the call's key: no connection, or one dropped
# before the answer came (the server may have taken the request: the key makes a job's
# retry find the job it made). Timeouts are not retried: the server is working on it.
RETRIED_ERRORS: tuple[type[Exception], ...] = (
    httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
    httpx.WriteError)

def new_key() -> str:
    """A fresh Idempotency-Key: 32 hex digits (a random UUID)."""
    return uuid.uuid4().hex


def encode_inputs(inputs: list[Any]) -> bytes:
    """The body ``{"inputs": [...]}`` as JSON bytes, made once per call (not per attempt).
    Raises TypeError for an input JSON cannot hold."""
    if not isinstance(inputs, list | tuple):
        raise TypeError(f"inputs must be a list (one item per input), got "
                        f"{type(inputs).__name__}")
    return json.dumps({"inputs": list(inputs)}, separators=(",", ":")).encode()


def base_headers(api_key: str | None, priority: str | None) -> dict[str, str]:
    """Headers every attempt of a call sends: JSON, the bearer key, ``X-Priority``."""
    out = {"Content-Type": "application/json", "User-Agent": "floodway-client"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    if priority is not None:
        out["X-Priority"] = str(priority)   # the router checks it (400 naming X-Priority)
    return out


class Attempts:
    """The attempts of one logical call. `key`: its Idempotency-Key (given, or made once
    here) sent on every attempt, so a retry never duplicates work; `deadline_ms`: the
    call's deadline from now (each attempt sends what is left of it as ``X-Deadline-Ms``;
    no retry is made that would start after it). One call deposits into the client's
    `budget`; each retry withdraws a token from it."""

    def __init__(self, policy: RetryPolicy, budget: RetryBudget, *,
                 clock: Callable[[], float], rng: random.Random,
                 deadline_ms: float | None = None, key: str | None = None):
        self.policy, self.budget, self.clock, self.rng = policy, budget, clock, rng
        self.key = key or new_key()
        self.deadline_s = None if deadline_ms is None else clock() + deadline_ms / 1000
        self.made = 0
        budget.deposit()

    def headers(self) -> dict[str, str]:
        """The next attempt's own headers (and count it)."""
        self.made += 1
        out = {"Idempotency-Key": self.key}
        if self.deadline_s is not None:
            left_ms = (self.deadline_s - self.clock()) * 1000
            out["X-Deadline-Ms"] = str(max(1, math.ceil(left_ms)))
        return out

    def after_answer(self, status: int, headers: Mapping[str, str], body: bytes) -> float:
        """A retried status (429/503) came: the wait before the next attempt, never less
        than its Retry-After. Raises the answer's error (Overloaded) when no retry is
        left, or RetryBudgetExhausted."""
        wait = parse_retry_after(headers.get("retry-after"))
        error = error_from_answer(status, body, retry_after_s=wait)
        if wait is not None and wait > self.policy.max_retry_after_s:
            raise self._counted(error)
        return self._retry(backoff_s(self.policy, self.made - 1) if wait is None else wait,
                           error)

    def after_failure(self, exc: Exception) -> float:
        """The request failed before any answer (`RETRIED_ERRORS`): the backoff before the
        next attempt. Raises ConnectionFailed when no retry is left, or
        RetryBudgetExhausted."""
        error = ConnectionFailed(f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return self._retry(backoff_s(self.policy, self.made - 1), error)

    def failed(self, exc: Exception) -> ClientError:
        """A transport error that is not retried (a timeout), as ConnectionFailed."""
        error = ConnectionFailed(f"{type(exc).__name__}: {exc or 'no answer'}")
        error.__cause__ = exc
        return self._counted(error)

    def _retry(self, wait_s: float, error: ClientError) -> float:
        if self.made > self.policy.max_retries:
            raise self._counted(error)
        delay = jittered(wait_s, self.policy.jitter_ratio, self.rng)
        if self.deadline_s is not None and self.clock() + delay >= self.deadline_s:
            raise self._counted(error)   # the retry would start past the call's deadline
        if not self.budget.try_withdraw():
            refill = self.budget.refill_s()
            late = RetryBudgetExhausted(
                f"not retried: the client's retry budget is empty (retries may add "
                f"{self.policy.budget_ratio:.0%} to the calls plus "
                f"{self.policy.budget_min_per_s:g}/s); last: {error}",
                last=error, retry_after_s=max(wait_s, refill if math.isfinite(refill)
                                              else wait_s))
            late.__cause__ = error
            raise self._counted(late)
        return delay

    def _counted(self, error: ClientError) -> ClientError:
        error.attempts = self.made
        return error


@dataclass(frozen=True)
class Job:
    """A job's handle: `id`, `location` (``/v1/jobs/<id>``), `status` when last seen
    (queued, running, succeeded, failed), `endpoint` (None when not told)."""

    id: str
    location: str
    status: str
    endpoint: str | None = None
    # The wire form it was read from: a job a repeated key found may be done already.
    wire: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, wire: Mapping[str, Any], location: str | None = None) -> Job:
        """From a job's wire form (``{"id", "status", ...}``). Raises BadResponse."""
        job_id = wire.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise BadResponse(f"a job answer without an id: {str(wire)[:200]}")
        return cls(id=job_id, location=location or wire.get("location")
                   or f"/v1/jobs/{job_id}", status=str(wire.get("status", "queued")),
                   endpoint=wire.get("endpoint"), wire=dict(wire))


def read_json(status: int, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise BadResponse(f"HTTP {status} answer is not JSON: "
                          f"{body[:200].decode('utf-8', 'replace')!r}", status=status) from None


def read_answer(status: int, headers: Mapping[str, str], body: bytes) -> list[Any] | Job:
    """A final answer to ``POST /v1/<endpoint>`` (or ``/jobs``): the outputs of a 200, a
    `Job` for a 202 (or the 200 of a job a repeated Idempotency-Key found: it has a
    Location), else raises the error the answer stands for (`error_from_answer`)."""
    if status not in (200, 202):
        raise error_from_answer(status, body,
                                retry_after_s=parse_retry_after(headers.get("retry-after")))
    data = read_json(status, body)
    if status == 202 or "location" in headers:
        if not isinstance(data, dict):
            raise BadResponse(f"HTTP {status}: a job answer that is not an object",
                              status=status)
        return Job.of(data, headers.get("location"))
    outputs = data.get("outputs") if isinstance(data, dict) else None
    if not isinstance(outputs, list):
        raise BadResponse(f"HTTP {status}: no outputs in {body[:200]!r}", status=status)
    return outputs


def url_of(base_url: str, path: str) -> str:
    """`path` (``/v1/...``, as the router's Location gives it) under `base_url` (its own
    path prefix kept), or `path` itself when it is a whole URL."""
    if path.startswith(("http://", "https://")):
        return path
    return base_url.rstrip("/") + "/" + path.lstrip("/")


__all__ = ["RETRIED_ERRORS", "Attempts", "Job", "base_headers",
           "encode_inputs", "new_key", "read_answer", "read_json", "url_of"]
