"""The worker's side of the protocol, in process with a tiny endpoint (no spawn, no model)."""

from __future__ import annotations

import base64
import io
from types import SimpleNamespace

import numpy as np
import pytest

import floodway as fw
from floodway.codec import dumps, loads
from floodway.functions.arrays import to_wire
from floodway.runtime import calling, worker
from floodway.runtime.protocol import (
    FROM_WORKER,
    Batch,
    BatchDone,
    Failed,
    ItemError,
    ItemResult,
    Phase,
    Ping,
    Pong,
    Ready,
    decode_all,
    encode,
    encode_all,
)


def shout(model, texts):
    """Uppercase each text; "boom" raises (so does any batch holding it)."""
    if "boom" in texts:
        raise ValueError("boom in batch")
    return [t.upper() for t in texts]


class Wire:
    """Collects what the worker sends, one list per send (a send is one write + flush)."""

    def __init__(self):
        self.sends: list[list] = []

    def __call__(self, msgs):
        self.sends.append(list(msgs))

    @property
    def messages(self):
        return [m for s in self.sends for m in s]


def lines(*msgs) -> list[bytes]:
    return [m if isinstance(m, bytes) else encode(m) for m in msgs]


def test_a_batch_is_answered_item_by_item_then_done():
    wire = Wire()
    code = worker.serve(shout, None, lines(Batch(1, (("r1:0", "a"), ("r2:0", "b")))), wire)
    assert code == 0
    ((a, b, done),) = wire.sends   # a batch that ran whole: one line, BatchDone last
    assert (a, b) == (ItemResult(1, "r1:0", "A"), ItemResult(1, "r2:0", "B"))
    assert isinstance(done, BatchDone) and (done.batch_id, done.rows) == (1, 2)
    assert done.compute_s >= 0


def test_a_bad_item_fails_alone_and_the_others_go_out_as_each_is_rerun():
    wire = Wire()
    batch = Batch(5, (("a", "x"), ("b", "boom"), ("c", "y")))
    assert worker.serve(shout, None, lines(batch), wire) == 0
    assert wire.sends == [
        [ItemResult(5, "a", "X")],
        [ItemError(5, "b", "ValueError: boom in batch")],
        [ItemResult(5, "c", "Y"), BatchDone(5, wire.sends[-1][1].compute_s, 3)],
    ]


def test_a_broken_contract_fails_the_whole_batch():
    def short(model, texts):
        return texts[:-1]

    wire = Wire()
    worker.serve(short, None, lines(Batch(1, (("a", "x"), ("b", "y")))), wire)
    assert [m.message for m in wire.messages[:2]] == ["ContractError: returned 1 outputs "
                                                      "for 2 inputs"] * 2


def test_array_outputs_of_different_shapes_are_each_items_own_answer():
    def ragged(model, texts):
        return [np.zeros(len(t)) for t in texts]

    wire = Wire()
    worker.serve(ragged, None, lines(Batch(1, (("a", "x"), ("b", "yy")))), wire)
    assert wire.messages[:2] == [ItemResult(1, "a", [0.0]), ItemResult(1, "b", [0.0, 0.0])]


@pytest.mark.parametrize("returned, named", [(lambda xs: (x for x in xs), "a generator"),
                                             (lambda xs: None, "None"),
                                             (lambda xs: 3, "an int")])
def test_an_output_that_is_not_a_list_is_named_not_counted(returned, named):
    wire = Wire()
    worker.serve(lambda model, xs: returned(xs), None, lines(Batch(1, (("a", "x"),))), wire)
    (err, _done) = wire.messages
    assert err.message == (f"ContractError: returned {named}, not a list of 1 outputs "
                           "(one per input)")


def test_system_exit_in_the_function_fails_its_item_and_the_worker_goes_on():
    import sys

    def exits(model, texts):
        if "exit" in texts:
            sys.exit(3)
        return [t.upper() for t in texts]

    wire = Wire()
    code = worker.serve(exits, None, lines(Batch(1, (("a", "x"), ("b", "exit"), ("c", "y"))),
                                           Batch(2, (("d", "z"),))), wire)
    assert code == 0
    by_id = {m.item_id: m for m in wire.messages if isinstance(m, ItemResult | ItemError)}
    assert by_id["b"] == ItemError(1, "b", "SystemExit: 3")
    assert (by_id["a"].output, by_id["c"].output, by_id["d"].output) == ("X", "Y", "Z")
    assert [m.batch_id for m in wire.messages if isinstance(m, BatchDone)] == [1, 2]


def test_numpy_outputs_travel_as_lists():
    def vectors(model, texts):
        return np.ones((len(texts), 3), dtype=np.float32)

    wire = Wire()
    worker.serve(vectors, None, lines(Batch(1, (("a", "x"),))), wire)
    assert wire.messages[0] == ItemResult(1, "a", [1.0, 1.0, 1.0])


def test_ping_is_answered_between_batches():
    wire = Wire()
    worker.serve(shout, None, lines(Ping(), Batch(1, (("a", "x"),)), Ping()), wire)
    kinds = [type(m) for m in wire.messages]
    assert kinds == [Pong, ItemResult, BatchDone, Pong]


@pytest.mark.parametrize("bad", [b"nonsense\n", encode(Pong())])
def test_a_malformed_line_ends_the_worker_with_failed(bad):
    wire = Wire()
    code = worker.serve(shout, None, lines(Ping(), bad, Ping()), wire)
    assert code == 1
    assert wire.messages[0] == Pong() and len(wire.messages) == 2
    assert isinstance(wire.messages[1], Failed)
    assert wire.messages[1].error.startswith("protocol error: ")


def test_run_batch_keeps_the_modal_contract():
    done, errors = worker.run_batch(shout, None, list(enumerate(["a", "boom", "c"])))
    assert done == [[0, "A"], [2, "C"]]
    assert errors == [[1, "ValueError: boom in batch"]]


def test_an_empty_batch_is_still_done():
    wire = Wire()
    worker.serve(shout, None, lines(Batch(4, ())), wire)
    assert [type(m) for m in wire.messages] == [BatchDone] and wire.messages[0].rows == 0


def test_sender_writes_one_line_and_flushes():
    class Out(io.BytesIO):
        writes = flushes = 0

        def write(self, data):
            self.writes += 1
            return super().write(data)

        def flush(self):
            self.flushes += 1

    out = Out()
    worker.sender(out)([ItemResult(1, "a", 1), BatchDone(1, 0.5, 1)])
    assert (out.writes, out.flushes) == (1, 1) and out.getvalue().count(b"\n") == 1
    assert decode_all(out.getvalue(), FROM_WORKER) == [ItemResult(1, "a", 1), BatchDone(1, 0.5, 1)]


def test_large_outputs_stay_within_the_routers_line_limit_and_one_too_large_fails_alone():
    def sized(model, sizes):
        return ["z" * n for n in sizes]

    out = io.BytesIO()
    send = worker.sender(out, max_line_bytes=3000, max_output_bytes=2500)
    batch = Batch(1, (("a", 1000), ("b", 1000), ("c", 4000), ("d", 10), ("e", 1000)))
    assert worker.serve(sized, None, lines(batch, Ping()), send) == 0
    written = out.getvalue().splitlines(keepends=True)
    assert len(written) > 2 and all(len(line) <= 3000 for line in written)
    msgs = [m for line in written for m in decode_all(line, FROM_WORKER)]
    by_id = {m.item_id: m for m in msgs if isinstance(m, ItemResult | ItemError)}
    assert [len(by_id[i].output) for i in "abde"] == [1000, 1000, 10, 1000]
    assert isinstance(by_id["c"], ItemError)
    assert by_id["c"].message.startswith("ContractError: output too large (")
    assert by_id["c"].message.endswith(" bytes > 2500)")
    assert isinstance(msgs[-2], BatchDone) and msgs[-1] == Pong()   # the worker goes on


def test_an_output_whose_conversion_raises_or_cannot_be_encoded_fails_alone():
    class Odd:
        def tolist(self):
            raise RuntimeError("cannot leave the device")

    def odd(model, texts):
        return [Odd() if t == "odd" else "\udc00" if t == "lone" else t for t in texts]

    out = io.BytesIO()
    send = worker.sender(out)
    worker.serve(odd, None, lines(Batch(1, (("a", "x"), ("b", "odd"), ("c", "lone"))),
                                  Batch(2, (("d", "y"),))), send)
    msgs = [m for line in out.getvalue().splitlines() for m in decode_all(line, FROM_WORKER)]
    by_id = {m.item_id: m for m in msgs if isinstance(m, ItemResult | ItemError)}
    assert by_id["a"].output == "x" and by_id["d"].output == "y"
    assert by_id["b"].message == "RuntimeError: cannot leave the device"
    assert by_id["c"].message.startswith("ContractError: output cannot be encoded as JSON")


def test_the_router_reads_the_lines_the_worker_may_write():
    from floodway.runtime import container, protocol

    assert container.READ_LIMIT >= protocol.MAX_LINE_BYTES > protocol.MAX_OUTPUT_BYTES


def test_boot_reports_a_missing_build_as_failed(tmp_path):
    wire = Wire()
    assert worker.boot("app.py", "embed", str(tmp_path), wire) is None
    (msg,) = wire.messages
    assert isinstance(msg, Failed) and msg.error.startswith("ArtifactError: no build of")


APP = '''
import floodway as fw

app = fw.App("tiny")


@app.endpoint(model=fw.LocalModel({folder!r}))
def shout(model, texts: list[str]) -> list[str]:
    model.calls.append(list(texts))
    return [t.upper() for t in texts]
'''


def test_boot_loads_warms_up_and_reports_ready(tmp_path, monkeypatch):
    import floodway.build.loader
    import floodway.build.prefetch
    import floodway.build.store

    app_file = tmp_path / "tiny_app.py"
    app_file.write_text(APP.format(folder=str(tmp_path)))
    model = SimpleNamespace(backend="fake", calls=[])
    monkeypatch.setattr(floodway.build.store.ArtifactStore, "latest", lambda self, ep: tmp_path)
    monkeypatch.setattr(floodway.build.prefetch, "start_prefetch", lambda folder: None)
    monkeypatch.setattr(floodway.build.loader, "load", lambda folder, prefetch=None: model)
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    monkeypatch.setenv(worker.WARMUP_INPUTS_ENV, '["warm", "up"]')
    wire = Wire()
    fn, loaded = worker.boot(str(app_file), "shout", str(tmp_path), wire)
    assert loaded is model and model.calls == [["warm", "up"]]
    phase, ready = wire.messages
    assert phase == Phase("warming") and isinstance(ready, Ready)
    assert set(ready.timings_s) == {"process_start", "imports", "artifact_load", "warmup"}
    assert ready.backend == "fake" and ready.pid > 0
    assert fn(model, ["x"]) == ["X"]


def test_boot_reports_system_exit_while_loading_as_failed(tmp_path, monkeypatch):
    import floodway.build.loader
    import floodway.build.prefetch
    import floodway.build.store

    app_file = tmp_path / "tiny_app.py"
    app_file.write_text(APP.format(folder=str(tmp_path)))

    def load(folder, prefetch=None):
        raise SystemExit("no GPU here")

    monkeypatch.setattr(floodway.build.store.ArtifactStore, "latest", lambda self, ep: tmp_path)
    monkeypatch.setattr(floodway.build.prefetch, "start_prefetch", lambda folder: None)
    monkeypatch.setattr(floodway.build.loader, "load", load)
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    wire = Wire()
    assert worker.boot(str(app_file), "shout", str(tmp_path), wire) is None
    assert wire.messages == [Failed("SystemExit: no GPU here")]


def test_boot_names_a_function_that_returns_none_at_warm_up(tmp_path, monkeypatch):
    """An endpoint body left as ``...`` returns None: the start fails saying so, instead of
    a TypeError from len()."""
    import floodway.build.loader
    import floodway.build.prefetch
    import floodway.build.store

    app_file = tmp_path / "tiny_app.py"
    app_file.write_text(APP.format(folder=str(tmp_path)).replace(
        "    model.calls.append(list(texts))\n    return [t.upper() for t in texts]", "    ..."))
    monkeypatch.setattr(floodway.build.store.ArtifactStore, "latest", lambda self, ep: tmp_path)
    monkeypatch.setattr(floodway.build.prefetch, "start_prefetch", lambda folder: None)
    monkeypatch.setattr(floodway.build.loader, "load",
                        lambda folder, prefetch=None: SimpleNamespace(backend="fake"))
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    wire = Wire()
    assert worker.boot(str(app_file), "shout", str(tmp_path), wire) is None
    assert wire.messages[-1] == Failed(
        "ContractError: endpoint 'shout', warm-up: returned None, not a list of 1 outputs "
        "(one per input)")


# ------------------------------------------------------------ outputs and decoded inputs

def through_the_pipe(fn, inputs: list) -> list:
    """`fn` on `inputs` through `serve`, the messages encoded and decoded as the router reads
    them -> one ItemResult output or ItemError message per input, in order."""
    wire = Wire()
    batch = Batch(1, tuple((f"r:{i}", x) for i, x in enumerate(inputs)))
    worker.serve(fn, None, lines(batch), lambda msgs: wire(decode_all(encode_all(msgs),
                                                                     FROM_WORKER)))
    by_id = {m.item_id: m for m in wire.messages if isinstance(m, ItemResult | ItemError)}
    return [by_id[f"r:{i}"].output if isinstance(by_id[f"r:{i}"], ItemResult)
            else by_id[f"r:{i}"].message for i in range(len(inputs))]


KINDS = {   # an output of each kind, and the JSON it travels as
    "array": (np.arange(4, dtype=np.int8).reshape(2, 2), [[0, 1], [2, 3]]),
    "half": (np.array([0.5, -2], dtype=np.float16), [0.5, -2.0]),
    "scalar": (np.float32(0.5), 0.5),
    "labels": ({"label": "cat", "score": np.float64(0.25), 3: [np.bool_(True)]},
               {"label": "cat", "score": 0.25, "3": [True]}),
    "tuple": ((1, 2.5, None), [1, 2.5, None]),
    "top_k": ([{"label": "a", "score": np.float32(0.5)}, {"label": "b", "score": 0.25}],
              [{"label": "a", "score": 0.5}, {"label": "b", "score": 0.25}]),
    "strings": (np.array(["x", "y"]), ["x", "y"]),
    "objects": (np.array([1, "two"], dtype=object), [1, "two"]),
    "nan": (float("nan"), None),
    "float64": (np.float64(0.75), 0.75),   # a float subclass: a plain float on the wire
}


def test_outputs_of_every_kind_travel_as_plain_json():
    def kinds(model, names):
        return [KINDS[n][0] for n in names]

    for name, (_, want) in KINDS.items():   # one batch each: arrays of a batch share a shape
        assert through_the_pipe(kinds, [name]) == [want], name
        assert type(calling.to_jsonable(KINDS[name][0])) in (list, dict, float, type(None)), name
        # The Modal class's path: plain values, which the router's JSON writes the same way.
        assert loads(dumps(worker.run_batch(kinds, None, [[0, name]]))) == [[[0, want]], []]
    mixed = ["labels", "tuple", "top_k", "nan", "scalar"]
    assert through_the_pipe(kinds, mixed) == [KINDS[n][1] for n in mixed]


def test_list_outputs_may_differ_per_item():
    def entities(model, texts):
        return [[{"word": w, "score": 1.0} for w in t.split()] for t in texts]

    assert through_the_pipe(entities, ["a b", "c"]) == [
        [{"word": "a", "score": 1.0}, {"word": "b", "score": 1.0}], [{"word": "c", "score": 1.0}]]


@pytest.mark.parametrize("bad", [{1, 2}, b"bytes", np.array([1 + 2j]), {(1, 2): "tuple key"},
                                 object()])
def test_an_output_json_cannot_carry_fails_its_own_item_only(bad):
    def odd(model, texts):
        return [bad if t == "odd" else np.full(len(t), 7) for t in texts]

    got = through_the_pipe(odd, ["other-clients-secret", "odd", "fine"])
    assert got[1].startswith("ContractError: returned a") and "JSON" in got[1]
    assert "secret" not in got[1] and "(20,)" not in got[1]   # nothing of the other items
    assert got[0] == [7] * 20 and got[2] == [7] * 4            # theirs are answered
    assert through_the_pipe(odd, ["fine"]) == [[7] * 4]        # the worker goes on


def png_b64(mode="RGBA", size=(5, 3)) -> str:
    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.new(mode, size).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_the_function_receives_decoded_images_arrays_and_pairs():
    import PIL.Image

    def sizes(model, inputs: list[fw.Image]):
        assert all(isinstance(i, PIL.Image.Image) and i.mode == "RGB" for i in inputs)
        return [{"w": i.width, "h": i.height} for i in inputs]

    def sums(model, inputs: list[fw.Array[np.int16, (None, 2)]]):
        assert all(x.dtype == np.int16 for x in inputs)
        return [x.sum(axis=0) for x in inputs]

    def joined(model, inputs: list[tuple[str, str]]):
        assert all(isinstance(p, tuple) for p in inputs)
        return [" | ".join(p) for p in inputs]

    assert through_the_pipe(sizes, [png_b64(), png_b64("L", (2, 7))]) == [
        {"w": 5, "h": 3}, {"w": 2, "h": 7}]
    grid = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int16)
    assert through_the_pipe(sums, [to_wire(grid), [[1, 1]]]) == [[9, 12], [1, 1]]
    assert through_the_pipe(joined, [["q", "p"]]) == ["q | p"]


def test_an_input_that_does_not_decode_fails_alone():
    seen = []

    def sizes(model, inputs: list[fw.Image]):
        seen.append(len(inputs))
        return [i.width for i in inputs]

    got = through_the_pipe(sizes, [png_b64(), "bm90IGFuIGltYWdl", png_b64(size=(9, 9))])
    assert got[0] == 5 and got[2] == 9 and seen == [2]   # the good ones ran as one batch
    assert got[1].startswith("InputError: not a PNG, JPEG")
    assert through_the_pipe(sizes, ["bm90IGFuIGltYWdl"])[0].startswith("InputError")
    assert seen == [2]   # a batch left empty is not run


def test_a_request_error_fails_its_item_as_an_input_error():
    from floodway.errors import RequestError

    def picky(model, texts: list[str]) -> list[str]:
        if "long" in texts:
            raise RequestError("prompt: 900 tokens is too long", status=422, field="prompt")
        return texts

    done, errors = worker.run_batch(picky, None, [[0, "a"], [1, "long"]])
    assert done == [[0, "a"]]
    assert errors == [[1, "InputError: prompt: 900 tokens is too long"]]


# ---------------------------------------------------------------------- skipped before a start
def test_a_cancel_that_arrives_while_a_batch_runs_skips_its_item_in_the_batch_behind():
    from floodway.runtime.inbox import Inbox
    from floodway.runtime.protocol import DROPPED_CANCELLED, Cancel

    inbox, wire, ran = Inbox(), Wire(), []

    def fn(model, texts):
        ran.append(list(texts))
        if texts == ["a"]:   # the first batch runs: its caller and r2:0's leave meanwhile
            inbox.feed(encode(Cancel(1, "r1:0")))
            inbox.feed(encode(Cancel(2, "r2:0")))
            inbox.close()
        return [t.upper() for t in texts]

    inbox.feed(encode(Batch(1, (("r1:0", "a"),))))
    inbox.feed(encode(Batch(2, (("r2:0", "b"), ("r3:0", "c")))))
    assert worker.serve(fn, None, inbox, wire) == 0
    assert ran == [["a"], ["c"]]   # the running item is not interrupted
    assert wire.sends[0] == [ItemResult(1, "r1:0", "A"), BatchDone(1, wire.sends[0][1].compute_s,
                                                                    1)]
    skipped, result, done = wire.sends[1]
    assert skipped == ItemError(2, "r2:0", DROPPED_CANCELLED)
    assert result == ItemResult(2, "r3:0", "C") and (done.batch_id, done.rows) == (2, 1)
    assert inbox.cancelled == set()   # forgotten once their batches started


def test_items_past_their_deadline_are_skipped_and_the_rest_run():
    from floodway.runtime.protocol import DROPPED_DEADLINE

    wire, ran = Wire(), []

    def fn(model, texts):
        ran.append(list(texts))
        return [t.upper() for t in texts]

    batch = Batch(1, (("a", "x"), ("b", "y"), ("c", "z")), deadlines=(9.5, 10.0, 10.5))
    worker.serve(fn, None, lines(batch), wire, clock=lambda: 10.0)
    assert ran == [["z"]]
    assert wire.messages[:3] == [ItemError(1, "a", DROPPED_DEADLINE),
                                 ItemError(1, "b", DROPPED_DEADLINE), ItemResult(1, "c", "Z")]
    assert wire.messages[3].rows == 1


def test_a_batch_whose_items_were_all_skipped_runs_nothing():
    from floodway.runtime.protocol import DROPPED_CANCELLED, DROPPED_DEADLINE, Cancel

    def fn(model, texts):
        raise AssertionError("nothing should run")

    wire = Wire()
    batch = Batch(7, (("a", "x"), ("b", "y")), deadlines=(5.0, 50.0))
    # A plain list of lines has arrived whole: the Cancel is known before the batch starts.
    worker.serve(fn, None, lines(batch, Cancel(7, "b"), Ping()), wire, clock=lambda: 10.0)
    assert wire.sends == [[ItemError(7, "a", DROPPED_DEADLINE),
                           ItemError(7, "b", DROPPED_CANCELLED), BatchDone(7, 0.0, 0)], [Pong()]]


def test_a_batch_without_deadlines_runs_whole_whatever_the_clock():
    wire = Wire()
    worker.serve(shout, None, lines(Batch(1, (("a", "x"),))), wire, clock=lambda: 1e12)
    assert wire.messages[0] == ItemResult(1, "a", "X")


def test_the_inbox_reads_a_pipe_ahead_on_a_thread_in_order():
    import os

    from floodway.runtime.inbox import Inbox
    from floodway.runtime.protocol import Cancel

    r, w = os.pipe()
    with os.fdopen(w, "wb") as out:
        out.write(b"".join(lines(Batch(1, (("a", "x"),)), Cancel(2, "b"), Ping(), b"junk\n")))
    with os.fdopen(r, "rb") as pipe:
        inbox = Inbox(pipe, threaded=True)
        got = [inbox.next(), inbox.next()]
        bad, end = inbox.next(), inbox.next()
    assert got == [Batch(1, (("a", "x"),)), Ping()]
    assert inbox.cancelled == {(2, "b")}
    assert "not a JSON line" in str(bad) and end is None


def test_a_text_endpoint_warms_up_over_the_lengths_and_rows_its_batcher_cuts(monkeypatch):
    monkeypatch.delenv(worker.WARMUP_INPUTS_ENV, raising=False)
    app = fw.App("warm")

    @app.endpoint(model=fw.HFModel("org/m", revision="0" * 40), build=fw.Build(max_seq_len=128),
                  batching=fw.Batching(max_batch_rows=16))
    def embed(model: fw.Loaded, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]

    batches = worker._warmup_batches(app["embed"], None)
    words = [len(b[0].split()) for b in batches]
    assert words[0] == 1 and 128 // 4 <= words[1] < 128 <= words[2]   # the sequence axis
    assert len(batches[-1]) == 16                                       # the batch axis
    monkeypatch.setenv(worker.WARMUP_INPUTS_ENV, '["only this"]')
    assert worker._warmup_batches(app["embed"], None) == [["only this"]]


def _deeper(text):
    raise KeyError(f"no entry for {text}")


def lookup(model, texts):
    """Raises from a helper of its own: the traceback shows both frames."""
    return [_deeper(t) for t in texts]


def test_a_raising_function_sends_its_traceback_for_the_log_and_the_short_message():
    wire = Wire()
    assert worker.serve(lookup, None, lines(Batch(1, (("a", "x"),))), wire) == 0
    (err, _done) = wire.messages
    assert err.message == "KeyError: 'no entry for x'"   # what the client is told
    trace = err.traceback
    assert trace.startswith("Traceback (most recent call last):")
    assert trace.rstrip().endswith("KeyError: 'no entry for x'")
    frames = [line.strip() for line in trace.splitlines() if line.lstrip().startswith("File ")]
    # From the function down; floodway's own frames that called it are left out.
    assert frames[0].endswith("in lookup") and frames[-1].endswith("in _deeper")
    # It travels the pipe (an optional field: absent when None).
    (back,) = decode_all(encode(err), FROM_WORKER)
    assert back.traceback == trace
    assert b"traceback" not in encode(ItemError(1, "a", "InputError: bad"))


def test_an_input_error_or_a_broken_contract_carries_no_traceback_of_floodway():
    def short(model, texts):
        return texts[:1]

    wire = Wire()
    worker.serve(short, None, lines(Batch(1, (("a", "x"), ("b", "y")))), wire)
    first = wire.messages[0]
    assert first.traceback == first.message == "ContractError: returned 1 outputs for 2 inputs"

    def see(model, images: list[fw.Image]):
        return [0 for _ in images]

    wire = Wire()
    worker.serve(see, None, lines(Batch(2, (("a", "not base64 !"),))), wire)
    assert wire.messages[0].message.startswith("InputError:")
    assert wire.messages[0].traceback is None


LOAD_APP = '''
import floodway as fw

app = fw.App("tiny")


def open_engine(artifacts):
    raise RuntimeError("CUDA driver too old")


@app.endpoint(load=open_engine)
def shout(model, texts: list[str]) -> list[str]:
    return texts
'''


def test_a_raising_load_hook_sends_failed_with_its_traceback(tmp_path, monkeypatch):
    import floodway.build.artifacts
    import floodway.build.prefetch
    import floodway.build.store

    app_file = tmp_path / "hook_app.py"
    app_file.write_text(LOAD_APP)
    monkeypatch.setattr(floodway.build.store.ArtifactStore, "latest", lambda self, ep: tmp_path)
    monkeypatch.setattr(floodway.build.prefetch, "start_prefetch", lambda folder: None)
    monkeypatch.setattr(floodway.build.artifacts, "open_artifacts",
                        lambda folder, verify="sha256": SimpleNamespace(check=lambda: None))
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    wire = Wire()
    assert worker.boot(str(app_file), "shout", str(tmp_path), wire) is None
    (failed,) = wire.messages
    assert failed == Failed("RuntimeError: CUDA driver too old")
    assert 'hook_app.py", line 8, in open_engine' in failed.traceback
    assert failed.traceback.rstrip().endswith("RuntimeError: CUDA driver too old")
