"""Dynamic batching: one bounded priority queue per endpoint, batches cut by rows and tokens.

A request's inputs become items (`<request id>:<index>`), each with its estimated tokens
(`cost`: `floodway.routers.tokens`; 1 for items that are not text). The batcher takes items
in priority order (high first, then arrival), fills a batch up to `max_batch_rows` rows and
`max_batch_tokens` padded tokens (rows x the longest item), grouping similar lengths
(`floodway.routers.batch_item.group`: an item that would pad the batch heads one of its own,
unless its deadline is near), and waits at most `wait_ms` after the oldest item of the batch
arrived for more to come (the Triton / Ray Serve `batch_wait_timeout_s` rule). A batch goes
to a container only when one has a free slot: until then items wait in the queue, whose
size `decide()` bounds. Each batch's padded tokens go with its result to `on_batch`
(`SentBatch`), for the service-time fit.

Low-priority work (async jobs run at low priority) fills idle capacity below sync work: a
batch of low-priority items only goes to a container with nothing in flight, so a sync request
waits for no job rows not yet running (at most for the one job batch a container runs, which
`max_low_batch_s` keeps short: a job batch of 32 long texts took 4-8 s on 2 cores, and every
sync request behind it spilled to async, measured with benchmarks/goodput.py). Top-up
rule: a batch that starts with higher-priority items is never filled up with low-priority
ones, since `decide()` plans a sync request's service from the sync rows of its batch (its
own, the part-filled batch ahead, the sync arrival rate: low arrivals are not counted) and any
job row would make it slower than planned; job batches already fill every idle container.
(Not for a streaming endpoint: see below.)

Items whose deadline passed or whose caller went away (the future was cancelled) are dropped
before they reach a model: from the queue, and on a container until their batch starts (the
worker skips them: `floodway.routers.batch_send`). Results come back keyed by item id and are
mapped to the waiting futures by id, never by position. A bad item fails alone (the worker
re-runs a failing batch item by item; an input the worker pipe cannot carry fails before it
is sent). A batch lost to a dying container is retried once elsewhere; a second loss fails it
with Unavailable.

A streaming endpoint's batcher (`streaming`) sends each item (one sequence) on its own, at
once, and hands each streamed chunk to the item's `on_chunk` listener. Cancelling an item's
future withdraws it while queued and, once on a container, sends that container a Cancel
(its slot frees when the worker ends the item). An item whose container died is retried
only while no chunk of it went out: a half-sent stream is never replayed (Unavailable).
Its `SequenceBook` (`floodway.routers.sequences`) counts the sequences' tokens, queued and
running, and feeds the generation estimator; `pick` then also gets the head's KV need. A
low-priority sequence takes any free slot (queued behind higher priorities): sequences run
side by side, so it delays no one's batch, and an idle container may never come.

Times (deadlines, arrivals, the batch wait) are seconds on an injected clock, `loop.time()`
by default. The loop re-reads the clock whenever it wakes (`notify()`, a slot freeing, a
timer), so a test drives it with a fake clock and `notify()` instead of waiting.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from floodway.core.estimators import ArrivalRate
from floodway.core.priors import TEXT_SERVICE_PRIOR
from floodway.errors import Unavailable
from floodway.routers.batch_item import (
    ITEM_CHUNK,
    ITEM_ERROR,
    ITEM_RESULT,
    BatchResultLike,
    Item,
    SentBatch,
    Slot,
    group,
)
from floodway.routers.batch_queue import QueueCounts, prio
from floodway.routers.batch_send import Sending
from floodway.routers.sequences import SequenceBook

log = logging.getLogger("floodway.batcher")
# With no free slot the loop still wakes this often (clock seconds) to drop expired items.
RECHECK_S = 0.05
# A loop that raised is restarted at once, then after a back-off doubling from RECHECK_S up
# to this (event-loop seconds) while it keeps raising: logged, never a busy spin.
MAX_RESTART_DELAY_S = 1.0
# Items looked at per batch cut, in batches' rows: bounds the cut's cost in a long queue.
LOOKAHEAD_BATCHES = 8


class Batcher(QueueCounts, Sending):
    """The queue and batch former of one endpoint.

    `pick(idle_only)` returns a container with a free slot (with nothing in flight when
    `idle_only`) or None; call `notify()` whenever a slot frees or a container becomes ready.
    `on_send(container)` sees every batch as it is handed to a container (the pool's buffer
    containers start then); `on_batch(result, container)` sees every completed batch that
    ran rows, counting only those (service-time fit, metrics); `on_free()` hears every
    batch end, however it ended (a slot freed: the job queue's wake-up). `clock()` gives
    seconds (default `loop.time()`); deadlines passed to `submit` are on it. `streaming`:
    items are sequences (see the module); `sequences`: their bookkeeping (then `pick` also
    takes the head sequence's KV need).
    `cost(value)`: an input's estimated tokens (None: 1 each, and no token cut);
    `max_batch_tokens`: the padded-token budget of a batch (None: none); `batch_s(rows,
    padded_tokens)`: a batch's seconds (the endpoint's fit; default the text prior), which
    tells whether a length joins a batch and when a deadline is near (`group`);
    `max_low_batch_s`: the most seconds (by `batch_s`) a batch of low-priority work may take
    (None: no bound; see the module)."""

    def __init__(self, endpoint: str, *, max_batch_rows: int, wait_ms: float,
                 pick: Callable[..., Slot | None],
                 on_batch: Callable[[BatchResultLike, Slot], None] | None = None,
                 on_send: Callable[[Slot], None] | None = None,
                 clock: Callable[[], float] | None = None, streaming: bool = False,
                 sequences: SequenceBook | None = None,
                 on_free: Callable[[], None] | None = None,
                 cost: Callable[[Any], int] | None = None, max_batch_tokens: int | None = None,
                 batch_s: Callable[[int, int], float] | None = None,
                 max_low_batch_s: float | None = None):
        super().__init__(counts_tokens=cost is not None)   # the live queue counts
        self.endpoint, self.streaming, self.sequences = endpoint, streaming, sequences
        self.cost, self.max_batch_tokens = cost, max_batch_tokens
        self.batch_s = batch_s or TEXT_SERVICE_PRIOR.seconds
        self.max_low_batch_s = max_low_batch_s
        self._clock = clock
        self._heap: list[Item] = []
        self.max_batch_rows, self.wait_s = max_batch_rows, wait_ms / 1000.0
        self.pick, self.on_batch, self.on_send, self.on_free = pick, on_batch, on_send, on_free
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._crashes = 0   # times the loop raised since a batch last went out
        self._inflight: set[asyncio.Task] = set()
        self.arrivals = ArrivalRate()
        self.dropped = Counter[str]()   # reason -> items dropped before a model
        self._flying: dict[str, Item] = {}

    # ------------------------------------------------------------------ accounting
    def now(self) -> float:
        """Seconds on the batcher's clock."""
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    def extend(self, request_id: str, deadline_s: float) -> int:
        """Give the request's inputs not answered yet a later deadline (work a job has
        adopted: the client's deadline no longer applies to it); one its worker skips at
        the old deadline is queued again (`batch_send`). Returns how many were extended."""
        late = [it for it in (*self._heap, *self._flying.values()) if it.request == request_id
                and not it.future.done() and it.deadline_s < deadline_s]
        for it in late:
            it.deadline_s = deadline_s
        return len(late)

    def arrival_rows_per_s(self, now: float) -> float:
        """Rows of normal or high priority submitted per second over the `RATE_WINDOW_S`
        (5 s) before `now`, on the batcher's clock (`ArrivalRate`; not low: the module)."""
        return self.arrivals.rate(now)

    _prio = staticmethod(prio)   # 0 low .. 2 high

    def _unqueue(self, item: Item) -> None:
        if self._uncounted(item) and self.sequences is not None:
            self.sequences.unqueued(item, self._prio(item))

    def _withdrawn(self, item: Item, fut: asyncio.Future) -> None:
        """`item` ended or withdrawn: uncounted; a cancelled item on a container named to
        it (a sequence stops, an item not started is skipped: `batch_send`)."""
        self._unqueue(item)
        if self.sequences is not None:
            self.sequences.ended(item, not fut.cancelled() and fut.exception() is None)
        cancel = getattr(item.slot, "cancel_item", None)   # optional for a batch endpoint
        if fut.cancelled() and cancel is not None:
            try:
                cancel(item.id)
            except Exception:  # noqa: BLE001 - a done callback must not raise
                log.exception("cancelling %s on container %s", item.id, item.slot.id)

    # ------------------------------------------------------------------ public
    def submit(self, request_id: str, values: list[Any], *, deadline_s: float,
               priority: int = 1, tenant: str = "anonymous",
               on_chunk: Callable[[int, Any], None] | None = None) -> list[asyncio.Future]:
        """Queue one request's inputs; one future per input, resolving to its output or
        raising EndpointError (the item failed), TimeoutError (deadline passed while queued)
        or Unavailable (its container died twice, or once mid-stream). Cancel the futures
        to withdraw them. `on_chunk(index, data)` hears each streamed chunk of input
        `index` (a streaming endpoint's, whose futures resolve to None at the end)."""
        loop = asyncio.get_running_loop()
        now = self.now()
        futures = []
        level = max(0, min(2, priority))
        self._counted_request(request_id, tenant, level, len(values))
        for i, value in enumerate(values):
            fut = loop.create_future()
            item = Item((-priority, next(self._seq)), f"{request_id}:{i}", value, request_id,
                        tenant, deadline_s, now, fut)
            if on_chunk is not None:
                item.on_chunk = functools.partial(on_chunk, i)
            if self.cost is not None:
                item.length = max(1, int(self.cost(value)))
            self._counted(item)
            if self.sequences is not None:
                item.cost = self.sequences.cost(value)
                self.sequences.queued(item, self._prio(item))
            # A cancelled future (client gone, timeout) leaves the queue count at once.
            fut.add_done_callback(functools.partial(self._withdrawn, item))
            heapq.heappush(self._heap, item)
            futures.append(fut)
        if level > 0:   # low rows never join a sync batch (see the module)
            self.arrivals.record(now, len(values))
        self.notify()
        return futures

    def notify(self) -> None:
        self._wake.set()

    def start(self) -> None:
        """Run the loop as a task, supervised: a loop that raises is logged and restarted
        (`MAX_RESTART_DELAY_S`), so an endpoint's queue never stops draining silently."""
        if self._stopped:
            return
        self._task = asyncio.create_task(self._run(), name=f"batcher-{self.endpoint}")
        self._task.add_done_callback(self._supervise)

    def _supervise(self, task: asyncio.Task) -> None:
        if self._stopped or task.cancelled():
            return
        self._crashes += 1
        delay_s = 0.0 if self._crashes == 1 else min(MAX_RESTART_DELAY_S,
                                                      RECHECK_S * 2 ** (self._crashes - 2))
        log.error("batcher of %r raised (%d in a row); restarting it in %.2fs", self.endpoint,
                  self._crashes, delay_s, exc_info=task.exception())
        task.get_loop().call_later(delay_s, self.start)

    async def stop(self) -> None:
        self._stopped = True
        if self._task:
            self._task.cancel()
        for item in self._heap:
            if not item.future.done():
                item.future.set_exception(Unavailable(f"{self.endpoint!r} is shutting down"))
        self._heap.clear()
        for t in list(self._inflight):
            t.cancel()

    # ------------------------------------------------------------------ the loop
    def _prune(self, now: float) -> None:
        """Drop dead items at the head: withdrawn, or past their deadline."""
        while self._heap:
            head = self._heap[0]
            if head.future.done():
                self.dropped["cancelled"] += 1
            elif head.deadline_s <= now:
                self.dropped["deadline"] += 1
                head.future.set_exception(TimeoutError("deadline passed while queued"))
            else:
                return
            heapq.heappop(self._heap)

    async def _sleep_until_woken(self, timeout_s: float | None) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        except TimeoutError:
            pass

    async def _run(self) -> None:
        while True:
            self._prune(self.now())
            if not self._heap:
                await self._sleep_until_woken(None)
                continue
            slot = self._pick(self._idle_only(self._head_is_low()), self._heap[0])
            if slot is None:
                # Re-check deadlines now and then even if no slot frees.
                await self._sleep_until_woken(RECHECK_S)
                continue
            live = sum(1 for it in self._heap if not it.future.done())
            oldest = min(it.enqueued_s for it in self._heap)
            fill_by = oldest + self.wait_s
            if live < self.max_batch_rows and self.now() < fill_by:
                await self._sleep_until_woken(fill_by - self.now())
                if sum(1 for it in self._heap if not it.future.done()) < self.max_batch_rows \
                        and self.now() < fill_by:
                    continue   # woken early by a slot or a single item: look again
            self._send(self._take(self.now()))

    def _pick(self, idle_only: bool, head: Item) -> Slot | None:
        """`pick`, told the KV need of a sequence (`head`) when there is a SequenceBook."""
        if self.sequences is None:
            return self.pick(idle_only)
        return self.pick(idle_only, head.cost.kv_need)

    def _idle_only(self, low: bool) -> bool:
        """Low-priority work waits for an idle container, except a sequence (the module)."""
        return low and not self.streaming

    def _head_is_low(self) -> bool:
        """Everything queued is low priority (the head is the highest priority queued)."""
        return bool(self._heap) and self._prio(self._heap[0]) == 0

    def _take(self, now: float) -> list[Item]:
        """The next batch: the head, then up to max_batch_rows rows and max_batch_tokens
        padded tokens in priority order, similar lengths together (`group`); a batch of sync
        work is not topped up with low-priority rows (the module's top-up rule). Items
        found past their deadline are dropped."""
        self._prune(now)
        if not self._heap:
            return []
        head = heapq.heappop(self._heap)
        self._unqueue(head)
        if self.max_batch_rows <= 1:
            return [head]
        rows, budget = self.max_batch_rows, self.max_batch_tokens
        near_s = self.wait_s   # and the batches' own seconds (`group`)
        ahead = heapq.nsmallest(LOOKAHEAD_BATCHES * rows, self._heap)
        batch, expired = group(head, ahead, now, max_rows=rows, max_tokens=budget,
                               batch_s=self.batch_s, near_s=near_s, prio=self._prio,
                               max_low_s=self.max_low_batch_s)
        for it in expired:
            self.dropped["deadline"] += 1
            it.future.set_exception(TimeoutError("deadline passed while queued"))
        gone = {id(it) for it in batch[1:]} | {id(it) for it in expired}
        if gone:
            self._heap = [it for it in self._heap if id(it) not in gone]
            heapq.heapify(self._heap)
        for it in batch[1:]:
            self._unqueue(it)
        return batch


__all__ = ["ITEM_CHUNK", "ITEM_ERROR", "ITEM_RESULT", "MAX_RESTART_DELAY_S", "RECHECK_S",
           "Batcher", "BatchResultLike", "Item", "SentBatch", "Slot"]
