"""The shared tier of the response cache: a key-value store that every router container
reads and writes (on Modal a `modal.Dict`; any object with the async ``get`` / ``put`` of
`floodway.modal.kv.KV`).

    tier = SharedTier(kv, wall=time.time, timeout_s=0.1)
    await tier.get_many(keys, ttl_s) -> {index: value bytes}    (misses absent)
    tier.put(key, value, max_item_bytes=...)                    (in the background)

Keys are the local tier's digests as hex text (`floodway.cache.keys.item_key`, with the
tenant in it where the local tier has it): no item content leaves the router, every key has
the same small size, and no tenant finds another's entries here either. A value is stored as
``[unix seconds stored, value bytes]`` and ignored once older than the endpoint's `ttl_s`
(the Dict keeps entries 7 days after their last use, so the age is checked here); values
over `max_item_bytes` are not shared. The tier is an optimisation: a lookup that fails or
takes longer than `timeout_s` counts as misses, and a failed write is logged and dropped,
so a slow or broken store never costs a request more than `timeout_s`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("floodway.cache")

# A Dict lookup inside Modal's network takes milliseconds; a tier slower than this is
# skipped rather than spending the request's deadline on it.
SHARED_TIMEOUT_S = 0.1


class SharedKV(Protocol):
    """The async slice of `modal.Dict` the tier uses (`floodway.modal.kv.KV`)."""

    async def get(self, key: Any, default: Any = None) -> Any: ...

    async def put(self, key: Any, value: Any, *, skip_if_exists: bool = False) -> bool: ...


class SharedTier:
    """Reads and writes cached outputs in `kv` (see the module doc). `wall()`: unix seconds,
    the clock every router shares; `timeout_s`: the most one lookup may take."""

    def __init__(self, kv: SharedKV, *, wall: Callable[[], float],
                 timeout_s: float = SHARED_TIMEOUT_S):
        self.kv, self.wall, self.timeout_s = kv, wall, timeout_s
        self.hits = self.misses = self.errors = 0
        self._writes: set[asyncio.Task] = set()

    async def get_many(self, keys: dict[int, bytes], ttl_s: float) -> dict[int, bytes]:
        """The values found under `keys` (index -> key digest), younger than `ttl_s`, by
        index. Everything missing, expired, malformed, failed or late is left out."""
        if not keys:
            return {}
        order = list(keys)
        try:
            found = await asyncio.wait_for(asyncio.gather(
                *(self.kv.get(keys[i].hex()) for i in order), return_exceptions=True),
                self.timeout_s)
        except TimeoutError:
            self.errors += 1
            self.misses += len(order)
            log.warning("shared cache: no answer within %.3g s; %d items looked up locally "
                        "only", self.timeout_s, len(order))
            return {}
        now, out = self.wall(), {}
        for i, got in zip(order, found, strict=True):
            value = self._fresh(got, now, ttl_s)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
                out[i] = value
        return out

    def _fresh(self, got: Any, now: float, ttl_s: float) -> bytes | None:
        if isinstance(got, BaseException):
            self.errors += 1
            log.warning("shared cache lookup failed: %s: %s", type(got).__name__, got)
            return None
        ok = isinstance(got, (list, tuple)) and len(got) == 2 \
            and isinstance(got[0], (int, float)) and isinstance(got[1], bytes)
        if not ok or now - got[0] > ttl_s:
            return None
        return got[1]

    def put(self, key: bytes, value: bytes, *, max_item_bytes: int) -> bool:
        """Write `value` under `key` in the background (the request does not wait); False
        when it is over `max_item_bytes` and not shared. Needs a running event loop."""
        if len(value) > max_item_bytes:
            return False
        task = asyncio.get_running_loop().create_task(self._write(key.hex(), value))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return True

    async def _write(self, key: str, value: bytes) -> None:
        try:
            await self.kv.put(key, [self.wall(), value])
        except Exception as e:  # noqa: BLE001 - a cache write must never fail a request
            self.errors += 1
            log.warning("shared cache write failed: %s: %s", type(e).__name__, e)

    async def drain(self) -> None:
        """Wait for the writes under way (tests, shutdown)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)


__all__ = ["SHARED_TIMEOUT_S", "SharedKV", "SharedTier"]
