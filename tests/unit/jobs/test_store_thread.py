"""The job store's thread: calls run off the event loop, in the order made, and raise what
they raised."""

from __future__ import annotations

import asyncio
import threading

import pytest

from floodway.jobs.store_thread import StoreThread, inline


def test_calls_run_on_one_other_thread_in_the_order_made():
    order: list[int] = []
    threads: set[int] = set()

    def step(k: int) -> int:
        threads.add(threading.get_ident())
        order.append(k)
        return k * 2

    async def go() -> list[int]:
        io = StoreThread()
        futures = [io(step, k) for k in range(50)]   # made before any is awaited
        got = [await f for f in futures]
        io.close()
        return got

    assert asyncio.run(go()) == [k * 2 for k in range(50)]
    assert order == list(range(50))
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_a_failed_call_raises_for_its_caller_only():
    def boom() -> None:
        raise ValueError("locked")

    async def go(io) -> int:
        with pytest.raises(ValueError, match="locked"):
            await io(boom)
        return await io(int, "7")

    thread = StoreThread()
    assert asyncio.run(go(thread)) == 7
    thread.close()
    assert asyncio.run(go(inline)) == 7
