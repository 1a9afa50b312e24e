"""A scripted `StreamPending` for in-process tests of streaming routes: each input decoded
as the container decodes it, the endpoint's generator run in the event loop, its chunks,
end or failure delivered as the router reads them."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from floodway.core.clock import ManualClock
from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed
from floodway.functions.items import item_decoder
from floodway.functions.streams import combine
from floodway.routers.batch_item import item_failed
from floodway.runtime.calling import error_text


class Streamed:
    """A streaming request played in the event loop: each input decoded as the container
    decodes it, the endpoint's generator run, its chunks and end as the router reads them."""

    def __init__(self, name: str, fn: Any, items: list[Any], clock: ManualClock):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.left, self.clock, self.name = len(items), clock, name
        decode = item_decoder(fn)
        self.tasks = [asyncio.ensure_future(self._run(fn, i, decode(x) if decode else x))
                      for i, x in enumerate(items)]

    async def _run(self, fn: Any, i: int, item: Any) -> None:
        chunks = []
        try:
            gen = fn(None, item)
            it = gen if inspect.isasyncgen(gen) else _aiter(gen)
            async for c in it:
                chunks.append(c)
                await self.queue.put(ChunkEvent(i, c, self.clock.monotonic()))
            await self.queue.put(ItemEnd(i, combine(chunks)))
        except Exception as e:  # noqa: BLE001 - as the worker names it
            await self.queue.put(ItemFailed(i, item_failed(self.name, f"r1:{i}",
                                                           error_text(e))))

    async def next_event(self) -> Any:
        if self.left == 0:
            return None
        ev = await self.queue.get()
        self.left -= not isinstance(ev, ChunkEvent)
        return ev

    def cancel(self) -> int:
        running = [t for t in self.tasks if not t.done()]
        for t in running:
            t.cancel()
        return len(running)

    def dispatched(self) -> bool:
        return True

    def adopt(self) -> Any:
        raise AssertionError("a scripted stream is never handed to the job queue")


async def _aiter(gen: Any) -> Any:
    for c in gen:
        yield c
