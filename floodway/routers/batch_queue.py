"""The batcher's live queue counts, which the decision snapshot reads: rows, requests and
estimated tokens queued by priority, requests per tenant, and the padded tokens of each
container's batches in flight (`QueueCounts`, a base of `floodway.routers.batcher.Batcher`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from floodway.core.snapshot import QueueLoad
from floodway.routers.batch_item import Item
from floodway.routers.decide import by_priority


def prio(item: Item) -> int:
    """An item's priority: 0 low .. 2 high."""
    return max(0, min(2, -item.sort_key[0]))


class QueueCounts:
    """Counts of the queued items (those with `queued` set) and of the batches in flight.

    `queued_rows`; `rows_by_priority`, `requests_by_priority`, `tokens_by_priority` (low,
    normal, high; tokens: each item's estimated `length`); requests per request id and per
    tenant; `counts_tokens`: whether the tokens are estimates worth reporting (`load`)."""

    def __init__(self, counts_tokens: bool = False):
        self.counts_tokens = counts_tokens
        self.queued_rows = 0
        self.rows_by_priority = [0, 0, 0]   # low, normal, high
        self.requests_by_priority = [0, 0, 0]
        self.tokens_by_priority = [0, 0, 0]
        self._request_priority: dict[str, int] = {}
        self._per_request: Counter[str] = Counter()
        self._per_tenant: Counter[str] = Counter()
        self._sent_tokens: dict[Any, list[int]] = {}   # slot id -> padded tokens in flight

    @property
    def queued(self) -> int:
        """Requests with at least one item still waiting."""
        return len(self._per_request)

    def waiting(self, request_id: str) -> int:
        """How many of the request's inputs are still queued (not yet sent to a container)."""
        return self._per_request.get(request_id, 0)

    def tenant_queued(self) -> dict[str, int]:
        return dict(self._per_tenant)

    def load(self) -> QueueLoad:
        """The queue as the snapshot builder reads it: rows and requests by priority,
        requests per tenant, and tokens by priority (None unless `counts_tokens`)."""
        return QueueLoad(by_priority(self.rows_by_priority),
                         by_priority(self.requests_by_priority), dict(self._per_tenant),
                         by_priority(self.tokens_by_priority) if self.counts_tokens else None)

    def inflight_tokens(self, slot_id: Any) -> tuple[int, ...]:
        """Padded tokens of each batch in flight on the container `slot_id`."""
        return tuple(self._sent_tokens.get(slot_id, ()))

    def _counted_request(self, request_id: str, tenant: str, priority: int, rows: int) -> None:
        """A new request of `rows` inputs (their items are counted by `_counted`)."""
        self._per_request[request_id] += rows
        self._request_priority[request_id] = priority
        self.requests_by_priority[priority] += 1
        self._per_tenant[tenant] += 1

    def _counted(self, item: Item) -> None:
        """`item` (its request counted) queued."""
        item.queued = True
        self.queued_rows += 1
        self.rows_by_priority[prio(item)] += 1
        self.tokens_by_priority[prio(item)] += item.length

    def _recounted(self, item: Item) -> None:
        """`item` queued again (its batch went back to the queue)."""
        self._counted(item)
        self._per_request[item.request] += 1
        if self._per_request[item.request] == 1:
            self._per_tenant[item.tenant] += 1
            self._request_priority[item.request] = prio(item)
            self.requests_by_priority[prio(item)] += 1

    def _uncounted(self, item: Item) -> bool:
        """`item` left the queue: False when it was not queued."""
        if not item.queued:
            return False
        item.queued = False
        self.queued_rows -= 1
        self.rows_by_priority[prio(item)] -= 1
        self.tokens_by_priority[prio(item)] -= item.length
        self._per_request[item.request] -= 1
        if self._per_request[item.request] <= 0:
            del self._per_request[item.request]
            self.requests_by_priority[self._request_priority.pop(item.request, 1)] -= 1
            self._per_tenant[item.tenant] -= 1
            if self._per_tenant[item.tenant] <= 0:
                del self._per_tenant[item.tenant]
        return True

    def _sent(self, slot_id: Any, tokens: int) -> None:
        self._sent_tokens.setdefault(slot_id, []).append(tokens)

    def _landed(self, slot_id: Any, tokens: int) -> None:
        """A batch of `tokens` padded tokens left `slot_id` (answered or lost)."""
        sent = self._sent_tokens.get(slot_id, [])
        if tokens in sent:
            sent.remove(tokens)
        if not sent:
            self._sent_tokens.pop(slot_id, None)


__all__ = ["QueueCounts", "prio"]
