"""What both workers share of calling the user's function: outputs as JSON values, errors as
an item's message and traceback, inputs decoded from their wire form, what ends a worker."""

from __future__ import annotations

import enum

import numpy as np
import pytest

import floodway as fw
from floodway.errors import RequestError
from floodway.runtime.calling import (
    MAX_TRACEBACK_CHARS,
    ContractError,
    decode_inputs,
    error_text,
    error_trace,
    is_fatal,
    to_jsonable,
)
from floodway.runtime.protocol import ItemError


class Color(enum.StrEnum):
    RED = "red"


def test_outputs_become_plain_json_values():
    assert to_jsonable({"a": (1, 2), 3: [np.float32(0.5)], "e": Color.RED}) == \
        {"a": [1, 2], "3": [0.5], "e": "red"}
    assert to_jsonable(np.arange(3)) == [0, 1, 2]
    assert to_jsonable(np.array([{"x": np.int64(1)}], dtype=object)) == [{"x": 1}]
    for bad, named in (({1, 2}, "set"), (np.array([1 + 2j]), "complex"), ({(1,): 1}, "tuple")):
        with pytest.raises(ContractError, match=named):
            to_jsonable(bad)


def test_an_error_is_its_type_and_message_and_a_request_error_blames_the_input():
    assert error_text(ValueError("bad \ud800")) == "ValueError: bad \\ud800"
    assert error_text(RequestError("prompt too long")) == "InputError: prompt too long"


def _raise(n: int):
    if n == 0:
        raise KeyError("x" * (2 * MAX_TRACEBACK_CHARS))
    _raise(n - 1)


def test_a_traceback_is_kept_for_the_log_cut_to_its_last_lines():
    try:
        _raise(3)
    except KeyError as e:
        trace = error_trace(e)
    assert trace.startswith("Traceback (cut to its last lines):")
    assert trace.endswith("x'\n") and len(trace) < MAX_TRACEBACK_CHARS + 100
    assert error_trace(ContractError("returned 2 outputs")) == "ContractError: returned 2 outputs"
    assert error_trace(RequestError("the input")) is None


def test_only_ctrl_c_and_a_generators_close_end_the_worker():
    assert is_fatal(KeyboardInterrupt()) and is_fatal(GeneratorExit())
    assert not is_fatal(SystemExit(1)) and not is_fatal(RuntimeError())


def test_inputs_that_do_not_decode_fail_alone_as_input_errors():
    def plain(model, texts: list[str]) -> list[str]:
        return texts

    def arrays(model, xs: list[fw.Array[np.float32, (2,)]]) -> list[float]:
        return [float(x.sum()) for x in xs]

    items = [(0, "a"), (1, "b")]
    assert decode_inputs(plain, 7, items) == (items, [])     # nothing to decode: as they came
    ok, failed = decode_inputs(arrays, 7, [(0, [1.0, 2.0]), (1, [1.0])])
    assert [i for i, _ in ok] == [0] and ok[0][1].dtype == np.float32
    assert len(failed) == 1 and isinstance(failed[0], ItemError)
    assert (failed[0].batch_id, failed[0].item_id) == (7, 1)
    assert failed[0].message.startswith("InputError: ")
