"""Traffic history on Modal: the routers' per-minute user arrivals, for the warmers.

    recorder = ArrivalRecorder(app_name, kv)       # the router's `on_arrival` hook
    histories, stale = scan_traffic(store, app_name, endpoints, now_s)   # the warmers

Each router container counts user arrivals per unit (an endpoint, or the lane of one a
request took: ``"embed:short"``, `floodway.routers.lanes.unit_of`; each lane's warm pool is
its own class's) and minute in memory and writes its own key of the ``floodway-traffic``
`modal.Dict`, ``("arrivals", app, unit, router_id)``
-> ``{epoch minute: count}`` (its last `HISTORY_MINUTES` minutes), at most once per
`FLUSH_S` and only after new arrivals. One writer per key: routers never race, and a rewrite
of the current minute replaces its earlier count, never adds to it (no double count).
Readers (`scan_traffic`) sum every router's key for the endpoint; ``warm_tick`` deletes keys
whose newest minute is older than `HISTORY_MINUTES` (routers that went away). Warm-up
inferences and probes never pass through the hook (it is called for ``POST /v1/<endpoint>``
and ``/jobs`` only, after admission).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from floodway.core.clock import SYSTEM_CLOCK, Clock
from floodway.modal.kv import Store
from floodway.warmers.target import History, minute_of

log = logging.getLogger(__name__)

TRAFFIC_DICT = "floodway-traffic"
# Minutes of history kept per router key and read by the warmers: one day, which covers the
# predictive policy's 4-hour idle-time histogram range several times over.
HISTORY_MINUTES = 1440
# Seconds between a router's writes of its counts (and the most an arrival waits to be seen).
FLUSH_S = 30.0


def _arrivals_key(key: Any, app: str) -> str | None:
    """The endpoint of an arrivals key of `app`, else None."""
    if isinstance(key, tuple) and len(key) == 4 and key[0] == "arrivals" and key[1] == app:
        return key[2]
    return None


def scan_traffic(traffic: Store, app: str, endpoints: Sequence[str], now_s: float,
                 minutes: int = HISTORY_MINUTES) -> tuple[dict[str, History], list[Any]]:
    """One pass over the traffic Dict: each of `endpoints` -> its `History` of the last
    `minutes` minutes ending with the minute of `now_s` (every router's counts summed), and
    the keys of `app` whose newest minute is older than that (routers gone for a day)."""
    end = minute_of(now_s)
    start = end - minutes + 1
    counts = {name: np.zeros(minutes, dtype=np.int64) for name in endpoints}
    stale: list[Any] = []
    for key, value in traffic.items():
        ep = _arrivals_key(key, app)
        if ep is None:
            continue
        if not value or max(value) < start:
            stale.append(key)
        if ep in counts:
            for m, c in value.items():
                if start <= m <= end:
                    counts[ep][m - start] += c
    return {name: History(start, arr) for name, arr in counts.items()}, stale


class ArrivalRecorder:
    """Per-minute user arrivals of one router container, written to the traffic Dict.

    `record(endpoint, now_s)` is the router's ``on_arrival`` hook: an in-memory add that, if no
    write is pending, schedules one `flush_s` later on the running event loop (none running:
    nothing is scheduled; call `flush`). `kv`: an async `KV` (``ModalDictKV(TRAFFIC_DICT)``
    on Modal, `MemoryKV` in tests). `router_id`: this container's key part (default: random).
    `clock`: what the write timer sleeps on.
    Never raises: a failed write is logged and retried with the next one.
    """

    def __init__(self, app_name: str, kv: Any, *, router_id: str | None = None,
                 flush_s: float = FLUSH_S, minutes: int = HISTORY_MINUTES,
                 clock: Clock = SYSTEM_CLOCK):
        self.app_name, self.kv, self.flush_s, self.minutes = app_name, kv, flush_s, minutes
        self.clock = clock
        self.router_id = router_id or uuid.uuid4().hex[:12]
        self._counts: dict[str, dict[int, int]] = {}
        self._dirty: set[str] = set()
        self._timer: asyncio.Task | None = None
        self.writes = 0

    def key(self, endpoint: str) -> tuple[str, str, str, str]:
        return ("arrivals", self.app_name, endpoint, self.router_id)

    def counts(self, endpoint: str) -> dict[int, int]:
        """This router's counts of `endpoint`: epoch minute -> arrivals (a copy)."""
        return dict(self._counts.get(endpoint, {}))

    def record(self, endpoint: str, now_s: float) -> None:
        counts = self._counts.setdefault(endpoint, {})
        m = minute_of(now_s)
        counts[m] = counts.get(m, 0) + 1
        self._dirty.add(endpoint)
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None and not self._timer.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        try:
            await self.clock.sleep(self.flush_s)
            await self.flush()
        except asyncio.CancelledError:
            self._timer = None          # shutting down: a new timer would never be awaited
            raise
        self._timer = None
        if self._dirty:                 # arrivals during the write, or a failed write
            self._schedule()

    async def flush(self) -> int:
        """Write the counts of every endpoint with new arrivals (its minutes older than
        `minutes` before its newest are dropped first); returns the keys written."""
        dirty, self._dirty = self._dirty, set()
        written = 0
        for ep in sorted(dirty):
            counts = self._counts[ep]
            cut = max(counts) - self.minutes
            for m in [m for m in counts if m <= cut]:
                del counts[m]
            try:
                await self.kv.put(self.key(ep), dict(counts))
                written += 1
            except Exception as e:  # noqa: BLE001 - history is advisory; retry later
                self._dirty.add(ep)
                log.warning("could not write the arrivals of %s: %s: %s", ep,
                            type(e).__name__, e)
        self.writes += written
        return written


__all__ = ["FLUSH_S", "HISTORY_MINUTES", "TRAFFIC_DICT", "ArrivalRecorder", "scan_traffic"]
