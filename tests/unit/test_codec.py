"""The hot-path JSON codec: orjson, with the standard library behind it."""

import json
import math

from floodway.codec import dumps, loads


def test_round_trips_floats_exactly_and_compactly() -> None:
    values = [0.1, -1.5e-7, 1 / 3, 123456789.125, 0.0]
    out = dumps({"outputs": [values], "s": "é"})
    assert b" " not in out and "é".encode() in out
    assert loads(out) == json.loads(out) == {"outputs": [values], "s": "é"}


def test_what_orjson_refuses_falls_back_to_the_standard_library() -> None:
    big = 2 ** 80 + 1                      # beyond 64 bits (and a float's precision)
    back = loads(dumps([big]))
    assert back == [big] and isinstance(back[0], int)
    assert loads(dumps([big]).decode()) == [big]   # a text line reads back the same
    assert json.loads(dumps({1: "a"})) == {"1": "a"}   # a non-string key


def test_non_finite_floats_encode_as_null() -> None:
    assert loads(dumps([math.nan, math.inf, 1.0])) == [None, None, 1.0]


def test_the_fallback_writes_non_finite_floats_as_null_too() -> None:
    out = dumps({"outputs": [[2 ** 70, -2 ** 70], [1.5, math.nan, math.inf]]})
    assert b"NaN" not in out and b"Infinity" not in out
    assert json.loads(out) == {"outputs": [[2 ** 70, -2 ** 70], [1.5, None, None]]}
