"""The job store's own thread: every call the router makes on its `JobStore` runs there, in
the order made, so the event loop never waits on SQLite.

A store call is one short transaction, but it holds the store's lock, and a commit that
triggers the WAL's automatic checkpoint writes and syncs the database file: tens of
milliseconds on a busy disk. On the loop, such a call (or one that waits for the lock while
another thread commits) holds up every request's timers and answers with it. One thread,
not a pool: the calls are serialized by the store's lock anyway, and one thread keeps
them in order (a job's start is recorded before its completion).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class StoreThread:
    """Runs calls on one thread of its own, first made first run. `__call__` submits at
    once (before the caller awaits), so calls made in order run in order."""

    def __init__(self, name: str = "floodway-jobs"):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)

    def __call__(self, fn: Callable[..., T], *args: Any, **kw: Any) -> asyncio.Future[T]:
        """`fn(*args, **kw)` on the thread, as a future of the running loop (raises what
        `fn` raised)."""
        return asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(fn, *args, **kw))

    def close(self) -> None:
        """Wait for the calls made so far, then end the thread."""
        self._pool.shutdown(wait=True)


def inline(fn: Callable[..., T], *args: Any, **kw: Any) -> asyncio.Future[T]:
    """A `StoreThread` stand-in that runs `fn` on the caller's thread (the event loop):
    for a store no other thread uses, in tests that step a fake clock."""
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    try:
        done.set_result(fn(*args, **kw))
    except Exception as e:
        done.set_exception(e)
    return done


__all__ = ["StoreThread", "inline"]
