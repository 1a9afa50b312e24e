"""Fakes for the local pool's unit tests: a container that plays a worker process's states
without a process, on a `ManualClock` (time moves only when a test advances it)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.runtime.container import BatchResult, State
from floodway.runtime.protocol import Chunk, ItemResult

T0 = 1000.0          # monotonic seconds at the start of a test


class StepClock(ManualClock):
    """A `ManualClock` from `T0` whose `advance` returns the new monotonic time (what a
    test passes to `Pool.tick`)."""

    def __init__(self) -> None:
        super().__init__(monotonic_s=T0)

    def advance(self, seconds: float) -> float:
        super().advance(seconds)
        return self.monotonic()


async def settle(rounds: int = 20) -> None:
    """Let every task run until it waits on something (no wall-clock time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeContainer:
    """A container without a process: the test makes it ready, fail, answer or hang."""

    _ids = itertools.count(1)

    def __init__(self, endpoint: str, clock: ManualClock, slots: int = 8):
        self.id = next(self._ids)
        self.endpoint, self.clock, self.slots = endpoint, clock, slots
        self.state = State.STARTING
        now = clock.monotonic()
        self.history: list[tuple[float, State]] = [(now, State.STARTING)]
        self.inflight: dict[int, asyncio.Future] = {}
        self.inflight_rows: dict[int, int] = {}
        self.last_progress_s = self.idle_since_s = self.last_pong_s = now
        self.ping_sent_s: float | None = None
        self.timings_s: dict[str, float] = {}
        self.build: str | None = None
        self.error: str | None = None
        self.on_change = None
        self.pings = 0
        self.silent = False     # True: pings go unanswered (a hung process)
        self.left_s: list[float] | None = None   # the last batch's seconds left per item
        self.batch_items: dict[int, list[tuple[str, Any]]] = {}
        self.cancelled: list[str] = []           # items the batcher named (cancel_item)
        self.rss_mib: float | None = None   # its worker's resident MiB, as the test sets it
        self.batches_done = 0   # batches answered (calls of the endpoint function)
        self._batch_ids = itertools.count(1)
        self._ready = asyncio.Event()
        self._exited = asyncio.Event()

    # --------------------------------------------------------------- driven by the test
    def _to(self, state: State) -> None:
        self.state = state
        self.history.append((self.clock.monotonic(), state))
        if self.on_change:
            self.on_change()

    def become_ready(self, cold_start_s: float = 1.5) -> None:
        self.timings_s = {"total": cold_start_s}
        self.idle_since_s = self.last_pong_s = self.clock.monotonic()
        self._to(State.READY)
        self._ready.set()

    def fail_start(self, why: str = "cannot load") -> None:
        self.error = why
        self._to(State.FAILED)
        self._ready.set()
        self._exited.set()

    def answer(self, batch_id: int, outputs: dict[str, Any], service_s: float = 0.02) -> None:
        """Answer batch `batch_id` with `outputs` (item id -> output), as a worker that took
        `service_s` seconds for it (the router's service-time fit reads it)."""
        fut = self.inflight.pop(batch_id)
        rows = self.inflight_rows.pop(batch_id)
        self.batches_done += 1
        self.last_progress_s = self.clock.monotonic()
        if not self.inflight:
            self.idle_since_s = self.clock.monotonic()
        fut.set_result(BatchResult(outputs, {}, rows, service_s / 2, service_s))
        if self.on_change:
            self.on_change()

    def answer_skipping(self, batch_id: int, outputs: dict[str, Any], skipped: dict[str, str],
                        service_s: float = 0.02) -> None:
        """Answer batch `batch_id` as a worker that skipped the items of `skipped` (item id
        -> its ItemError message) and ran the rest (`outputs`): its rows are those run."""
        fut = self.inflight.pop(batch_id)
        self.inflight_rows.pop(batch_id)
        self.last_progress_s = self.clock.monotonic()
        if not self.inflight:
            self.idle_since_s = self.clock.monotonic()
        fut.set_result(BatchResult(outputs, dict(skipped), len(outputs), service_s / 2,
                                   service_s))
        if self.on_change:
            self.on_change()

    # --------------------------------------------------------------- the Container surface
    @property
    def free_slots(self) -> int:
        if self.state not in (State.READY, State.BUSY):
            return 0
        return self.slots - len(self.inflight)

    async def start(self) -> None:
        pass

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        await self._ready.wait()
        return self.state in (State.READY, State.BUSY)

    async def wait_exit(self) -> None:
        await self._exited.wait()

    def submit(self, items: list[tuple[str, Any]], on_item: Any = None,
               left_s: list[float] | None = None) -> asyncio.Future:
        batch_id = next(self._batch_ids)
        fut = asyncio.get_running_loop().create_future()
        if not self.inflight:
            self.last_progress_s = self.clock.monotonic()
        self.inflight[batch_id] = fut
        self.inflight_rows[batch_id] = len(items)
        self.items = list(items)
        self.left_s = None if left_s is None else list(left_s)
        self.batch_items[batch_id] = list(items)
        return fut

    def cancel_item(self, item_id: str) -> bool:
        """The batcher named an item whose caller left (a worker skips it if its batch has
        not started): recorded in `cancelled`; True while its batch is in flight."""
        self.cancelled.append(item_id)
        return any(item_id == i for b in self.inflight for i, _ in self.batch_items[b])

    def ping(self) -> bool:
        self.pings += 1
        if self.silent:
            self.ping_sent_s = self.clock.monotonic()
        else:
            self.last_pong_s = self.clock.monotonic()
        return True

    def kill(self, reason: str) -> None:
        self.error = reason
        self._to(State.FAILED)
        self._ready.set()
        self._exited.set()

    async def stop(self, grace_s: float = 10.0) -> None:
        if self.state in (State.STOPPED, State.FAILED):
            return
        self._to(State.DRAINING)
        self._to(State.STOPPED)
        self._ready.set()
        self._exited.set()

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "state": str(self.state), "inflight": len(self.inflight),
                "build": self.build, "cold_start_s": self.timings_s, "error": self.error}


class StreamFake(FakeContainer):
    """A streaming endpoint's container without a process: one sequence per batch, at once;
    the test plays its worker (`load`, `chunk`, `end`) and sees what was cancelled."""

    def __init__(self, endpoint: str, clock: ManualClock, slots: int = 4):
        super().__init__(endpoint, clock, slots)
        self.active_sequences = self.kv_cache_tokens = self.kv_cache_capacity = 0
        self.sequences: dict[str, tuple[int, Any]] = {}   # item id -> (batch id, on_item)
        self.cancelled: list[str] = []

    def submit(self, items: list[tuple[str, Any]], on_item: Any = None) -> asyncio.Future:
        fut = super().submit(items, on_item)
        batch_id = next(reversed(self.inflight))
        for item_id, _ in items:
            self.sequences[item_id] = (batch_id, on_item)
        return fut

    def load(self, active: int, kv_tokens: int, kv_capacity: int) -> None:
        """The worker's Load message."""
        self.active_sequences, self.kv_cache_tokens = active, kv_tokens
        self.kv_cache_capacity = kv_capacity

    def chunk(self, item_id: str, data: Any) -> None:
        batch_id, on_item = self.sequences[item_id]
        self.last_progress_s = self.clock.monotonic()
        on_item(Chunk(batch_id, item_id, 0, data))

    def end(self, item_id: str) -> None:
        """The item's end (ItemResult None), then its batch's: the slot frees."""
        batch_id, on_item = self.sequences.pop(item_id)
        on_item(ItemResult(batch_id, item_id, None))
        self.answer(batch_id, {item_id: None})

    def cancel_item(self, item_id: str) -> bool:
        self.cancelled.append(item_id)
        return item_id in self.sequences


def app_with(name: str = "embed", **kw: Any) -> fw.App:
    """An app of one endpoint with the given decorator options."""
    app = fw.App("t")
    kw.setdefault("model", fw.HFModel("org/model", revision="a" * 40))
    app.endpoint(name=name, **kw)(lambda model, texts: [t.upper() for t in texts])
    return app
