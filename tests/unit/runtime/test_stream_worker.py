"""The streaming worker loop over in-memory pipes: chunks per sequence, sequences at once,
Cancel, Load, Ping while sequences run, a failing sequence alone. No real-clock waits: the
test feeds lines and yields to the loop (threads are released by events, not timers)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from floodway.runtime import stream_worker
from floodway.runtime.calling import ContractError
from floodway.runtime.protocol import (
    FROM_WORKER,
    Batch,
    BatchDone,
    Cancel,
    Chunk,
    Failed,
    ItemError,
    ItemResult,
    Load,
    Ping,
    Pong,
    decode_all,
    encode,
)


class Pipe:
    """The router's side: lines to the worker (`send`), messages from it (`got`)."""

    def __init__(self):
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.got: list = []

    def send(self, *msgs) -> None:
        for m in msgs:
            self.inbox.put_nowait(m if isinstance(m, bytes) else encode(m))

    def close(self) -> None:
        self.inbox.put_nowait(None)

    async def lines(self):
        while (line := await self.inbox.get()) is not None:
            yield line

    def write(self, data: bytes) -> None:
        for line in data.splitlines(keepends=True):
            self.got.extend(decode_all(line, FROM_WORKER))

    def of(self, kind) -> list:
        return [m for m in self.got if isinstance(m, kind)]


async def until(cond, turns: int = 2000) -> None:
    """Yield to the loop until `cond()` holds (threads finish steps between turns)."""
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    # A thread's step may need the GIL for longer: a round trip through the thread pool
    # hands it over (no timer is waited on).
    for _ in range(2000):
        if cond():
            return
        await asyncio.to_thread(lambda: None)
    raise AssertionError("condition never held")


def run(fn, script, model=None):
    async def go():
        pipe = Pipe()
        server = asyncio.ensure_future(stream_worker.serve_stream(fn, model, pipe.lines(),
                                                                  pipe.write))
        await script(pipe)
        pipe.close()
        return await asyncio.wait_for(server, 20), pipe
    return asyncio.run(go())


async def words(model, text: str):
    for w in text.split():
        await asyncio.sleep(0)
        yield w + " "


def test_async_generator_chunks_then_end_then_batch_done():
    async def script(pipe):
        pipe.send(Batch(1, (("r1:0", "a b c"),)))
        await until(lambda: pipe.of(BatchDone))

    code, pipe = run(words, script)
    assert code == 0
    chunks = pipe.of(Chunk)
    assert [(c.seq, c.data) for c in chunks] == [(0, "a "), (1, "b "), (2, "c ")]
    item_events = [m for m in pipe.got if isinstance(m, Chunk | ItemResult | BatchDone)]
    assert item_events[-2:] == [ItemResult(1, "r1:0", None), item_events[-1]]
    assert pipe.of(BatchDone)[0].rows == 1
    # Load: one sequence running, then none.
    assert [m.active_sequences for m in pipe.of(Load)] == [1, 0]


def test_sequences_run_at_once_and_a_failing_one_fails_alone():
    release = asyncio.Event()

    async def gated(model, text: str):
        if text == "exit":
            raise SystemExit(3)
        if text == "boom":
            yield "partial"
            raise ValueError("boom")
        yield "first"
        await release.wait()
        yield "last"

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)), Batch(2, (("b", "boom"),)),
                  Batch(3, (("c", "exit"),)))
        await until(lambda: len(pipe.of(ItemError)) == 2 and pipe.of(Chunk))
        assert pipe.of(Load)[-1].active_sequences == 1   # "a" still runs
        release.set()
        await until(lambda: len(pipe.of(BatchDone)) == 3)

    _, pipe = run(gated, script)
    errors = {e.item_id: e.message for e in pipe.of(ItemError)}
    assert errors == {"b": "ValueError: boom", "c": "SystemExit: 3"}
    assert [c.data for c in pipe.of(Chunk) if c.item_id == "a"] == ["first", "last"]
    assert pipe.of(ItemResult) == [ItemResult(1, "a", None)]


def test_sync_generator_steps_on_a_thread():
    threads = set()

    def counting(model, text: str):
        for i in range(3):
            threads.add(threading.current_thread().name)
            yield {"text": str(i), "tokens": 1}

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(counting, script)
    assert [c.data["text"] for c in pipe.of(Chunk)] == ["0", "1", "2"]
    assert threading.main_thread().name not in threads


def test_cancel_stops_an_async_generator_and_ends_the_item():
    closed = []

    async def endless(model, text: str):
        try:
            while True:
                await asyncio.sleep(0)
                yield "tick"
        finally:
            closed.append(text)

    async def script(pipe):
        pipe.send(Batch(7, (("r1:0", "x"),)))
        await until(lambda: len(pipe.of(Chunk)) >= 3)
        pipe.send(Cancel(7, "r1:0"), Cancel(7, "unknown"), Cancel(99, "r1:0"))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(endless, script)
    (err,) = pipe.of(ItemError)
    assert err.item_id == "r1:0" and err.message.startswith("Cancelled:")
    assert closed == ["x"]
    assert pipe.of(Load)[-1].active_sequences == 0


def test_cancel_of_a_sync_generator_answers_at_once_and_closes_it_after_its_step():
    stepping, release, closed = threading.Event(), threading.Event(), threading.Event()

    def slow(model, text: str):
        try:
            yield "one"
            stepping.set()
            release.wait(20)   # a step that blocks (a long decode)
            yield "two"
        finally:
            closed.set()

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(stepping.is_set)
        pipe.send(Cancel(1, "a"))
        await until(lambda: pipe.of(BatchDone))   # answered while the step still blocks
        assert not closed.is_set()
        release.set()
        await until(closed.is_set)

    _, pipe = run(slow, script)
    assert [c.data for c in pipe.of(Chunk)] == ["one"]
    assert pipe.of(ItemError)[0].message.startswith("Cancelled:")


def test_ping_is_answered_while_sequences_wait():
    never = asyncio.Event()

    async def waits(model, text: str):
        yield "start"
        await never.wait()
        yield "never"

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(Chunk))
        pipe.send(Ping())
        await until(lambda: pipe.of(Pong))
        pipe.send(Cancel(1, "a"))   # so that the worker can drain
        await until(lambda: pipe.of(BatchDone))

    code, pipe = run(waits, script)
    assert code == 0 and pipe.of(Pong) == [Pong()]


def test_a_chunk_json_cannot_carry_fails_its_item():
    class Opaque:
        pass

    async def odd(model, text: str):
        yield "fine"
        yield Opaque()

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(odd, script)
    assert [c.data for c in pipe.of(Chunk)] == ["fine"]
    assert pipe.of(ItemError)[0].message.startswith("ContractError: returned a Opaque")


def test_load_reports_the_engines_kv_cache_when_it_changes():
    class Engine:
        used = 0

        def generation_load(self):
            return (1 if self.used else 0), self.used, 4096

    async def gen(model, text: str):
        for _ in range(3):
            model.used += 100
            await asyncio.sleep(0)
            yield "t"
        model.used = 0

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(gen, script, model=Engine())
    loads = [(ld.active_sequences, ld.kv_cache_tokens, ld.kv_cache_capacity)
             for ld in pipe.of(Load)]
    assert all(a != b for a, b in zip(loads, loads[1:], strict=False))   # sent on change only
    assert (1, 300, 4096) in loads and loads[-1] == (0, 0, 4096)


def test_an_item_that_does_not_decode_fails_before_the_function_runs():
    async def ints(model, n: int):
        yield n * 2

    async def script(pipe):
        pipe.send(Batch(1, (("a", 2), ("b", "nope"))))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(ints, script)
    assert [c.data for c in pipe.of(Chunk)] == [4]
    assert pipe.of(ItemError)[0].item_id == "b"
    assert pipe.of(ItemError)[0].message.startswith("InputError:")
    assert pipe.of(BatchDone)[0].rows == 2


def test_a_malformed_line_fails_the_worker():
    async def script(pipe):
        pipe.send(b"{nope\n")

    code, pipe = run(words, script)
    assert code == 1 and pipe.of(Failed)[0].error.startswith("protocol error")


def test_warm_up_reads_a_sequence_and_names_a_broken_contract():
    seen = []

    def endless(model, text):
        i = 0
        while True:
            seen.append(i)
            yield i
            i += 1

    stream_worker.warm_up(endless, None, ["warm-up"])
    assert len(seen) == stream_worker.WARMUP_MAX_CHUNKS

    async def bad(model, text):
        yield object()

    with pytest.raises(ContractError, match="returned a object"):
        stream_worker.warm_up(bad, None, ["warm-up"])


def test_the_engine_freeing_a_cancelled_sequence_sends_a_load_at_once(monkeypatch):
    """A cancelled sequence leaves the built-in engine a step after its item ended: the
    engine's on_load (called on its own thread) makes the worker send the freed Load then,
    with no other message to carry it."""
    monkeypatch.setattr(stream_worker, "_SIGNAL", None)

    class Engine:
        used, on_load = 0, None

        def configure_generation(self, *, max_sequences, kv_cache_tokens, max_new_tokens,
                                 on_load=None):
            self.on_load = on_load

        def generation_load(self):
            return (1 if self.used else 0), self.used, 4096

    class Ep:
        class generation:   # noqa: N801 - an fw.Generation's fields
            max_sequences, kv_cache_tokens, max_new_tokens = 4, None, 16

    model = Engine()
    stream_worker.configure(Ep, model)
    assert callable(model.on_load)

    async def endless(model, text: str):
        model.used = 500
        while True:
            await asyncio.sleep(0)
            yield "t"

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(Chunk))
        pipe.send(Cancel(1, "a"))
        await until(lambda: pipe.of(BatchDone))
        for _ in range(20):   # every flush due has run: nothing more comes by itself
            await asyncio.sleep(0)
        stale.append(pipe.of(Load)[-1])
        model.used = 0    # the engine drops the sequence at its next step, on its thread
        t = threading.Thread(target=model.on_load, args=((0, 0, 4096),))
        t.start()
        t.join()
        await until(lambda: pipe.of(Load)[-1].active_sequences == 0)

    stale: list = []
    _, pipe = run(endless, script, model=model)
    assert (stale[0].active_sequences, stale[0].kv_cache_tokens) == (1, 500)
    assert (pipe.of(Load)[-1].active_sequences, pipe.of(Load)[-1].kv_cache_tokens) == (0, 0)


def test_a_request_error_from_the_model_is_named_an_input_error():
    from floodway.errors import RequestError

    async def refuses(model, text: str):
        raise RequestError("prompt: 602 tokens is too long: at most 511 tokens leave room",
                           status=422, field="prompt")
        yield text   # a generator function

    async def script(pipe):
        pipe.send(Batch(1, (("a", "x"),)))
        await until(lambda: pipe.of(BatchDone))

    _, pipe = run(refuses, script)
    assert pipe.of(ItemError)[0].message == \
        "InputError: prompt: 602 tokens is too long: at most 511 tokens leave room"


def test_a_failing_sequence_sends_its_traceback_from_the_generator_down():
    def tokens(text):
        raise ValueError(f"cannot tokenize {text!r}")

    def sync_stream(model, text: str):   # steps on a thread: the frames start in it anyway
        yield "first"
        yield from tokens(text)

    async def async_stream(model, text: str):
        yield "first"
        tokens(text)

    for fn in (sync_stream, async_stream):
        async def script(pipe):
            pipe.send(Batch(1, (("a", "x"),)))
            await until(lambda: pipe.of(BatchDone))

        _, pipe = run(fn, script)
        (err,) = pipe.of(ItemError)
        assert err.message == "ValueError: cannot tokenize 'x'"
        frames = [line.strip() for line in err.traceback.splitlines()
                  if line.lstrip().startswith("File ")]
        assert frames[0].endswith(f"in {fn.__name__}") and frames[-1].endswith("in tokens")
