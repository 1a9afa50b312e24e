"""The router <-> worker messages: their wire form, round trips, and clear errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floodway.errors import FloodwayError, ProtocolError
from floodway.runtime.protocol import (
    FROM_WORKER,
    TO_WORKER,
    Batch,
    BatchDone,
    Cancel,
    Chunk,
    Failed,
    ItemError,
    ItemResult,
    Load,
    Phase,
    Ping,
    Pong,
    Ready,
    decode,
    decode_all,
    encode,
    encode_all,
    encode_lines,
)

EVERY_KIND = [
    Batch(3, (("r1:0", "text"), ("r1:1", {"a": [1, 2]}))),
    Ping(),
    Phase("warming"),
    Ready({"imports": 0.25, "warmup": 0.5}, "onnxruntime-cpu", False, 4242),
    Failed("ImportError: no module named nowhere"),
    Pong(),
    ItemResult(3, "r1:0", [0.1, -2.5e-7, 1 / 3]),
    ItemError(3, "r1:1", "ValueError: bad input"),
    Chunk(3, "r1:0", 0, {"token": "hi"}),
    BatchDone(3, 0.0125, 2),
    Cancel(3, "r1:0"),
    Load(3, 1200, 8192),
]


@pytest.mark.parametrize("msg", EVERY_KIND, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_as_one_json_line(msg):
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["type"] == msg.TYPE
    assert decode(line) == msg
    assert decode(line.decode()) == msg   # a text line too


def test_directions():
    assert {type(m) for m in EVERY_KIND} == set(TO_WORKER) | set(FROM_WORKER)
    assert decode(encode(Ping()), TO_WORKER) == Ping()
    with pytest.raises(ProtocolError, match="'pong' message is not expected here"):
        decode(encode(Pong()), TO_WORKER)
    with pytest.raises(ProtocolError, match="'batch' message is not expected here"):
        decode(encode(Batch(1, ())), FROM_WORKER)


def test_cancel_goes_to_the_worker_and_load_comes_back():
    assert decode(encode(Cancel(3, "r1:0")), TO_WORKER) == Cancel(3, "r1:0")
    assert json.loads(encode(Cancel(3, "r1:0"))) == {"type": "cancel", "batch_id": 3,
                                                     "item_id": "r1:0"}
    assert json.loads(encode(Load(3, 1200, 8192))) == {
        "type": "load", "active_sequences": 3, "kv_cache_tokens": 1200,
        "kv_cache_capacity": 8192}
    with pytest.raises(ProtocolError, match="'load' message is not expected here"):
        decode(encode(Load(0, 0, 0)), TO_WORKER)
    with pytest.raises(ProtocolError, match="'cancel' message is not expected here"):
        decode(encode(Cancel(1, 0)), FROM_WORKER)


@pytest.mark.parametrize("line, says", [
    (b'{"type":"cancel","batch_id":"3","item_id":"a"}', "field 'batch_id' = '3' is not int"),
    (b'{"type":"cancel","batch_id":3,"item_id":true}', "field 'item_id' = True"),
    (b'{"type":"cancel","batch_id":3}', r"missing fields \['item_id'\]"),
    (b'{"type":"load","active_sequences":1.5,"kv_cache_tokens":0,"kv_cache_capacity":0}',
     "field 'active_sequences' = 1.5 is not int"),
    (b'{"type":"load","active_sequences":1,"kv_cache_tokens":0,"kv_cache_capacity":0,"x":1}',
     r"unexpected \['x'\]"),
    (b'{"type":"load","active_sequences":-1,"kv_cache_tokens":0,"kv_cache_capacity":0}',
     "a negative count"),
])
def test_cancel_and_load_are_checked_against_their_schema(line, says):
    with pytest.raises(ProtocolError, match=says):
        decode(line)


def test_wire_form_is_stable():
    """What a worker prints is read by tools and tests as plain JSON."""
    assert json.loads(encode(Failed("ImportError: x"))) == {"type": "failed",
                                                            "error": "ImportError: x"}
    assert json.loads(encode(ItemResult(7, "r:0", [1.5]))) == {
        "type": "item", "batch_id": 7, "item_id": "r:0", "output": [1.5]}
    assert json.loads(encode(BatchDone(7, 0.5, 32))) == {
        "type": "done", "batch_id": 7, "compute_s": 0.5, "rows": 32}
    assert decode(b'{"type":"batch","id":1,"items":[["r1:0","again"]]}\n') == \
        Batch(1, (("r1:0", "again"),))


def test_messages_known_together_share_a_line():
    msgs = [ItemResult(2, "a", [1.0]), ItemError(2, "b", "ValueError: x"), BatchDone(2, 0.5, 2)]
    line = encode_all(msgs)
    assert line.count(b"\n") == 1 and [m["type"] for m in json.loads(line)] == \
        ["item", "item_error", "done"]
    assert decode_all(line, FROM_WORKER) == msgs
    assert encode_all(msgs[:1]) == encode(msgs[0])   # one message: a plain object line
    assert decode_all(encode(Pong()), FROM_WORKER) == [Pong()]
    with pytest.raises(ValueError):
        encode_all([])
    with pytest.raises(ProtocolError, match="not a JSON object"):
        decode(line)   # `decode` takes one message


@pytest.mark.parametrize("line, says", [
    (b"[]\n", "non-empty array"),
    (b"7\n", "non-empty array"),
    (b'[{"type": "pong"}, 3]\n', "an array element is not a JSON object"),
    (b'[{"type": "pong"}, {"type": "ping"}]\n', "'ping' message is not expected here"),
])
def test_malformed_arrays_raise_a_clear_protocol_error(line, says):
    with pytest.raises(ProtocolError, match=says):
        decode_all(line, FROM_WORKER)


def test_messages_are_frozen():
    msg = ItemResult(1, "a", 2)
    with pytest.raises(AttributeError):
        msg.output = 3
    assert not hasattr(msg, "__dict__")   # slots


def test_integer_item_ids_and_integral_seconds():
    assert decode(encode(ItemResult(1, 0, "x"))) == ItemResult(1, 0, "x")
    done = decode(b'{"type":"done","batch_id":1,"compute_s":1,"rows":2}')
    assert done == BatchDone(1, 1.0, 2) and isinstance(done.compute_s, float)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(batch_id=st.integers(0, 2 ** 62), item_id=st.text() | st.integers(0, 2 ** 62),
       output=JSON)
def test_any_json_output_round_trips(batch_id, item_id, output):
    assert decode(encode(ItemResult(batch_id, item_id, output))) == \
        ItemResult(batch_id, item_id, output)
    assert decode(encode(Chunk(batch_id, item_id, 5, output))) == \
        Chunk(batch_id, item_id, 5, output)


@given(items=st.lists(st.tuples(st.text() | st.integers(0, 99), JSON), max_size=5))
def test_any_batch_round_trips(items):
    assert decode(encode(Batch(1, tuple(items)))) == Batch(1, tuple(items))


@pytest.mark.parametrize("line, says", [
    (b"not json\n", "not a JSON line"),
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"id": 1, "items": []}\n', "unknown message type None"),
    (b'{"type": "result", "id": 1}\n', "unknown message type 'result'"),
    (b'{"type": ["item"]}\n', "unknown message type ['item']"),
    (b'{"type": "item", "batch_id": 1, "item_id": "a"}\n',
     "'item' message: missing fields ['output'], unexpected []"),
    (b'{"type": "pong", "extra": 1}\n', "'pong' message: missing fields [], unexpected ['extra']"),
    (b'{"type": "done", "batch_id": "1", "compute_s": 0.1, "rows": 1}\n',
     "field 'batch_id' = '1' is not int"),
    (b'{"type": "done", "batch_id": true, "compute_s": 0.1, "rows": 1}\n',
     "field 'batch_id' = True is not int"),
    (b'{"type": "done", "batch_id": 1, "compute_s": null, "rows": 1}\n',
     "field 'compute_s' = None is not int or float"),
    (b'{"type": "ready", "timings_s": {}, "backend": "x", "torch": 0, "pid": 1}\n',
     "field 'torch' = 0 is not bool"),
    (b'{"type": "item", "batch_id": 1, "item_id": 1.5, "output": 1}\n',
     "field 'item_id' = 1.5 is not str or int"),
    (b'{"type": "batch", "id": 1, "items": [["a", 1, 2]]}\n',
     "an item is not an [item_id, input] pair"),
    (b'{"type": "batch", "id": 1, "items": {"a": 1}}\n', "field 'items'"),
])
def test_malformed_lines_raise_a_clear_protocol_error(line, says):
    with pytest.raises(ProtocolError) as info:
        decode(line)
    assert says in str(info.value)
    assert isinstance(info.value, FloodwayError)


def test_long_bad_lines_are_clipped_in_the_message():
    with pytest.raises(ProtocolError) as info:
        decode(b"x" * 10_000)
    assert len(str(info.value)) < 400


def test_encode_refuses_what_is_not_a_message():
    with pytest.raises(TypeError, match="not a protocol message: dict"):
        encode({"type": "ping"})


def test_messages_that_fit_share_one_line_as_encode_all_writes_it():
    msgs = [ItemResult(1, "a", [0.5] * 3), ItemResult(1, "b", "x"), BatchDone(1, 0.1, 2)]
    assert encode_lines(msgs) == [encode_all(msgs)]
    assert encode_lines(msgs[:1]) == [encode(msgs[0])]


def test_large_outputs_go_on_lines_of_their_own_within_the_line_limit():
    big = [ItemResult(7, f"r:{i}", "x" * 900) for i in range(5)]
    msgs = [*big, ItemResult(7, "r:5", 1), BatchDone(7, 0.5, 6)]
    lines = encode_lines(msgs, max_line_bytes=2000, max_output_bytes=1500)
    assert len(lines) > 1 and all(len(line) <= 2000 for line in lines)
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert [m for line in lines for m in decode_all(line, FROM_WORKER)] == msgs   # in order


def test_an_output_over_the_cap_travels_as_that_items_error():
    msgs = [ItemResult(3, "ok", "small"), ItemResult(3, "huge", "y" * 5000), BatchDone(3, 0, 2)]
    lines = encode_lines(msgs, max_line_bytes=4000, max_output_bytes=3000)
    got = [m for line in lines for m in decode_all(line, FROM_WORKER)]
    assert got[0] == msgs[0] and got[2] == msgs[2]
    assert isinstance(got[1], ItemError) and got[1].item_id == "huge"
    n = len(json.dumps({"type": "item", "batch_id": 3, "item_id": "huge", "output": "y" * 5000},
                       separators=(",", ":")))
    assert got[1].message == f"ContractError: output too large ({n} bytes > 3000)"


def test_integers_beyond_64_bits_survive_a_shared_line():
    msgs = [ItemResult(1, "a", 2**70), ItemResult(1, "b", [1.5]), BatchDone(1, 0, 2)]
    (line,) = encode_lines(msgs)
    assert decode_all(line, FROM_WORKER) == msgs
    split = encode_lines(msgs, max_line_bytes=100)
    assert len(split) > 1
    assert [m for line in split for m in decode_all(line, FROM_WORKER)] == msgs


def test_an_output_json_cannot_encode_travels_as_that_items_error():
    msgs = [ItemResult(2, "a", "fine"), ItemResult(2, "b", ["\ud800"]), BatchDone(2, 0, 2)]
    got = [m for line in encode_lines(msgs) for m in decode_all(line, FROM_WORKER)]
    assert got[0] == msgs[0] and got[2] == msgs[2]
    assert isinstance(got[1], ItemError) and got[1].item_id == "b"
    assert got[1].message.startswith("ContractError: output cannot be encoded as JSON (")
    assert "\\ud800" in got[1].message   # escaped, never the raw character


def test_a_batchs_deadlines_are_optional_on_the_wire():
    with_them = Batch(3, (("a", "x"), ("b", "y")), deadlines=(12.5, 13.0))
    assert json.loads(encode(with_them))["deadlines"] == [12.5, 13.0]
    assert decode(encode(with_them)) == with_them
    without = Batch(3, (("a", "x"),))
    assert "deadlines" not in json.loads(encode(without))   # as before deadlines existed
    assert decode(b'{"type":"batch","id":3,"items":[["a","x"]]}') == without
    assert decode(b'{"type":"batch","id":3,"items":[["a","x"]],"deadlines":[7]}').deadlines \
        == (7.0,)


@pytest.mark.parametrize("line, says", [
    (b'{"type":"batch","id":3,"items":[["a","x"]],"deadlines":[1,2]}', "must be 1 numbers"),
    (b'{"type":"batch","id":3,"items":[["a","x"]],"deadlines":[true]}', "must be 1 numbers"),
    (b'{"type":"batch","id":3,"items":[["a","x"]],"deadlines":["1"]}', "must be 1 numbers"),
    (b'{"type":"batch","id":3,"items":[],"deadlines":{}}', "field 'deadlines'"),
    (b'{"type":"batch","items":[],"deadlines":[]}', r"missing fields \['id'\]"),
    (b'{"type":"batch","id":3,"items":[],"late":[]}', r"unexpected \['late'\]"),
])
def test_a_batchs_deadlines_are_checked(line, says):
    with pytest.raises(ProtocolError, match=says):
        decode(line)
