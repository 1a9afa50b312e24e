"""The local pool's side of the job queue (`floodway.jobs.feed.JobCapacity`): whom to wake
when job room may have grown, and the job backlog the warm-pool policy counts as demand.

The pool calls `wake()` whenever a batch is sent or ends and whenever a container changes
state (ready, gone): the job queue then claims jobs for the room freed and decides its
waiting jobs again at once, not after a poll or a Retry-After. The call as a batch is handed
to a container (the batcher's `on_send`) is also when a job's attempt counts: its rows have
reached a container (`floodway.jobs.feed.JobFeed.check_started`). `refresh()` reads the backlog
(rows of unfinished jobs per endpoint) at each tick; a failed read keeps the last one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("floodway.pool")


class JobLink:
    """What the pool knows of its job queue (nothing until `watch` is called)."""

    def __init__(self) -> None:
        self._backlog: Callable[[], dict[str, int]] | None = None
        self._wake: Callable[[], None] | None = None
        self.rows: dict[str, int] = {}   # the latest backlog: rows per endpoint

    def watch(self, backlog: Callable[[], dict[str, int]], wake: Callable[[], None]) -> None:
        self._backlog, self._wake = backlog, wake

    def wake(self) -> None:
        if self._wake is not None:
            self._wake()

    def refresh(self) -> None:
        """Read the backlog now (a locked store must not stop scaling: logged)."""
        if self._backlog is None:
            return
        try:
            self.rows = dict(self._backlog())
        except Exception:  # noqa: BLE001
            log.exception("reading the job backlog failed; keeping the last one")


__all__ = ["JobLink"]
