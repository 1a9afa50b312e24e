"""What `floodway.Client` and `floodway.AsyncClient` raise: leaves of `floodway.errors`'
tree, each under `ClientError` and under the server-side class of the same meaning, so
``except floodway.Unavailable`` catches an overload whether a router or a client saw it.

    FloodwayError
    └── ClientError                       raised by the client; `attempts`: requests made
        ├── ClientConfigError  (ConfigError)    a bad client setting (RetryPolicy, ...)
        ├── BadArgument        (RequestError, ValueError)   a bad argument of a call
        ├── RequestRefused     (RequestError)   a 4xx: the server's message, status, type,
        │   │                                   field (and partial outputs for a 422)
        │   ├── AuthenticationFailed (Unauthorized)   401
        │   └── JobExpired                      410: the job's result is gone
        ├── Overloaded         (Unavailable)    429 / 503 and no retry left for it
        ├── RetryBudgetExhausted (Unavailable)  a retry the client's retry budget refused
        ├── ConnectionFailed   (Unavailable)    no answer: refused, dropped, timed out
        ├── ServerError        (EndpointError)  5xx (not 503): the endpoint failed (500)
        │   └── DeadlineExceeded (TimeoutError) 504: no answer within the deadline
        ├── JobFailed          (EndpointError)  the job ended failed (partial outputs)
        ├── JobTimeout         (TimeoutError)   `wait_s` passed before the job ended
        └── BadResponse                         an answer that is not floodway's wire format

`error_from_answer` maps an HTTP error answer (``{"error": {"type", "message", "field"}}``,
`floodway.http.errors`) to its class; `error_of` does the same for a stream's error event.
"""

from __future__ import annotations

import json
from typing import Any

from floodway.errors import (
    ConfigError,
    EndpointError,
    FloodwayError,
    Problem,
    RequestError,
    Unauthorized,
    Unavailable,
)


class ClientError(FloodwayError):
    """Base of the client's errors. `attempts`: requests the call made (retries
    included), set by the retry loop (0 for an error raised before any request)."""

    attempts: int = 0


class ClientConfigError(ClientError, ConfigError):
    """A client setting is invalid; `problems` lists every one (field, value, allowed)."""

    def __init__(self, problems: list[Problem]):
        self.endpoint = None
        self.problems = list(problems)
        lines = [f"{p.field} = {p.value!r} is not allowed; allowed: {p.allowed}"
                 for p in self.problems]
        Exception.__init__(self, "\n  ".join(
            [f"{len(lines)} problem(s) in the client's settings:", *lines]))


class BadArgument(ClientError, RequestError, ValueError):
    """An argument of a call is invalid (raised before any request): `field` names it,
    the message gives the value and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str):
        RequestError.__init__(self, f"{field} = {value!r} is not allowed; allowed: {allowed}",
                              status=400, field=field)


class RequestRefused(ClientError, RequestError):
    """The server refused the request (4xx). `status`, `kind` (the wire error type:
    invalid_request, input_error, too_large, ...), `field` (the header or input to blame,
    e.g. ``X-Priority`` or ``inputs[3]``); the message is the server's. `outputs` and
    `item_errors`: a request of which only some items failed (None otherwise)."""

    def __init__(self, message: str, *, status: int, kind: str, field: str | None = None,
                 outputs: list | None = None, item_errors: list[dict] | None = None):
        RequestError.__init__(self, message, status=status, field=field)
        self.kind, self.outputs, self.item_errors = kind, outputs, item_errors


class AuthenticationFailed(RequestRefused, Unauthorized):
    """401: no API key, or one the router does not accept (`Client(api_key=...)`)."""

    def __init__(self, message: str, *, status: int = 401, kind: str = "unauthorized",
                 field: str | None = "Authorization", **_: Any):
        RequestRefused.__init__(self, message, status=status, kind=kind,
                                field=field or "Authorization")
        self.error = None


class JobExpired(RequestRefused):
    """410: the job finished and its result expired (the router keeps it `--job-ttl-s`)."""


class Overloaded(ClientError, Unavailable):
    """429 (the tenant over its rate) or 503 (shed, no capacity), and no retry left: the
    retries were used up, the deadline would pass first, or the server asked for a wait
    over `RetryPolicy.max_retry_after_s`. `retry_after_s`: the server's last Retry-After."""

    def __init__(self, message: str, *, status: int, kind: str, retry_after_s: float = 1.0,
                 field: str | None = None, **_: Any):
        Unavailable.__init__(self, message, retry_after_s=retry_after_s)
        self.status, self.kind, self.field = status, kind, field


class RetryBudgetExhausted(ClientError, Unavailable):
    """A retry this client's retry budget refused (`floodway.client.retry.RetryBudget`:
    retries past a fifth of the calls and a small floor per second). `last`: the error the
    retry was for (Overloaded or ConnectionFailed; also this error's ``__cause__``);
    `retry_after_s`: when the budget has a token again, or the server's wait if longer."""

    def __init__(self, message: str, *, last: ClientError, retry_after_s: float):
        Unavailable.__init__(self, message, retry_after_s=retry_after_s)
        self.last = last


class ConnectionFailed(ClientError, Unavailable):
    """No answer: the connection was refused, dropped before the answer or mid-stream, or
    timed out (`Client(timeout_s=...)`); the message names the transport error."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        Unavailable.__init__(self, message, retry_after_s=retry_after_s)


class ServerError(ClientError, EndpointError):
    """A 5xx answer other than 503: the endpoint function raised (500 endpoint_error, with
    `outputs` and `item_errors` when only some items failed), or the router failed."""

    def __init__(self, message: str, *, status: int, kind: str, field: str | None = None,
                 outputs: list | None = None, item_errors: list[dict] | None = None):
        EndpointError.__init__(self, message, outputs=outputs, item_errors=item_errors,
                               status=status, field=field, kind=kind)


class DeadlineExceeded(ServerError, TimeoutError):
    """504: the router had no answer within the request's deadline (``X-Deadline-Ms``)."""


class JobFailed(ClientError, EndpointError):
    """The job ended failed. `job_id`; the message is the job's error; `outputs` (None per
    failed item) and `item_errors` when only some items failed."""

    def __init__(self, message: str, *, job_id: str, outputs: list | None = None,
                 item_errors: list[dict] | None = None):
        EndpointError.__init__(self, message, outputs=outputs, item_errors=item_errors)
        self.job_id = job_id


class JobTimeout(ClientError, TimeoutError):
    """The job did not end within the call's `wait_s`. It still runs: `job_id` and
    `location` name it, `Client.result(job_id)` waits again; `status` is the last seen."""

    def __init__(self, message: str, *, job_id: str, location: str, status: str):
        Exception.__init__(self, message)
        self.job_id, self.location, self.status = job_id, location, status


class BadResponse(ClientError):
    """An answer the client cannot read as floodway's wire format (not JSON, a missing
    member, an unexpected status); `status` is the HTTP status."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


# A stream error event's type -> the status its HTTP answer would have had.
KIND_STATUS = {"input_error": 422, "too_large": 413, "slow_client": 400,
               "invalid_request": 400, "deadline_exceeded": 504, "unavailable": 503,
               "overloaded": 503, "rate_limited": 429, "endpoint_error": 500,
               "internal_error": 500}


def error_of(status: int, kind: str, message: str, field: str | None = None, *,
             retry_after_s: float | None = None, outputs: list | None = None,
             item_errors: list[dict] | None = None) -> ClientError:
    """The error for an answer of `status` with wire type `kind`, `message`, `field`."""
    extra: dict[str, Any] = {"status": status, "kind": kind, "field": field}
    if status in (429, 503):
        return Overloaded(message, retry_after_s=1.0 if retry_after_s is None
                          else retry_after_s, **extra)
    if status == 401:
        return AuthenticationFailed(message, **extra)
    partial = {"outputs": outputs, "item_errors": item_errors}
    if status == 410:
        return JobExpired(message, **extra, **partial)
    if 400 <= status < 500:
        return RequestRefused(message, **extra, **partial)
    if status == 504:
        return DeadlineExceeded(message, **extra, **partial)
    if 500 <= status < 600:
        return ServerError(message, **extra, **partial)
    return BadResponse(f"unexpected HTTP {status}: {message}", status=status)


def error_from_answer(status: int, body: bytes, *,
                      retry_after_s: float | None = None) -> ClientError:
    """The error an HTTP error answer stands for: the server's message, type and field
    from its ``{"error": {...}}`` body; for a body that is not one (a proxy's page), its
    first 200 characters as the message and the status's generic type."""
    try:
        data = json.loads(body)
        detail = data["error"]
        message, kind = str(detail["message"]), str(detail["type"])
        field = detail.get("field")
    except (ValueError, TypeError, KeyError):
        text = body[:200].decode("utf-8", "replace").strip()
        return error_of(status, "http_error", text or f"HTTP {status}",
                        retry_after_s=retry_after_s)
    return error_of(status, kind, message, field if isinstance(field, str) else None,
                    retry_after_s=retry_after_s, outputs=data.get("outputs"),
                    item_errors=data.get("item_errors"))


__all__ = ["KIND_STATUS", "AuthenticationFailed", "BadArgument", "BadResponse", "ClientConfigError",
           "ClientError", "ConnectionFailed", "DeadlineExceeded", "JobExpired", "JobFailed",
           "JobTimeout", "Overloaded", "RequestRefused", "RetryBudgetExhausted",
           "ServerError", "error_from_answer", "error_of"]
