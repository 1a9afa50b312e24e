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


def test_too_many_inputs_is_413_naming_the_limit():
    with pytest.raises(RequestError) as info:
        parse_predict(b'{"inputs": ["a", "b", "c"]}', str, max_inputs=2)
    assert info.value.status == 413 and "has 3 items" in str(info.value)
    assert "at most 2 per request" in str(info.value)
    assert parse_predict(b'{"inputs": ["a", "b"]}', str, max_inputs=2) == ["a", "b"]


def test_lone_surrogate_is_422_naming_the_item():
    e = err(b'{"inputs": ["ok", "\\ud800"]}')
    assert e.status == 422 and e.field == "inputs[1]" and "not valid Unicode" in str(e)


def test_deep_nesting_is_400():
    e = err(b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert e.status == 400 and "nested too deeply" in str(e)


def test_a_huge_integer_is_a_plain_400():
    from floodway.errors import RequestError
    from floodway.routers.schema import parse_predict

    with pytest.raises(RequestError) as info:
        parse_predict(b'{"inputs": [' + b"9" * 5000 + b"]}", str, max_inputs=8)
    assert info.value.status == 400 and "too many digits" in str(info.value)
    assert "sys.set_int_max_str_digits" not in str(info.value)


def test_too_many_items_are_refused_before_any_item_is_validated():
    # 200,000 items that are not strings: validated one by one they would be a 422 naming
    # inputs[0]; counted first, they are a 413 (and cost one look, not 200,000 checks).
    many = b'{"inputs": [' + b",".join([b"[]"] * 200_000) + b"]}"
    with pytest.raises(RequestError) as e:
        parse_predict(many, str, max_inputs=256)
    assert e.value.status == 413 and "200000 items" in str(e.value)
    keys = b"{" + b",".join(b'"k%d": 1' % i for i in range(50_000)) + b', "inputs": ["a"]}'
    e2 = err(keys)
    assert e2.status == 422 and "unknown field 'k0'" in str(e2) and e2.field == "k0"


def test_a_body_that_is_not_an_object_names_the_json_type():
    assert "got array" in str(err(b'["a"]'))
    assert "got null" in str(err(b"null"))
    assert "got string" in str(err(b'"a"'))
