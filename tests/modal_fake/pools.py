"""The fake's model of Modal's containers for one function: who runs which input, when.

    pool = Pool(record, run_batch, Timing(service_s=0.05, cold_start_s=0.5))
    pool.submit([input_record, ...])      # queued in arrival order (Modal: one FIFO per function)
    pool.stats()                          # api_pb2.FunctionStats: backlog, num_total_tasks, ...

What is modelled, all on the server's event loop (asyncio time):

- containers: started by `_scale` while queued inputs exceed the free capacity, up to the
  function's ``max_containers`` (its autoscaler settings, as deployed or updated; else the
  definition's ``concurrency_limit``; else unbounded), and kept at ``min_containers`` or more.
  Those present when the pool is made are warm at once (they have been up since the
  deploy); any later one is "starting" for `Timing.cold_start_s` first. Containers never
  scale down (tests are shorter than any scaledown window).
- input concurrency: each container runs ``max_concurrent_inputs`` of the definition at once
  (``@modal.concurrent(max_inputs=)``), 1 when undeclared, as Modal does.
- batching (``@modal.batched``): a free slot takes the oldest input, then waits up to
  ``batch_linger_ms`` for more, up to ``batch_max_size``; the batch is one call of the handler.
- service time: `Timing.service_s` per batch (per input when unbatched), then `run_batch`
  (the servicer's: handler call and results) runs. With `Timing.one_device` the batches of
  one container take turns on its device (a GPU shared by its concurrent inputs).

An input stays queued (and runs later) even when its caller gave up, as on Modal: the
client does not withdraw a ``.remote`` call it stopped waiting for.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from modal_proto import api_pb2

from tests.modal_fake.state import FunctionRecord, InputRecord

_names = itertools.count(1)


@dataclass(frozen=True)
class Timing:
    """Seconds a fake container takes: `service_s` per batch (or unbatched input), and
    `cold_start_s` from being started to taking inputs (containers started after the pool's
    first moment only). `one_device`: the batches a container runs at once share one device
    (a GPU), so their service times do not overlap: input concurrency then only pipelines
    (a batch holds its slot while it waits for the device), it adds no throughput."""

    service_s: float = 0.0
    cold_start_s: float = 0.0
    one_device: bool = False


async def after(seconds: float) -> None:
    """Return once `seconds` of the loop's time have passed: a modelled duration (service
    time, cold start) on the server's event loop."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    timer = loop.call_later(max(0.0, seconds), lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        timer.cancel()


class _Closed(Exception):
    pass


@dataclass
class Container:
    name: str
    ready: bool
    busy_slots: int = 0          # slots holding a batch (being formed or served)
    busy_inputs: int = 0
    device: asyncio.Lock = field(default_factory=asyncio.Lock)


class Pool:
    """The containers of one function (see the module doc). `run_batch(container, inputs)`
    runs a batch once its service time has passed and records the results."""

    def __init__(self, record: FunctionRecord,
                 run_batch: Callable[[Container, list[InputRecord]], Awaitable[None]],
                 timing: Timing):
        self.record, self.timing, self._run_batch = record, timing, run_batch
        d = record.definition or api_pb2.Function()
        self.slots = max(1, d.max_concurrent_inputs)
        self.batch_max = max(1, d.batch_max_size)
        self.linger_s = d.batch_linger_ms / 1000.0
        self.queue: deque[InputRecord] = deque()
        self.containers: list[Container] = []
        self._tasks: set[asyncio.Task] = set()
        self._cond = asyncio.Condition()
        self._closed = False
        self._scale(warm=True)

    # ------------------------------------------------------------ limits

    @property
    def max_containers(self) -> float:
        a = self.record.autoscaler
        if a.max_containers:
            return a.max_containers
        d = self.record.definition
        return d.concurrency_limit if d is not None and d.concurrency_limit else math.inf

    @property
    def min_containers(self) -> int:
        return self.record.autoscaler.min_containers

    # ------------------------------------------------------------ work

    def submit(self, inputs: list[InputRecord]) -> None:
        """Queue `inputs` (FIFO) and start containers if they need them."""
        self.queue.extend(inputs)
        self._scale()
        self._notify()

    def withdraw(self, call_id: str) -> list[InputRecord]:
        """Remove the queued inputs of a cancelled call; returns them."""
        gone = [i for i in self.queue if i.function_call_id == call_id]
        self.queue = deque(i for i in self.queue if i.function_call_id != call_id)
        return gone

    def settings_changed(self) -> None:
        """The autoscaler settings changed: honour a new ``min_containers`` at once."""
        self._scale()

    def stats(self) -> api_pb2.FunctionStats:
        """Modal's current stats of the function: backlog (queued inputs), containers
        (starting ones included), running inputs and the free capacity."""
        free = sum(self._free(c) for c in self.containers)
        return api_pb2.FunctionStats(
            backlog=len(self.queue), num_total_tasks=len(self.containers),
            num_running_inputs=sum(c.busy_inputs for c in self.containers),
            input_headroom=max(0, free - len(self.queue)))

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------ containers

    def _free(self, c: Container) -> int:
        return (self.slots - c.busy_slots) * self.batch_max

    def _scale(self, warm: bool = False) -> None:
        need = len(self.queue) - sum(self._free(c) for c in self.containers)
        per = self.slots * self.batch_max
        while (len(self.containers) < self.min_containers
               or (need > 0 and len(self.containers) < self.max_containers)):
            self._start(warm)
            need -= per

    def _start(self, warm: bool) -> None:
        c = Container(f"ta-fake-{next(_names):04d}", ready=warm)
        self.containers.append(c)
        self._spawn(self._boot(c))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _boot(self, c: Container) -> None:
        if not c.ready:
            await after(self.timing.cold_start_s)
            c.ready = True
        for _ in range(self.slots):
            self._spawn(self._slot(c))

    async def _slot(self, c: Container) -> None:
        try:
            while True:
                batch = await self._take(c)
                c.busy_inputs += len(batch)
                now = asyncio.get_running_loop().time()
                for i in batch:
                    i.started_at, i.container = now, c.name
                try:
                    if self.timing.one_device:
                        async with c.device:
                            await after(self.timing.service_s)
                    else:
                        await after(self.timing.service_s)
                    await self._run_batch(c, batch)
                finally:
                    c.busy_inputs -= len(batch)
                    c.busy_slots -= 1
        except _Closed:
            pass

    async def _take(self, c: Container) -> list[InputRecord]:
        loop = asyncio.get_running_loop()
        async with self._cond:
            await self._cond.wait_for(lambda: self.queue or self._closed)
            if self._closed:
                raise _Closed
            batch = [self.queue.popleft()]
            c.busy_slots += 1
            deadline = loop.time() + self.linger_s
            while len(batch) < self.batch_max:
                if self.queue:
                    batch.append(self.queue.popleft())
                    continue
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(self._cond.wait(), left)
                except TimeoutError:
                    break
            return batch

    def _notify(self) -> None:
        async def wake() -> None:
            async with self._cond:
                self._cond.notify_all()

        self._spawn(wake())
