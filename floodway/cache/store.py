"""One endpoint's cached outputs in the router's memory: least recently used first out when
over a byte budget, each entry kept at most a time to live.

    store = LruStore(max_bytes=64 << 20, ttl_s=3600)
    store.put(key, value, now_s) -> bool      (False: larger than the whole budget)
    store.get(key, now_s) -> bytes | None     (None: absent or expired; a hit moves it last)
    store.stats -> CacheStats                 (hits, misses, bytes, entries, evictions)

Keys and values are bytes (a digest and an encoded output), so an entry's cost is known
exactly: its key, its value and `ENTRY_OVERHEAD_B` for the bookkeeping. Times are seconds on
whatever monotonic clock the caller passes. Not thread-safe: the router calls it from its
event loop only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# What an entry costs beyond its key and value bytes: the OrderedDict's slot and links, the
# entry tuple and the two bytes objects' headers (about 100 bytes each in CPython 3.11,
# measured with sys.getsizeof), rounded up.
ENTRY_OVERHEAD_B = 256


@dataclass
class CacheStats:
    """Counters of one store since it was made: `hits` and `misses` (lookups), `bytes` and
    `entries` held now, `evicted` (pushed out by the byte budget) and `expired` (found or
    pushed out past their time to live)."""

    hits: int = 0
    misses: int = 0
    bytes: int = 0
    entries: int = 0
    evicted: int = 0
    expired: int = 0


class LruStore:
    """At most `max_bytes` bytes of entries (`ENTRY_OVERHEAD_B` counted per entry), each
    served for `ttl_s` seconds after its put."""

    def __init__(self, *, max_bytes: int, ttl_s: float):
        if max_bytes <= 0 or ttl_s <= 0:
            raise ValueError(f"max_bytes ({max_bytes}) and ttl_s ({ttl_s}) must be > 0")
        self.max_bytes, self.ttl_s = max_bytes, ttl_s
        # key -> (value, stored at); oldest use first.
        self._entries: OrderedDict[bytes, tuple[bytes, float]] = OrderedDict()
        self.stats = CacheStats()

    @staticmethod
    def cost(key: bytes, value: bytes) -> int:
        """Bytes an entry counts against the budget."""
        return len(key) + len(value) + ENTRY_OVERHEAD_B

    def get(self, key: bytes, now_s: float) -> bytes | None:
        """The value stored under `key` if it is younger than `ttl_s` at `now_s` (it becomes
        the most recently used), else None; counted as a hit or a miss."""
        found = self._entries.get(key)
        if found is not None and now_s - found[1] > self.ttl_s:
            self._drop(key)
            self.stats.expired += 1
            found = None
        if found is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return found[0]

    def put(self, key: bytes, value: bytes, now_s: float) -> bool:
        """Store `value` under `key` as of `now_s` (replacing an older one), then drop the
        least recently used entries until the budget holds. False, and nothing stored, for
        an entry larger than the whole budget."""
        cost = self.cost(key, value)
        if cost > self.max_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (value, now_s)
        self.stats.bytes += cost
        self.stats.entries += 1
        while self.stats.bytes > self.max_bytes:
            oldest, (_, stored_s) = next(iter(self._entries.items()))
            self._drop(oldest)
            if now_s - stored_s > self.ttl_s:
                self.stats.expired += 1
            else:
                self.stats.evicted += 1
        return True

    def _drop(self, key: bytes) -> None:
        value, _ = self._entries.pop(key)
        self.stats.bytes -= self.cost(key, value)
        self.stats.entries -= 1

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries


__all__ = ["ENTRY_OVERHEAD_B", "CacheStats", "LruStore"]
