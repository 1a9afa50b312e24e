"""The worker's side of the protocol, in process with a tiny endpoint (no spawn, no model)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest

from floodway.runtime import worker
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


def test_outputs_of_different_shapes_break_the_contract():
    def ragged(model, texts):
        return [np.zeros(len(t)) for t in texts]

    wire = Wire()
    worker.serve(ragged, None, lines(Batch(1, (("a", "x"), ("b", "yy")))), wire)
    assert all(isinstance(m, ItemError) and "different shapes" in m.message
               for m in wire.messages[:2])


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
