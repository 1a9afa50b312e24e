"""What a batch worker hears from the router, read ahead of the batch it runs.

The router pipes a container at most two batches, one running and one waiting in the pipe,
so a Cancel for the waiting batch (its caller left) sits in the pipe behind that batch. An
`Inbox` reads the pipe on a thread as lines arrive (`threaded`); before a batch starts, the
worker catches up on what arrived (`catch_up`). Cancels are noted at once, out of band;
Batches and Pings, and a malformed line, keep their order (`next`). `start(batch, now)`
then splits a batch into the items to run and the ItemErrors of those it skips: named by a
Cancel, or past their deadline (`Batch.deadlines`, on `time.monotonic()`). An item that
started is never stopped: a Cancel for a running or finished batch is forgotten.

Used by `floodway.runtime.worker.serve` (not at import: the protocol's classes cost a cold
start milliseconds before the artifact prefetch has begun).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from floodway.errors import ProtocolError
from floodway.runtime.protocol import (
    DROPPED_CANCELLED,
    DROPPED_DEADLINE,
    TO_WORKER,
    Batch,
    Cancel,
    ItemError,
    ItemId,
    Ping,
    decode,
)

_END = object()   # the lines ended (the router closed the pipe)


class Inbox:
    """The router's lines -> messages for a batch worker (see the module).

    `lines`, `threaded`: read `lines` (a pipe) on a daemon thread, so that what arrives
    while a batch runs is there when the next one starts. Not threaded, `lines` (a finite
    iterable: a list in tests) is read whole at once, as if it had all arrived. No `lines`:
    they arrive by `feed(line)` and end with `close()` (a test plays the pipe)."""

    def __init__(self, lines: Iterable[bytes] | None = None, *, threaded: bool = False):
        self.cancelled: set[tuple[int, ItemId]] = set()   # (batch id, item id) not started
        self._ahead: deque[Batch | Ping | ProtocolError] = deque()
        self._ended = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        if lines is None:
            return
        if threaded:
            threading.Thread(target=self._pump, args=(lines,), name="floodway-inbox",
                             daemon=True).start()
        else:
            self._pump(lines)

    def feed(self, line: bytes) -> None:
        """A line arrived from the router."""
        self._queue.put(line)

    def close(self) -> None:
        """The router closed the pipe: no line follows."""
        self._queue.put(_END)

    def _pump(self, lines: Iterable[bytes]) -> None:
        try:
            for line in lines:
                self.feed(line)
        finally:
            self.close()

    def _read(self, block: bool) -> Any:
        """The next line, `_END` once they ended, None when none has arrived (not `block`)."""
        if self._ended:
            return _END
        try:
            line = self._queue.get(block)
        except queue.Empty:
            return None
        self._ended = line is _END
        return line

    def _take(self, line: bytes) -> None:
        try:
            msg = decode(line, TO_WORKER)
        except ProtocolError as e:
            self._ahead.append(e)   # the worker fails when it gets there, in order
            return
        if isinstance(msg, Cancel):
            self.cancelled.add((msg.batch_id, msg.item_id))
        else:
            self._ahead.append(msg)

    def next(self) -> Batch | Ping | ProtocolError | None:
        """The next Batch or Ping in arrival order (or the ProtocolError of a malformed
        line), waiting for it; None once the lines ended and every message was taken."""
        while not self._ahead:
            line = self._read(block=True)
            if line is _END:
                return None
            self._take(line)
        return self._ahead.popleft()

    def catch_up(self) -> None:
        """Take every line that has arrived, without waiting (Cancels noted)."""
        while (line := self._read(block=False)) is not None and line is not _END:
            self._take(line)

    def start(self, batch: Batch, now: float) -> tuple[list[tuple[ItemId, Any]], list[Any]]:
        """`batch` starts at `now` (`time.monotonic()` seconds) -> (the (item_id, input)
        pairs to run, in order; the ItemErrors of the items skipped: cancelled, else past
        their deadline). Cancels for this batch and earlier ones are forgotten: batch ids
        grow and batches run in order, so none of them can start again."""
        run, skipped = [], []
        for i, (item_id, x) in enumerate(batch.items):
            if (batch.id, item_id) in self.cancelled:
                skipped.append(ItemError(batch.id, item_id, DROPPED_CANCELLED))
            elif batch.deadlines is not None and batch.deadlines[i] <= now:
                skipped.append(ItemError(batch.id, item_id, DROPPED_DEADLINE))
            else:
                run.append((item_id, x))
        self.cancelled = {k for k in self.cancelled if k[0] > batch.id}
        return run, skipped


__all__ = ["Inbox"]
