"""The client's errors: each answer maps to its class, under the server-side class of the
same meaning, carrying the server's message and field; every one survives a pickle."""

from __future__ import annotations

import json
import pickle

import pytest

import floodway as fw
from floodway.client import errors as ce


def body(kind: str, message: str, field: str | None = None, **extra) -> bytes:
    detail = {"type": kind, "message": message} | ({"field": field} if field else {})
    return json.dumps({"error": detail, **extra}).encode()


@pytest.mark.parametrize("status,kind,cls,bases", [
    (400, "invalid_request", ce.RequestRefused, (fw.RequestError,)),
    (401, "unauthorized", ce.AuthenticationFailed, (fw.Unauthorized, fw.RequestError)),
    (404, "not_found", ce.RequestRefused, (fw.RequestError,)),
    (410, "expired", ce.JobExpired, (ce.RequestRefused,)),
    (413, "too_large", ce.RequestRefused, (fw.RequestError,)),
    (422, "input_error", ce.RequestRefused, (fw.RequestError,)),
    (429, "rate_limited", ce.Overloaded, (fw.Unavailable,)),
    (503, "overloaded", ce.Overloaded, (fw.Unavailable,)),
    (500, "endpoint_error", ce.ServerError, (fw.EndpointError,)),
    (504, "deadline_exceeded", ce.DeadlineExceeded, (fw.EndpointError, TimeoutError)),
    (302, "http_error", ce.BadResponse, (ce.ClientError,)),
])
def test_each_status_maps_to_its_class(status, kind, cls, bases):
    e = ce.error_from_answer(status, body(kind, "the server's words", "inputs[2]"),
                             retry_after_s=4.0)
    assert type(e) is cls and isinstance(e, ce.ClientError) and isinstance(e, fw.FloodwayError)
    assert all(isinstance(e, b) for b in bases)
    if cls is not ce.BadResponse:
        assert str(e) == "the server's words" and e.status == status
    if isinstance(e, ce.Overloaded):
        assert e.retry_after_s == 4.0 and e.kind == kind
    elif isinstance(e, ce.RequestRefused) and status != 401:
        assert e.field == "inputs[2]" and e.kind == kind


def test_a_body_that_is_not_floodways_still_gives_a_typed_error():
    e = ce.error_from_answer(503, b"<html>upstream busy</html>")
    assert isinstance(e, ce.Overloaded) and e.retry_after_s == 1.0
    assert "upstream busy" in str(e)
    assert str(ce.error_from_answer(500, b"")) == "HTTP 500"


ERRORS = [
    ce.ClientConfigError([fw.Problem("retry.max_retries", -1, "an integer in [0, 100]")]),
    ce.BadArgument("deadline_ms", 0, "milliseconds in (0, 3600000]"),
    ce.RequestRefused("inputs[0]: bad", status=422, kind="input_error", field="inputs[0]"),
    ce.AuthenticationFailed("no key"),
    ce.JobExpired("gone", status=410, kind="expired"),
    ce.Overloaded("busy", status=503, kind="overloaded", retry_after_s=2.0),
    ce.RetryBudgetExhausted("empty", last=ce.ConnectionFailed("refused"), retry_after_s=1.0),
    ce.ConnectionFailed("refused"),
    ce.ServerError("boom", status=500, kind="endpoint_error", outputs=[1, None]),
    ce.DeadlineExceeded("late", status=504, kind="deadline_exceeded"),
    ce.JobFailed("failed", job_id="j1", outputs=None),
    ce.JobTimeout("still running", job_id="j1", location="/v1/jobs/j1", status="running"),
    ce.BadResponse("not JSON", status=200),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_every_client_error_pickles_to_an_equal_one(err):
    err.attempts = 3
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert back.__dict__.keys() == err.__dict__.keys() and back.attempts == 3
