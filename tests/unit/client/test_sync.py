"""`floodway.Client` against scripted answers (httpx.MockTransport) on fake time: what each
attempt sends, when it retries and how long it waits, how jobs are followed, and which
typed error each failure raises."""

from __future__ import annotations

import json
import random
import re

import httpx
import pytest

import floodway as fw
from floodway.client import (
    AuthenticationFailed,
    BadArgument,
    ClientConfigError,
    ConnectionFailed,
    DeadlineExceeded,
    Job,
    Overloaded,
    RequestRefused,
    RetryBudgetExhausted,
    RetryPolicy,
    ServerError,
)
from tests.unit.client.fakes import FakeTime, error, mock_http


def client_of(handler, t: FakeTime, **kw) -> fw.Client:
    return fw.Client("http://router", http=mock_http(handler), clock=t.monotonic,
                     sleep=t.sleep, rng=random.Random(7), **kw)


def shed(retry_after: str = "1", status: int = 503) -> httpx.Response:
    return error(status, "overloaded", "endpoint 'upper' is over capacity: queue full",
                 headers={"Retry-After": retry_after})


def test_503_twice_then_200_is_three_attempts_spaced_by_retry_after_under_one_key():
    t = FakeTime()
    seen: list[tuple[float, httpx.Request]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((t.now, request))
        return shed("1") if len(seen) <= 2 else httpx.Response(200, json={"outputs": ["A"]})

    assert client_of(handler, t).call("upper", ["a"], deadline_ms=10_000) == ["A"]
    assert len(seen) == 3
    assert len(t.sleeps) == 2 and all(1.0 <= s <= 1.25 for s in t.sleeps)   # +25% at most
    times = [when for when, _ in seen]
    assert all(b - a >= 1.0 for a, b in zip(times, times[1:], strict=False))
    keys = {r.headers["idempotency-key"] for _, r in seen}
    assert len(keys) == 1 and re.fullmatch(r"[0-9a-f]{32}", keys.pop())
    # what is left of the deadline, at each attempt
    left = [int(r.headers["x-deadline-ms"]) for _, r in seen]
    assert left[0] == 10_000 and left[1] <= 9_000 and left[2] <= left[1] - 1_000
    assert all(json.loads(r.content) == {"inputs": ["a"]} for _, r in seen)


def test_every_call_has_its_own_key_and_the_jitter_spreads_the_waits():
    t = FakeTime()
    keys: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["idempotency-key"])
        return shed("2") if len(keys) % 2 else httpx.Response(200, json={"outputs": [1]})

    c = client_of(handler, t)
    for _ in range(20):
        c.call("upper", ["a"])
    assert len(keys) == 40 and len(set(keys)) == 20 and keys[0::2] == keys[1::2]
    assert all(2.0 <= s <= 2.5 for s in t.sleeps)
    assert max(t.sleeps) - min(t.sleeps) > 0.2   # not all clients back at the same instant


def test_headers_priority_key_and_json_body():
    t = FakeTime()
    got: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        got.append(request)
        return httpx.Response(200, json={"outputs": [[0.5, 1.0]]})

    c = client_of(handler, t, api_key="s3cret")
    assert c.call("embed", ["hi"], priority="high") == [[0.5, 1.0]]
    r = got[0]
    assert (r.method, str(r.url)) == ("POST", "http://router/v1/embed")
    assert r.headers["authorization"] == "Bearer s3cret"
    assert r.headers["x-priority"] == "high"
    assert r.headers["content-type"] == "application/json"
    assert "x-deadline-ms" not in r.headers   # none asked: the route's timeout applies


def test_retries_used_up_raise_overloaded_with_the_servers_message():
    t = FakeTime()
    calls = []

    def handler(request):
        calls.append(request)
        return shed("1", status=429)

    with pytest.raises(Overloaded) as e:
        client_of(handler, t, retry=RetryPolicy(max_retries=2)).call("upper", ["a"])
    assert len(calls) == 3 and e.value.attempts == 3
    assert e.value.status == 429 and e.value.retry_after_s == 1.0
    assert "queue full" in str(e.value) and isinstance(e.value, fw.Unavailable)


def test_no_retry_past_the_deadline_or_past_max_retry_after():
    t = FakeTime()
    calls = []

    def handler(request):
        calls.append(request)
        return shed("5")

    c = client_of(handler, t)
    with pytest.raises(Overloaded):
        c.call("upper", ["a"], deadline_ms=3_000)   # a 5 s wait would end past it
    assert len(calls) == 1 and t.sleeps == []
    c = client_of(handler, t, retry=RetryPolicy(max_retry_after_s=4))
    with pytest.raises(Overloaded) as e:
        c.call("upper", ["a"])
    assert len(calls) == 2 and t.sleeps == [] and e.value.retry_after_s == 5.0


def test_refused_and_dropped_connections_are_retried_under_the_same_key():
    t = FakeTime()
    keys = []

    def handler(request):
        keys.append(request.headers["idempotency-key"])
        if len(keys) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        if len(keys) == 2:
            raise httpx.RemoteProtocolError("server disconnected", request=request)
        return httpx.Response(200, json={"outputs": ["A"]})

    assert client_of(handler, t).call("upper", ["a"]) == ["A"]
    assert len(keys) == 3 and len(set(keys)) == 1
    # backoff without Retry-After: 0.1 s, then 0.2 s (each up to 25% more)
    assert 0.1 <= t.sleeps[0] <= 0.125 and 0.2 <= t.sleeps[1] <= 0.25


def test_a_read_timeout_is_not_retried():
    t = FakeTime()
    calls = []

    def handler(request):
        calls.append(request)
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ConnectionFailed) as e:
        client_of(handler, t).call("upper", ["a"])
    assert len(calls) == 1 and e.value.attempts == 1 and "ReadTimeout" in str(e.value)


def test_an_empty_retry_budget_raises_retry_budget_exhausted():
    t = FakeTime()
    calls = []

    def handler(request):
        calls.append(request)
        return shed("0")

    policy = RetryPolicy(max_retries=3, budget_max_tokens=2, budget_ratio=0.0,
                         budget_min_per_s=0.0)
    c = client_of(handler, t, retry=policy)
    with pytest.raises(RetryBudgetExhausted) as first:
        c.call("upper", ["a"])
    assert len(calls) == 3   # the first attempt and the 2 retries the budget held
    assert isinstance(first.value.last, Overloaded) and first.value.__cause__ is first.value.last
    with pytest.raises(RetryBudgetExhausted) as second:
        c.call("upper", ["b"])
    assert len(calls) == 4 and second.value.attempts == 1   # no token left: no retry


def test_a_202_is_followed_to_the_jobs_result_honoring_retry_after():
    t = FakeTime()
    polls: list[float] = []

    def handler(request):
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v1/jobs/j1"},
                                  json={"id": "j1", "status": "queued", "endpoint": "upper"})
        assert request.url.path == "/v1/jobs/j1"
        polls.append(t.now)
        if len(polls) == 1:
            return httpx.Response(200, json={"id": "j1", "status": "queued"})
        if len(polls) == 2:   # a gateway in front of the router, shedding the poll
            return shed("3")
        if len(polls) == 3:
            return httpx.Response(200, json={"id": "j1", "status": "running"})
        return httpx.Response(200, json={"id": "j1", "status": "succeeded", "outputs": ["A"]})

    assert client_of(handler, t).call("upper", ["a"]) == ["A"]
    assert len(polls) == 4
    assert 0.1 <= t.sleeps[0] <= 0.125          # the first poll soon
    assert t.sleeps[2] >= 3.0                     # never sooner than the Retry-After


def test_a_failed_job_an_expired_one_and_a_wait_that_runs_out():
    t = FakeTime()
    state = {"wire": {"id": "j1", "status": "failed", "error": "1 of 2 inputs failed",
                      "outputs": ["A", None], "item_errors": [{"index": 1, "message": "x"}]}}

    def handler(request):
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v1/jobs/j1"},
                                  json={"id": "j1", "status": "queued"})
        if state["wire"] is None:
            return error(410, "expired", "job 'j1' finished and its result expired")
        return httpx.Response(200, json=state["wire"])

    c = client_of(handler, t)
    with pytest.raises(fw.client.JobFailed) as failed:
        c.call("upper", ["a", "b"])
    assert failed.value.job_id == "j1" and failed.value.outputs == ["A", None]
    assert str(failed.value) == "1 of 2 inputs failed"
    state["wire"] = None
    with pytest.raises(fw.client.JobExpired) as gone:
        c.result("j1")
    assert gone.value.status == 410 and isinstance(gone.value, fw.RequestError)
    state["wire"] = {"id": "j1", "status": "running"}
    start = t.now
    with pytest.raises(fw.client.JobTimeout) as late:
        c.call("upper", ["a"], wait_s=10)
    assert late.value.job_id == "j1" and late.value.status == "running"
    assert isinstance(late.value, TimeoutError) and t.now - start == pytest.approx(10)
    with pytest.raises(fw.client.JobTimeout):
        c.call("upper", ["a"], wait_s=0)   # no waiting at all: the job is in the error


def test_submit_returns_the_job_and_a_repeated_keys_done_job_needs_no_poll():
    t = FakeTime()
    gets = []

    def handler(request):
        if request.method == "GET":
            gets.append(request)
        assert request.url.path == "/v1/upper/jobs"
        return httpx.Response(200, headers={"Location": "/v1/jobs/j9"},
                              json={"id": "j9", "status": "succeeded", "outputs": ["A"]})

    c = client_of(handler, t)
    job = c.submit("upper", ["a"], idempotency_key="order-17")
    assert (job.id, job.location, job.status) == ("j9", "/v1/jobs/j9", "succeeded")
    assert c.result(job) == ["A"] and gets == []


@pytest.mark.parametrize("answer,cls,status,field", [
    (error(422, "invalid_request", "inputs[0]: Input should be a valid string",
           "inputs[0]"), RequestRefused, 422, "inputs[0]"),
    (error(400, "invalid_request", "X-Priority: 'urgent' is not a priority", "X-Priority"),
     RequestRefused, 400, "X-Priority"),
    (error(401, "unauthorized", "no API key"), AuthenticationFailed, 401, "Authorization"),
    (error(500, "endpoint_error", "1 of 2 inputs failed", outputs=["A", None],
           item_errors=[{"index": 1, "message": "boom"}]), ServerError, 500, None),
    (error(504, "deadline_exceeded", "endpoint 'upper' did not answer within 0.2 s"),
     DeadlineExceeded, 504, None),
    (httpx.Response(502, text="<html>Bad Gateway</html>"), ServerError, 502, None),
])
def test_error_answers_raise_typed_errors_with_the_servers_message_and_field(
        answer, cls, status, field):
    t = FakeTime()
    calls = []

    def handler(request):
        calls.append(request)
        return answer

    with pytest.raises(cls) as e:
        client_of(handler, t).call("upper", ["a", "b"])
    assert len(calls) == 1   # not retried
    assert e.value.status == status and e.value.field == field
    body = answer.content.decode()
    assert str(e.value) in body   # the server's own message
    if status == 500:
        assert e.value.outputs == ["A", None] and e.value.item_errors[0]["index"] == 1


def test_bad_settings_and_arguments_are_named_before_any_request():
    with pytest.raises(ClientConfigError) as e:
        RetryPolicy(max_retries=-1, jitter_ratio=2.0)
    assert "retry.max_retries = -1" in str(e.value) and "retry.jitter_ratio = 2.0" in str(e.value)
    assert isinstance(e.value, fw.ConfigError)
    with pytest.raises(ClientConfigError, match="base_url = 'localhost:8000'"):
        fw.Client("localhost:8000")
    t = FakeTime()
    calls = []
    c = client_of(lambda r: calls.append(r), t)
    for kw, field in (({"deadline_ms": 0}, "deadline_ms"), ({"wait_s": -1}, "wait_s"),
                      ({"idempotency_key": "a b"}, "idempotency_key")):
        with pytest.raises(BadArgument) as bad:
            if field == "wait_s":
                c.result("j1", **kw)
            else:
                c.call("upper", ["a"], **kw)
        assert bad.value.field == field and isinstance(bad.value, ValueError)
    with pytest.raises(BadArgument, match="inputs"):
        c.call("upper", "not a list")
    assert calls == []


def test_a_base_url_with_a_path_keeps_it_for_calls_and_job_locations():
    t = FakeTime()
    urls = []

    def handler(request):
        urls.append(str(request.url))
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v1/jobs/j1"},
                                  json={"id": "j1", "status": "queued"})
        return httpx.Response(200, json={"id": "j1", "status": "succeeded", "outputs": [2]})

    c = fw.Client("http://router/prefix/", http=mock_http(handler), clock=t.monotonic,
                  sleep=t.sleep)
    assert c.call("upper", ["a"]) == [2]
    assert urls == ["http://router/prefix/v1/upper", "http://router/prefix/v1/jobs/j1"]
    assert isinstance(c.get_job("j1"), Job)


def test_a_poll_that_fails_to_connect_is_made_again_and_an_unknown_job_is_refused():
    t = FakeTime()
    polls = []

    def handler(request):
        polls.append(request)
        if request.url.path == "/v1/jobs/gone":
            return error(404, "not_found", "no job 'gone' (unknown, purged after its TTL, "
                         "or another tenant's)")
        if len(polls) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"id": "j1", "status": "succeeded", "outputs": [7]})

    c = client_of(handler, t)
    assert c.result("j1") == [7] and len(polls) == 2
    assert t.sleeps[1] >= 0.15   # backed off: the second wait is longer than the first
    with pytest.raises(RequestRefused) as e:
        c.result("gone")
    assert e.value.status == 404 and "no job 'gone'" in str(e.value)
