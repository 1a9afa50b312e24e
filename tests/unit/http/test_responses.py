"""Per-input results -> outputs, and the job answers."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from floodway.errors import EndpointError, Unavailable
from floodway.http.responses import job_answer, outputs, prefers


def test_all_outputs_pass_through():
    assert outputs("e", ["a", "b"], ["A", "B"]) == ["A", "B"]


def test_a_bad_item_fails_alone_with_the_others_kept():
    with pytest.raises(EndpointError) as e:
        outputs("e", ["a", "b", "c"], ["A", ValueError("bad"), Unavailable("busy")])
    assert str(e.value) == "2 of 3 inputs failed; first: inputs[1]: bad"
    assert e.value.outputs == ["A", None, None]
    assert e.value.item_errors == [{"index": 1, "message": "bad"},
                                   {"index": 2, "message": "busy"}]


def test_an_error_that_names_its_input_is_not_prefixed_twice():
    told = EndpointError("endpoint 'g': inputs[1]: prompt: too long", status=422,
                         field="inputs[1].prompt", kind="input_error")
    with pytest.raises(EndpointError) as e:
        outputs("g", ["a", "b"], ["A", told])
    assert str(e.value) == "1 of 2 inputs failed; first: endpoint 'g': inputs[1]: prompt: too long"
    assert e.value.status == 422 and e.value.field == "inputs[1].prompt"


def test_only_capacity_failures_are_unavailable():
    busy = Unavailable("busy", retry_after_s=2.0)
    with pytest.raises(Unavailable) as e:
        outputs("e", ["a", "b"], ["A", busy])
    assert e.value is busy


def test_a_wrong_count_is_an_endpoint_error():
    with pytest.raises(EndpointError, match="returned 1 outputs for 2 inputs"):
        outputs("e", ["a", "b"], ["A"])


def _request(prefer: str | None = None) -> Request:
    headers = [] if prefer is None else [(b"prefer", prefer.encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers})


def test_job_answers():
    new = job_answer(_request(), {"id": "j1", "status": "queued"}, True)
    assert new.status_code == 202 and new.headers["location"] == "/v1/jobs/j1"
    assert "preference-applied" not in new.headers
    asked = job_answer(_request("respond-async"), {"id": "j1"}, False)
    assert asked.status_code == 200 and asked.headers["preference-applied"] == "respond-async"
    assert b'"location":"/v1/jobs/j1"' in asked.body


def test_prefer_tokens():
    assert prefers(_request(" Respond-Async , wait=10")) == {"respond-async", "wait"}
    assert "respond-async" in prefers(_request("respond-async; wait=5"))
    assert "respond-async" in prefers(_request("respond-async;x"))
    two = Request({"type": "http", "method": "POST", "path": "/",
                   "headers": [(b"prefer", b"wait=10"), (b"prefer", b"respond-async")]})
    assert prefers(two) == {"wait", "respond-async"}
    assert "respond-async" not in prefers(_request())


def test_outputs_is_a_client_error_only_when_every_failure_was_the_inputs():
    bad = EndpointError("inputs[1]: prompt: too long", status=422, field="inputs[1].prompt",
                        kind="input_error")
    boom = EndpointError("endpoint 'e' raised ValueError: boom")
    with pytest.raises(EndpointError) as only_inputs:
        outputs("e", [1, 2, 3], ["a", bad, "c"])
    with pytest.raises(EndpointError) as mixed:
        outputs("e", [1, 2, 3], [boom, bad, "c"])
    e = only_inputs.value
    assert (e.status, e.kind, e.field) == (422, "input_error", "inputs[1].prompt")
    assert e.outputs == ["a", None, "c"]
    assert (mixed.value.status, mixed.value.kind, mixed.value.field) == (500, None, None)


def test_every_input_past_its_deadline_is_the_requests_timeout_not_an_endpoint_error():
    late = [TimeoutError(f"endpoint 'g': no first chunk within 0.002 s ({i})") for i in (0, 1)]
    with pytest.raises(TimeoutError) as e:
        outputs("g", ["a", "b"], late)
    assert e.value is late[0]
    with pytest.raises(EndpointError) as partial:   # one answered: its output is kept
        outputs("g", ["a", "b"], ["A", late[1]])
    assert partial.value.outputs == ["A", None]
