"""The batcher's side of a batch on a container (`Sending`, a base of
`floodway.routers.batcher.Batcher`): sent, answered, lost and retried, or partly skipped by
the worker.

A batch's items go with their deadlines (seconds left, as of sending: the container sends
them as times on the worker's clock). An item whose future is cancelled while it is on a
container (the caller left, the handler timed out) is named to the container
(`Slot.cancel_item`): the worker skips it if its batch has not started yet, as it skips an
item whose deadline passed. A skipped item (`DROPS`) is counted in `dropped` as
``"cancelled_at_worker"`` or ``"deadline_at_worker"``, an item still awaited past its
deadline fails with TimeoutError (as one dropped from the queue), and one a job adopted
meanwhile (its deadline extended, `Batcher.extend`) is queued again. The batch's service
time and padded tokens then count the rows that ran (`on_batch`; a batch that ran none is
not counted).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from typing import Any

from floodway.errors import EndpointError, Unavailable
from floodway.routers.batch_item import (
    DROPS,
    Item,
    SentBatch,
    Slot,
    answer,
    early,
    padded,
    retried,
    unsendable,
    why,
)

log = logging.getLogger("floodway.batcher")


class Sending:
    """Sending batches and hearing their end, for `Batcher` (whose attributes it uses: the
    queue `_heap`, `pick`, `on_batch`, `on_send`, `on_free`, `dropped`, the counts)."""

    # Items on a container, by id, until their batch ends (`Batcher.extend` reaches them).
    _flying: dict[str, Item]

    def _send(self: Any, batch: list[Item]) -> None:
        if not batch:
            return
        try:
            slot = self._pick(self._idle_only(all(self._prio(it) == 0 for it in batch)),
                              batch[0])
        except BaseException:
            self._requeue(batch)   # taken from the queue: back before the loop restarts
            raise
        if slot is None:   # the slot went away while the batch filled: back to the queue
            self._requeue(batch)
            return
        now = self.now()
        # A sequence's deadline bounds its first chunk, which the router watches itself.
        left = {} if self.streaming else {"left_s": [it.deadline_s - now for it in batch]}
        try:
            fut = slot.submit([(it.id, it.value) for it in batch],
                              on_item=early({it.id: it for it in batch}, self.endpoint,
                                            self.sequences, self.now), **left)
        except Unavailable:
            self._requeue(batch)
            return
        except Exception as e:  # noqa: BLE001 - the batch never went; the loop goes on
            # The items the pipe cannot carry fail alone, the others are queued again.
            self._requeue(unsendable(batch, e, self.endpoint, log))
            return
        self._crashes = 0
        tokens = padded(batch) if self.cost is not None else 0
        self._sent(slot.id, tokens)
        for it in batch:
            it.slot = slot   # where a cancelled item is named
            self._flying[it.id] = it
            if self.sequences is not None:
                self.sequences.sent(it, slot, now)
        task = asyncio.create_task(self._deliver(batch, slot, fut, tokens))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        if self.on_free:   # the batch ended, however: its slot is free
            task.add_done_callback(lambda _t: self.on_free and self.on_free())
        if self.on_send:
            self.on_send(slot)

    def _requeue(self: Any, batch: list[Item]) -> None:
        for item in batch:
            if item.future.done():
                continue
            if self.sequences is not None:
                self.sequences.ended(item, False)   # running no more: queued again
                self.sequences.queued(item, self._prio(item))
            item.slot = None
            self._recounted(item)
            heapq.heappush(self._heap, item)
        self.notify()

    async def _deliver(self: Any, batch: list[Item], slot: Slot, fut: asyncio.Future,
                       tokens: int = 0) -> None:
        try:
            result = await fut
        except Exception as e:  # noqa: BLE001 - no item may be left waiting forever
            self._landed(slot.id, tokens)
            self._grounded(batch)
            if isinstance(e, Unavailable):   # its container died: retried once (`retried`)
                log.warning("batch of %d rows lost on container %s (%s); retrying once",
                            len(batch), slot.id, e)
                self._requeue(retried(batch, e))
                return
            for it in batch:
                if not it.future.done():
                    it.future.set_exception(EndpointError(
                        f"endpoint {self.endpoint!r}: its batch failed ({why(e)})"))
            self.notify()
            return
        self._landed(slot.id, tokens)
        self._grounded(batch)
        skipped = {it.id: DROPS[m] for it in batch
                   if (m := result.errors.get(it.id)) is not None and m in DROPS}
        ran = [it for it in batch if it.id not in skipped]
        if skipped:
            self._requeue(self._skipped([(it, skipped[it.id]) for it in batch
                                         if it.id in skipped]))
        answer(ran, result, self.endpoint)
        if self.on_batch and result.rows > 0:   # what ran, for the service-time fit
            self.on_batch(SentBatch(result, padded(ran) if self.cost is not None else 0),
                          slot)
        self.notify()

    def _grounded(self, batch: list[Item]) -> None:
        for it in batch:
            self._flying.pop(it.id, None)

    def _skipped(self: Any, items: list[tuple[Item, str]]) -> list[Item]:
        """The items the worker skipped, each with its reason ("cancelled", "deadline"; see
        the module) -> those to queue again."""
        again, now = [], self.now()
        for it, reason in items:
            if not it.future.done() and it.deadline_s > now:
                again.append(it)   # adopted by a job since it was sent: it runs later
                continue
            self.dropped[f"{reason}_at_worker"] += 1
            if not it.future.done():
                it.future.set_exception(TimeoutError(
                    "deadline passed before its batch started on a container"))
        return again


__all__ = ["Sending"]
