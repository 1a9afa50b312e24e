"""A stream's memory in the router is bounded: events its client has not read (past the cap
its unfinished inputs are cancelled and it ends with an error naming why), and the chunks
kept for the combined outputs (past the cap the input fails with a 413). Futures stand in
for the batcher's items; a manual clock; nothing waits on real time."""

from __future__ import annotations

import asyncio

from floodway.core.clock import ManualClock
from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed
from floodway.errors import EndpointError
from floodway.http.streaming import error_kind
from floodway.runtime.pending import MAX_OUTPUT_BYTES, MAX_UNREAD_BYTES, StreamPending
from tests.unit.runtime.fakes import settle


def stream(count: int = 1, **limits) -> StreamPending:
    p = StreamPending("gen", count, clock=ManualClock(), timeout_s=1.0, max_stream_s=60.0,
                      **limits)
    loop = asyncio.get_running_loop()
    p.attach([loop.create_future() for _ in range(count)], lambda: True)
    return p


async def drain(p: StreamPending) -> list:
    out = []
    while (ev := await p.next_event()) is not None:
        out.append(ev)
    return out


def test_the_defaults_are_mebibytes():
    assert MAX_UNREAD_BYTES == 8 * 2**20 and MAX_OUTPUT_BYTES == 32 * 2**20


def test_a_client_that_falls_behind_has_its_stream_cancelled_with_the_reason():
    async def go():
        p = stream(2, max_unread_bytes=1000)
        for i in range(9):
            p.on_chunk(i % 2, "y" * 100)     # 102 bytes each as JSON: 918 unread
        before = [f.cancelled() for f in p.futures]
        p.on_chunk(0, "y" * 100)             # 1020 > 1000
        after = [f.cancelled() for f in p.futures]
        p.on_chunk(1, "z" * 100)             # after the cancel: dropped
        await settle()
        return before, after, await drain(p), p.unread_bytes

    before, after, evs, unread = asyncio.run(go())
    assert before == [False, False] and after == [True, True]
    assert sum(isinstance(e, ChunkEvent) for e in evs) == 10 and unread == 0
    failed = [e for e in evs if isinstance(e, ItemFailed)]
    assert [e.index for e in failed] == [0, 1]
    assert "the client read slower than the stream produced: 0.0 MiB unread" \
        in str(failed[0].error)
    assert error_kind(failed[0].error) == "slow_client"


def test_a_client_that_reads_along_never_meets_the_unread_cap():
    async def go():
        p = stream(1, max_unread_bytes=1000)
        got = 0
        for _ in range(50):                  # 5 KB in all, never more than 102 unread
            p.on_chunk(0, "y" * 100)
            got += isinstance(await p.next_event(), ChunkEvent)
        p.futures[0].set_result(None)
        await settle()
        return got, await drain(p)

    got, rest = asyncio.run(go())
    assert got == 50 and isinstance(rest[-1], ItemEnd) and len(rest[-1].output) == 5000


def test_outputs_over_the_cap_fail_the_input_with_a_413_and_free_its_chunks():
    async def go():
        p = stream(2, max_output_bytes=500)
        p.on_chunk(1, "b" * 98)              # 100 bytes kept for input 1
        for _ in range(4):
            p.on_chunk(0, "a" * 98)          # 400 kept for input 0: 500 in all
        p.on_chunk(0, "a")                   # 503 > 500: input 0 fails
        await settle()
        kept = p.kept_bytes
        p.futures[1].set_result(None)
        return kept, await p

    kept, (first, second) = asyncio.run(go())
    assert kept == 100                       # input 0's chunks went with it
    assert isinstance(first, EndpointError) and first.status == 413
    assert "inputs[0]: the outputs of this request are over the router's limit" in str(first)
    assert error_kind(first) == "too_large" and first.field == "inputs[0]"
    assert second == "b" * 98
