"""A streaming request in the local pool: `Pool.enqueue` gives a StreamPending whose events
are its chunks and ends, whose await is the combined outputs, whose deadline bounds only the
time to each input's first chunk, and whose cancel reaches the container. Fake containers,
a manual clock: nothing waits on real time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import floodway as fw
from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed
from floodway.runtime.container import BatchResult
from floodway.runtime.pending import StreamPending
from floodway.runtime.pool import Pool
from floodway.runtime.protocol import Chunk, ItemResult
from tests.unit.runtime.fakes import FakeContainer, StepClock, settle


class StreamContainer(FakeContainer):
    """A FakeContainer whose worker streams: the test sends chunks and ends per item."""

    def __init__(self, endpoint: str, clock: Any, slots: int = 8):
        super().__init__(endpoint, clock, slots)
        self.listeners: dict[str, tuple[int, Any]] = {}
        self.cancelled: list[str] = []
        self.active_sequences = self.kv_cache_tokens = self.kv_cache_capacity = 0

    def submit(self, items, on_item=None):
        fut = super().submit(items, on_item)
        batch_id = max(self.inflight)
        for item_id, _ in items:
            self.listeners[item_id] = (batch_id, on_item)
        return fut

    def cancel_item(self, item_id: str) -> bool:
        self.cancelled.append(item_id)
        return True

    def chunk(self, item_id: str, seq: int, data: Any) -> None:
        batch_id, on_item = self.listeners[item_id]
        on_item(Chunk(batch_id, item_id, seq, data))

    def end(self, item_id: str) -> None:
        batch_id, on_item = self.listeners[item_id]
        on_item(ItemResult(batch_id, item_id, None))
        fut = self.inflight.pop(batch_id)
        self.inflight_rows.pop(batch_id)
        fut.set_result(BatchResult({item_id: None}, {}, 1, 0.01, 0.02))


def stream_app(**gen: Any) -> fw.App:
    app = fw.App("s")

    @app.endpoint(name="gen", generation=fw.Generation(**gen))
    async def gen_fn(model, text: str):
        yield text

    return app


def make_pool(tmp_path, **gen: Any) -> tuple[Pool, StepClock]:
    clock = StepClock()
    pool = Pool(stream_app(**gen), "app.py", str(tmp_path), containers=1, clock=clock,
                make_container=lambda ep: StreamContainer(ep, clock), tick_s=None)
    pool.machine_cap = 8
    return pool, clock


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def ready_pool(tmp_path, **gen: Any) -> tuple[Pool, StepClock, StreamContainer]:
    pool, clock = make_pool(tmp_path, **gen)
    await pool.start()
    (c,) = pool.containers["gen"]
    c.become_ready()
    await settle()
    return pool, clock, c


async def events(p: StreamPending) -> list:
    out = []
    while (ev := await p.next_event()) is not None:
        out.append(ev)
    return out


def test_events_are_chunks_then_the_combined_end_and_the_await_combines(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path, max_sequences=3)
        assert pool.endpoints["gen"].slots == 3
        p = pool.enqueue("gen", ["a", "b"], timeout_s=1.0)
        assert isinstance(p, StreamPending)
        await settle()
        assert p.dispatched()
        clock.advance(0.5)
        c.chunk("r1:0", 0, {"text": "He", "tokens": 1})
        c.chunk("r1:1", 0, "x")
        clock.advance(2.0)   # past the request's timeout: both streams began, no matter
        c.chunk("r1:0", 1, {"text": "llo", "tokens": 2, "finish_reason": "stop"})
        c.end("r1:0")
        c.end("r1:1")
        got = await events(p)
        q = pool.enqueue("gen", ["c"], timeout_s=1.0)
        await settle()
        c.chunk("r2:0", 0, "y")
        c.end("r2:0")
        whole = await q
        await pool.stop()
        return got, whole

    got, whole = run(go())
    assert got[0] == ChunkEvent(0, {"text": "He", "tokens": 1}, 1000.5)
    assert [type(e).__name__ for e in got] == ["ChunkEvent", "ChunkEvent", "ChunkEvent",
                                               "ItemEnd", "ItemEnd"]
    assert got[3] == ItemEnd(0, {"text": "Hello", "tokens": 3, "finish_reason": "stop"})
    assert got[4] == ItemEnd(1, "x")
    assert whole == ["y"]


def test_no_first_chunk_in_time_fails_with_timeout_and_cancels_on_the_container(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path)
        p = pool.enqueue("gen", ["a"], timeout_s=1.0)
        await settle()
        first = asyncio.ensure_future(p.next_event())
        await settle()
        clock.advance(1.0)
        ev = await first
        await settle()
        cancelled = list(c.cancelled)
        q = pool.enqueue("gen", ["b"], timeout_s=1.0)
        waiting = asyncio.ensure_future(q)
        await settle()
        clock.advance(1.0)
        with pytest.raises(TimeoutError, match="no first chunk within 1 s"):
            await waiting
        await pool.stop()
        return ev, cancelled, c.cancelled

    ev, cancelled, all_cancelled = run(go())
    assert isinstance(ev, ItemFailed) and isinstance(ev.error, TimeoutError)
    assert cancelled == ["r1:0"] and all_cancelled == ["r1:0", "r2:0"]


def test_a_stream_is_bounded_by_max_stream_s_and_cancel_stops_the_rest(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path, max_stream_s=5)
        p = pool.enqueue("gen", ["a"], timeout_s=1.0)
        await settle()
        c.chunk("r1:0", 0, "t")
        first = await p.next_event()
        nxt = asyncio.ensure_future(p.next_event())
        await settle()
        clock.advance(5.0)
        late = await nxt
        q = pool.enqueue("gen", ["b", "c"], timeout_s=1.0)
        await settle()
        c.end("r2:0")
        await settle()
        n = q.cancel()
        await pool.stop()
        return first, late, n, c.cancelled

    first, late, n, cancelled = run(go())
    assert isinstance(first, ChunkEvent)
    assert isinstance(late, ItemFailed) and "max_stream_s (5 s)" in str(late.error)
    assert n == 1 and cancelled == ["r1:0", "r2:1"]


def test_adopted_work_keeps_running_and_gives_the_combined_outputs(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path)
        p = pool.enqueue("gen", ["a"], timeout_s=1.0)
        await settle()
        work = p.adopt()
        clock.advance(30.0)   # far past the client's deadline: nobody cancels it
        c.chunk("r1:0", 0, "A")
        c.chunk("r1:0", 1, "B")
        c.end("r1:0")
        out = await work
        await pool.stop()
        return out, c.cancelled

    assert run(go()) == (["AB"], [])


def test_readiness_sums_the_sequences_of_a_streaming_endpoint(tmp_path):
    async def go():
        pool, _, c = await ready_pool(tmp_path)
        c.active_sequences, c.kv_cache_tokens, c.kv_cache_capacity = 2, 300, 4096
        detail = pool.readiness()
        await pool.stop()
        return detail

    assert run(go())["sequences"] == {"gen": {"active": 2, "kv_cache_tokens": 300,
                                              "kv_cache_capacity": 4096}}


def test_max_stream_s_stops_a_stream_nobody_reads_on_a_timer(tmp_path):
    """The deadline is a timer, not a check on read: a client that reads nothing (its
    answer stuck in send) still has its stream stopped at max_stream_s from its first
    chunk, even when that is shorter than the request's timeout."""
    async def go():
        pool, clock, c = await ready_pool(tmp_path, max_stream_s=3)
        p = pool.enqueue("gen", ["a"], timeout_s=10.0)
        await settle()
        clock.advance(0.5)
        c.chunk("r1:0", 0, "t")
        await settle()
        clock.advance(2.9)
        await settle()
        early = list(c.cancelled)
        clock.advance(0.1)   # 3 s after the first chunk, 3.5 s into a 10 s timeout
        await settle()
        events_ = await events(p)
        await pool.stop()
        return early, c.cancelled, events_

    early, cancelled, evs = run(go())
    assert early == [] and cancelled == ["r1:0"]
    assert isinstance(evs[-1], ItemFailed)
    assert "ran past max_stream_s (3 s)" in str(evs[-1].error)


def test_a_job_awaiting_a_stream_is_bounded_by_max_stream_s_not_its_long_timeout(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path, max_stream_s=5)
        job = asyncio.ensure_future(pool.enqueue("gen", ["a"], timeout_s=300.0))
        await settle()
        c.chunk("r1:0", 0, "t")
        await settle()
        clock.advance(5.0)
        out = await job
        await pool.stop()
        return out, c.cancelled

    (out,), cancelled = run(go())
    assert isinstance(out, TimeoutError) and "max_stream_s (5 s)" in str(out)
    assert cancelled == ["r1:0"]


def test_an_adopted_endless_stream_frees_its_slot_at_max_stream_s(tmp_path):
    async def go():
        pool, clock, c = await ready_pool(tmp_path, max_stream_s=20)
        p = pool.enqueue("gen", ["a", "b"], timeout_s=1.0)
        await settle()
        work = p.adopt()
        clock.advance(5.0)     # past the client's deadline: no longer applies
        await settle()
        c.chunk("r1:0", 0, "A")
        for _ in range(100):   # nobody reads: no events are kept for a job
            c.chunk("r1:0", 1, "x" * 100)
        await settle()
        unread = p.unread_bytes
        clock.advance(19.0)    # 24 s: "b" never streamed (20 s from the hand-off)
        await settle()
        clock.advance(1.0)     # "a" 20 s after its first chunk
        out = await work
        await pool.stop()
        return out, c.cancelled, unread

    out, cancelled, unread = run(go())
    assert unread == 0
    assert "no first chunk within max_stream_s (20 s) of its hand-off" in str(out[1])
    assert "ran past max_stream_s (20 s)" in str(out[0])
    assert cancelled == ["r1:1", "r1:0"]
