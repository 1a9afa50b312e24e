"""Wire format validation: each bad body gets a 4xx whose message names the problem."""

from typing import Any

import pytest

from floodway.errors import RequestError
from floodway.routers.schema import error_body, parse_predict


def err(body: bytes, item_type: Any = str) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_predict(body, item_type)
    return info.value


def test_valid_inputs_pass_through():
    assert parse_predict(b'{"inputs": ["a", "b"]}', str) == ["a", "b"]
    assert parse_predict(b'{"inputs": [[1, 2.5]]}', list[float]) == [[1.0, 2.5]]


@pytest.mark.parametrize("body,status,needle,field", [
    (b'{"inputs": ["a",', 400, "not valid JSON", None),
    (b"\xff\xfe", 400, "not valid JSON", None),
    (b'["a"]', 400, "must be a JSON object", None),
    (b"{}", 422, "missing required field 'inputs'", "inputs"),
    (b'{"input": ["a"]}', 422, "missing required field 'inputs'", "inputs"),
    (b'{"inputs": ["a"], "extra": 1}', 422, "unknown field 'extra'", "extra"),
    (b'{"inputs": "a"}', 422, "inputs: Input should be a valid list", "inputs"),
    (b'{"inputs": []}', 422, "'inputs' is empty", "inputs"),
    (b'{"inputs": ["a", 3, null]}', 422, "inputs[1]: Input should be a valid string, got 3 "
                                         "(and 1 more)", "inputs[1]"),
])
def test_bad_bodies(body, status, needle, field):
    e = err(body)
    assert e.status == status
    assert needle in str(e)
    assert e.field == field


def test_long_bad_item_is_truncated_in_message():
    e = err(b'{"inputs": [{"k": "' + b"x" * 500 + b'"}]}')
    assert len(str(e)) < 200 and str(e).endswith("...")


def test_error_body_shape():
    assert error_body("invalid_request", "m", "inputs") == {
        "error": {"type": "invalid_request", "message": "m", "field": "inputs"}}
    assert error_body("unavailable", "m") == {"error": {"type": "unavailable", "message": "m"}}
