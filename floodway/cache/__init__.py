"""The response cache: exact match per item, in the router (see `response`).

    keys.py      item_key(endpoint, build, item): SHA-256 of the three, the item as
                 canonical JSON
    store.py     LruStore: one endpoint's outputs in memory, bounded by bytes (LRU) with a
                 time to live
    shared.py    SharedTier: the optional tier every router shares (a modal.Dict on Modal)
    response.py  ResponseCache: per request, what is cached, what runs, the outputs merged
                 in order and stored

It imports no runtime, http, deploy, sim, jobs, modal or starlette: the HTTP handlers use it
(`floodway.http.cache`), given the backend's build key and a clock.
"""

from floodway.cache.keys import canonical, item_key
from floodway.cache.response import Lookup, ResponseCache
from floodway.cache.shared import SHARED_TIMEOUT_S, SharedKV, SharedTier
from floodway.cache.store import ENTRY_OVERHEAD_B, CacheStats, LruStore

__all__ = ["ENTRY_OVERHEAD_B", "SHARED_TIMEOUT_S", "CacheStats", "Lookup", "LruStore",
           "ResponseCache", "SharedKV", "SharedTier", "canonical", "item_key"]
