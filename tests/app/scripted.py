"""A scripted `Backend` and `Pending` for in-process tests of the HTTP layer, driven by a
`ManualClock`: nothing waits on real time, a test advances the clock instead."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from floodway.core.clock import ManualClock, within
from floodway.core.generation import GenerationModel
from floodway.errors import EndpointError, Unavailable
from floodway.functions.app import App
from floodway.routers.decide import ContainerView, ServiceTime, Snapshot
from floodway.routers.decide_stream import SequenceQueue, StreamContainer, StreamSnapshot


class ScriptedPending:
    """The work of one request: `work` gives the per-input results. Awaiting it waits at
    most `timeout_s` on `clock` (then TimeoutError, and the work is withdrawn unless
    adopted); `adopt()` hands over the work itself."""

    def __init__(self, work: Awaitable[list[Any]], *, clock: ManualClock, timeout_s: float,
                 dispatched: bool = False):
        self._work = asyncio.ensure_future(work)
        self.clock, self.timeout_s, self._dispatched = clock, timeout_s, dispatched
        self.adopted = False

    def dispatched(self) -> bool:
        return self._dispatched

    def adopt(self) -> Awaitable[list[Any]]:
        self.adopted = True
        return self._work

    def __await__(self):
        return self._wait().__await__()

    async def _wait(self) -> list[Any]:
        try:
            return await within(self.clock, asyncio.shield(self._work), self.timeout_s)
        finally:
            if not self.adopted:
                self._work.cancel()   # withdrawn: past its deadline, or the await cancelled


class ScriptedBackend:
    """Runs the endpoint function of `app` in process; `mode` makes it fail in chosen ways:

        ok            the outputs at once
        unavailable   every item Unavailable (retry after 2.5 s)
        not_started   enqueue raises Unavailable
        slow          never answers: the request's deadline passes (on the clock)
        timeout       the queue's own deadline fires at once (TimeoutError)
        raises        every item fails (EndpointError); one_bad: the item "bad" fails
        short         one output too few
        on_container  dispatched at once, answered after `delay_s` on the clock

    Its snapshot shows one warm container with `free` free slots (0: all busy for 10 s); so
    does its stream snapshot (4 sequence slots; the busy ones end in 10 s), with the route's
    spill targets, and a queue of `queued_sequences` (`max_queue` 8)."""

    def __init__(self, app: App, clock: ManualClock):
        self.app, self.clock = app, clock
        self.mode = "ok"
        self.calls: list[tuple[str, list, float]] = []
        self.ready = True
        self.free = 4
        self.cold_starts = 0
        self.delay_s = 0.8
        self.listeners: list[Callable[[str, int, float], None]] = []
        self.pendings: list[ScriptedPending] = []
        self.queued_sequences = 0

    def snapshot(self, endpoint: str) -> Snapshot:
        backlog = 0.0 if self.free else 10.0
        c = ContainerView("1", "ready" if self.free else "busy", self.free, 4, backlog)
        return Snapshot(now_s=self.clock.monotonic(), containers=(c,),
                        service=ServiceTime(0.001, 0.01), cold_start_s=0.05,
                        max_batch_rows=32, max_queue=8, max_containers=2)

    def stream_snapshot(self, endpoint: str) -> StreamSnapshot:
        busy = 4 - self.free
        c = StreamContainer("1", "ready" if self.free else "busy", busy, 4, (10.0,) * busy)
        fast = ServiceTime(0.0001, 0.001)   # 1 ms a step or a prompt: no deadline is close
        q = SequenceQueue.fifo(self.queued_sequences, 10 * self.queued_sequences,
                               16 * self.queued_sequences)
        return StreamSnapshot(now_s=self.clock.monotonic(), containers=(c,),
                              model=GenerationModel(fast, fast), cold_start_s=0.05,
                              max_sequences=4, max_queue=8, max_containers=2,
                              spill=self.app[endpoint].route.spill, queue=q)

    def start_cold(self, endpoint: str) -> bool:
        self.cold_starts += 1
        return True

    def enqueue(self, endpoint: str, inputs: list, *, timeout_s: float, priority: int = 1,
                tenant: str = "anonymous") -> ScriptedPending:
        if self.mode == "not_started":
            raise Unavailable(f"endpoint {endpoint!r} is not started", retry_after_s=1.0)
        self.calls.append((endpoint, inputs, timeout_s))
        pending = ScriptedPending(self._results(endpoint, inputs), clock=self.clock,
                                  timeout_s=timeout_s, dispatched=self.mode == "on_container")
        self.pendings.append(pending)
        return pending

    async def _results(self, endpoint: str, inputs: list) -> list[Any]:
        mode = self.mode
        if mode == "unavailable":
            return [Unavailable("all busy", retry_after_s=2.5)] * len(inputs)
        if mode == "slow":
            await asyncio.Event().wait()
        if mode == "timeout":
            raise TimeoutError("the deadline passed while queued")
        if mode == "raises":
            return [EndpointError("endpoint 'upper' raised ValueError: boom")] * len(inputs)
        if mode == "one_bad":
            return [EndpointError("endpoint 'upper' raised ValueError: bad") if t == "bad"
                    else t.upper() for t in inputs]
        if mode == "short":
            return inputs[:-1]
        if mode == "on_container":
            await self.clock.sleep(self.delay_s)
        return self.app[endpoint](None, inputs)

    def readiness(self) -> dict[str, Any]:
        return {"ready": self.ready, "endpoints": {}}

    def add_batch_listener(self, listener: Callable[[str, int, float], None]) -> None:
        self.listeners.append(listener)


def client(asgi: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")


async def until(cond: Callable[[], Any], *, guard_s: float = 20.0) -> None:
    """Yield to the event loop until `cond()` holds. `guard_s` (real seconds) only fails a
    test that would otherwise hang; nothing here waits on a timer."""
    async with asyncio.timeout(guard_s):
        while not cond():
            await asyncio.sleep(0)


async def settle(turns: int = 50) -> None:
    """Let every task that can run, run (until they wait on the clock or a thread)."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def advance_when(clock: ManualClock, cond: Callable[[], Any], by_s: float) -> None:
    """Once `cond()` holds and the tasks have settled, advance `clock` by `by_s`."""
    await until(cond)
    await settle()
    clock.advance(by_s)
