"""Exception -> error answer: each exception the handlers raise, on a bare Starlette app with
the router's exception handlers, gives its status, JSON body and headers."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from floodway.errors import EndpointError, RequestError, Unauthorized, Unavailable
from floodway.http.errors import (
    EXCEPTION_HANDLERS,
    ClientClosed,
    NoJobQueue,
    Overloaded,
    retry_after,
)
from floodway.http.middleware import notes

RAISED = {
    "bad": RequestError("X-Priority: 'x' is not a priority", status=400, field="X-Priority"),
    "unprocessable": RequestError("inputs[0]: not a string", status=422, field="inputs[0]"),
    "missing": RequestError("no endpoint 'x'", status=404),
    "timeout_body": RequestError("the request body did not arrive", status=408),
    "conflict": RequestError("Idempotency-Key 'k' was already used", status=409),
    "expired": RequestError("job 'j' finished and its result expired", status=410),
    "large": RequestError("request body exceeds the limit", status=413),
    "auth": Unauthorized("the bearer token is not an accepted API key", error="invalid_token"),
    "busy": Unavailable("all busy", retry_after_s=2.5),
    "shed": Overloaded("over capacity", retry_after_s=0.2),
    "rate": Overloaded("tenant over its rate", retry_after_s=1.5, status=429,
                       kind="rate_limited"),
    "broken": EndpointError("endpoint 'e' raised ValueError: boom"),
    "partial": EndpointError("1 of 2 inputs failed", outputs=["A", None],
                             item_errors=[{"index": 1, "message": "bad"}]),
    "late": TimeoutError("endpoint 'e' did not answer within 0.2 s"),
    "gone": ClientClosed("the client closed the connection"),
    "nojobs": NoJobQueue("this router has no async job queue"),
}

EXPECTED = {   # status, error type, headers that must be there
    "bad": (400, "invalid_request", {}),
    "unprocessable": (422, "invalid_request", {}),
    "missing": (404, "not_found", {}),
    "timeout_body": (408, "request_timeout", {}),
    "conflict": (409, "conflict", {}),
    "expired": (410, "expired", {}),
    "large": (413, "too_large", {}),
    "auth": (401, "unauthorized",
             {"www-authenticate": 'Bearer realm="floodway", error="invalid_token"'}),
    "busy": (503, "unavailable", {"retry-after": "3"}),
    "shed": (503, "overloaded", {"retry-after": "1"}),
    "rate": (429, "rate_limited", {"retry-after": "2"}),
    "broken": (500, "endpoint_error", {}),
    "partial": (500, "endpoint_error", {}),
    "late": (504, "deadline_exceeded", {}),
    "gone": (499, "client_closed", {}),
    "nojobs": (501, "not_implemented", {}),
}

async def raising(request):
    raise RAISED[request.path_params["name"]]


def _client() -> TestClient:
    app = Starlette(exception_handlers=EXCEPTION_HANDLERS,
                    routes=[Route("/raise/{name}", raising, methods=["GET"])])
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("name", sorted(RAISED))
def test_each_exception_has_its_answer(name):
    status, kind, headers = EXPECTED[name]
    r = _client().get(f"/raise/{name}")
    assert r.status_code == status
    body = r.json()
    assert body["error"]["type"] == kind and body["error"]["message"] == str(RAISED[name])
    assert body["error"].get("field") == getattr(RAISED[name], "field", None)
    for key, value in headers.items():
        assert r.headers[key] == value
    if "retry-after" not in headers:
        assert "retry-after" not in r.headers   # only "retry later" answers carry it


def test_a_partial_failure_carries_the_good_outputs():
    body = _client().get("/raise/partial").json()
    assert body["outputs"] == ["A", None]
    assert body["item_errors"] == [{"index": 1, "message": "bad"}]
    assert "outputs" not in _client().get("/raise/broken").json()


def test_unknown_paths_and_methods_are_json_errors():
    c = _client()
    unknown, wrong = c.get("/nope"), c.post("/raise/busy")
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"
    assert "GET /nope" in unknown.json()["error"]["message"]
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "method_not_allowed"
    assert "GET" in wrong.headers["allow"]


def test_other_exceptions_are_a_json_500_that_tells_nothing_internal():
    """A bug in the router answers the error shape every client parses, without the
    exception's text (which may hold internals); the log has the details."""
    async def boom(request):
        raise ZeroDivisionError("secret internals")

    app = Starlette(exception_handlers=EXCEPTION_HANDLERS,
                    routes=[Route("/boom", boom, methods=["GET"])])
    r = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    assert "secret" not in r.text and "ZeroDivisionError" not in r.text


def test_the_error_type_is_noted_for_the_metrics():
    noted = {}

    async def note_and_raise(request):
        noted["notes"] = notes(request.scope)
        raise Unavailable("all busy")

    app = Starlette(exception_handlers=EXCEPTION_HANDLERS,
                    routes=[Route("/x", note_and_raise, methods=["GET"])])
    TestClient(app).get("/x")
    assert noted["notes"].error_type == "unavailable"


@pytest.mark.parametrize(("seconds", "header"), [
    (0.0, "1"), (0.001, "1"), (1.0, "1"), (1.01, "2"), (2.5, "3"), (-4, "1"),
])
def test_retry_after_is_whole_seconds_rounded_up_at_least_one(seconds, header):
    assert retry_after(seconds) == header
