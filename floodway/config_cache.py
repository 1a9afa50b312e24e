"""The response cache's configuration (`Cache`), re-exported by `floodway.config`."""

from __future__ import annotations

from dataclasses import dataclass

from floodway.checks import Config as _Config
from floodway.checks import check_bool, check_int, check_num
from floodway.errors import Problem

MAX_CACHE_BYTES = 1 << 40
MAX_CACHE_TTL_S = 30 * 86400
# modal.Dict holds values of up to 100 MiB (https://modal.com/docs/reference/modal.Dict);
# a cached output is far smaller, and a large one costs more to fetch than a model may.
MAX_SHARED_ITEM_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Cache(_Config):
    """The response cache of an endpoint (`floodway.cache`): exact match per item, keyed
    by the endpoint, the key of the build serving it and the item's canonical JSON bytes.

    The router keeps at most `max_bytes` bytes of outputs (and their keys) per endpoint,
    least recently used first out, each for at most `ttl_s` seconds after it was stored.
    `shared`: on Modal, also a `modal.Dict` shared by every router container (keys hashed,
    values of at most `shared_max_item_bytes` bytes, entries older than `ttl_s` ignored);
    locally it has no effect. With API keys configured, each tenant (API key) has entries
    of its own, in both tiers: a hit, or how fast it came, would otherwise tell one tenant
    what another asked. `shared_across_tenants`: every tenant reads and writes the same
    entries, for an endpoint whose inputs are no secret (public text, a fixed catalogue);
    off by default. Passed as ``@app.endpoint(cache=fw.Cache(...))``, or
    ``cache=False`` for an endpoint whose outputs are not a function of its input (it
    samples); on by default except on streaming endpoints.
    """

    max_bytes: int = 64 * 1024 * 1024
    ttl_s: float = 3600.0
    shared: bool = False
    shared_max_item_bytes: int = 256 * 1024
    shared_across_tenants: bool = False

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.max_bytes", self.max_bytes, 1024, MAX_CACHE_BYTES)
        check_num(out, f"{p}.ttl_s", self.ttl_s, 0, MAX_CACHE_TTL_S, lo_open=True)
        check_bool(out, f"{p}.shared", self.shared)
        check_bool(out, f"{p}.shared_across_tenants", self.shared_across_tenants)
        check_int(out, f"{p}.shared_max_item_bytes", self.shared_max_item_bytes, 1,
                  MAX_SHARED_ITEM_BYTES)


__all__ = ["MAX_CACHE_BYTES", "MAX_CACHE_TTL_S", "MAX_SHARED_ITEM_BYTES", "Cache"]
