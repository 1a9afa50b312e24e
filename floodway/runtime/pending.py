"""The work of one request in the local pool: what `Pool.enqueue` returns
(`floodway.http.protocols.Pending`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Pending:
    """Await it for the results (at most its timeout: then its inputs are withdrawn).
    `dispatched()` is True once any input has left the router's queue for a container.
    `adopt()` keeps the inputs past that timeout: a task with one result (output or
    exception) per input, for a job that takes the request over.

    `futures`: one per input (the batcher's); `wait(pending)`: the coroutine that the await
    runs (`wait_results`), given this object so that it can tell whether it was adopted;
    made when awaited, so that a Pending dropped unawaited leaves no coroutine behind.
    `keep()`: called on adoption to lift the client's deadline from the inputs still queued
    (`Batcher.extend`)."""

    def __init__(self, futures: list[asyncio.Future], dispatched: Callable[[], bool],
                 wait: Callable[[Pending], Awaitable[list[Any]]],
                 keep: Callable[[], object] | None = None):
        self.futures, self.dispatched, self.adopted = futures, dispatched, False
        self._wait, self._keep = wait, keep

    def __await__(self):
        return self._wait(self).__await__()

    def adopt(self) -> asyncio.Task:
        self.adopted = True
        if self._keep is not None:
            # Inputs still queued must not be dropped at the client's deadline: the job
            # would then run them again (at least once, but not twice).
            self._keep()

        async def results() -> list[Any]:
            await asyncio.wait(self.futures)
            return [f.exception() or f.result() for f in self.futures]
        return asyncio.ensure_future(results())


async def wait_results(endpoint: str, futures: list[asyncio.Future], timeout_s: float,
                       owner: Pending | None = None) -> list[Any]:
    """One entry per future: its output, or the exception that failed that input alone.

    Raises TimeoutError when `timeout_s` passes first (or an input's deadline passed while it
    was queued). Unless `owner` was adopted meanwhile, the inputs still queued are withdrawn
    on the way out (also when the await is cancelled)."""
    try:
        done, pending = await asyncio.wait(futures, timeout=timeout_s)
    finally:
        if owner is None or not owner.adopted:
            for f in futures:
                f.cancel()   # no-op for finished ones; withdraws queued ones
    if pending or any(isinstance(f.exception(), TimeoutError) for f in futures):
        raise TimeoutError(f"endpoint {endpoint!r} missed the deadline of {timeout_s:g}s")
    return [f.exception() or f.result() for f in futures]


__all__ = ["Pending", "wait_results"]
