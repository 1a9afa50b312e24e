"""The response cache of a router: per endpoint, which of a request's items are already
answered, and the outputs of the rest once they are.

    cache = ResponseCache(app, build_key, monotonic=..., wall=..., shared=None)
    found = await cache.lookup(endpoint, inputs, read=True, write=True,
                               tenant=None)    # a Lookup
    found.run                 the items still to run (their indices: found.run_indices)
    outputs = found.merge(results_of_run)      # one per input, in the request's order
    cache.store(found, results_of_run)         # successful outputs only

An endpoint caches when its `Endpoint.cache` is set (`floodway.config.Cache`: on by default
except for streaming endpoints) and `build_key(endpoint)` names the one build serving it
now: with no build known, or two serving at once (a rollout), nothing is read or stored, so
an output is only ever found under the build that made it. The key of each item is
`floodway.cache.keys.item_key`, scoped by the caller's `tenant` when one is given (the
router gives it when API keys are configured) unless the endpoint has
``Cache(shared_across_tenants=True)``: otherwise a tenant would learn from a hit, or from
how fast it came, what another tenant asked. An item repeated within one request runs
once. Outputs are kept encoded (`floodway.codec`): their size is exact, and a cached output
can never be changed through a reference a caller kept.

Tiers: the router's own memory (`LruStore`, `Cache.max_bytes` and `Cache.ttl_s` per
endpoint), then, for endpoints with ``Cache(shared=True)`` and a `shared` store given, the
shared tier (`floodway.cache.shared.SharedTier`); an item found there is kept locally too.
Outputs are stored in both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from floodway.cache.keys import item_key
from floodway.cache.shared import SHARED_TIMEOUT_S, SharedKV, SharedTier
from floodway.cache.store import LruStore
from floodway.codec import dumps, loads
from floodway.functions.app import App


@dataclass
class Lookup:
    """What the cache knew of one request's items. `build`: the build key the items were
    looked up under (None: the cache was not used); `keys`: each item's key (None: not
    cacheable); `found`: index -> output of the items answered from the cache; `write`:
    whether the outputs of the rest may be stored. `run_indices`: the items still to run,
    each distinct key once, in order; `same`: index -> the index in `run_indices` whose
    output it shares (a repeat within the request)."""

    endpoint: str
    inputs: list[Any]
    build: str | None = None
    keys: list[bytes | None] = field(default_factory=list)
    found: dict[int, Any] = field(default_factory=dict)
    write: bool = False
    run_indices: list[int] = field(default_factory=list)
    same: dict[int, int] = field(default_factory=dict)

    @property
    def hits(self) -> int:
        """Items answered from the cache."""
        return len(self.found)

    @property
    def complete(self) -> bool:
        """True when no item is left to run."""
        return not self.run_indices

    @property
    def run(self) -> list[Any]:
        """The items still to run, in request order."""
        return [self.inputs[i] for i in self.run_indices]

    def merge(self, results: list[Any]) -> list[Any]:
        """One entry per input: the cached output, else the result of its run (`results`:
        one per `run`, output or exception). A wrong count is passed through unmerged: the
        caller's check of outputs against inputs then names it."""
        if len(results) != len(self.run_indices):
            return results
        if not self.found and not self.same:
            return results
        ran = dict(zip(self.run_indices, results, strict=True))
        return [self.found[i] if i in self.found else
                ran[i] if i in ran else ran[self.run_indices[self.same[i]]]
                for i in range(len(self.inputs))]


def _plan(look: Lookup) -> Lookup:
    """Fill `run_indices` and `same`: what is not found runs, each distinct key once."""
    first: dict[bytes, int] = {}
    for i, key in enumerate(look.keys or [None] * len(look.inputs)):
        if i in look.found:
            continue
        if key is not None and key in first:
            look.same[i] = first[key]
            continue
        if key is not None:
            first[key] = len(look.run_indices)
        look.run_indices.append(i)
    return look


class ResponseCache:
    """The cache of every endpoint of `app` that has one (see the module doc).
    `build_key(endpoint)`: the build serving it now, None when unknown or several;
    `monotonic()`: the local tier's clock; `wall()`: unix seconds, the shared tier's;
    `shared`: the store every router shares (None: memory only)."""

    def __init__(self, app: App, build_key: Callable[[str], str | None], *,
                 monotonic: Callable[[], float], wall: Callable[[], float],
                 shared: SharedKV | None = None, shared_timeout_s: float = SHARED_TIMEOUT_S):
        self.app, self.build_key, self.monotonic = app, build_key, monotonic
        self.configs = {ep.name: ep.cache for ep in app if ep.cache is not None}
        self.stores = {name: LruStore(max_bytes=c.max_bytes, ttl_s=c.ttl_s)
                       for name, c in self.configs.items()}
        self.shared = None if shared is None or not any(
            c.shared for c in self.configs.values()) else SharedTier(
                shared, wall=wall, timeout_s=shared_timeout_s)
        self.counts: dict[str, Counter[str]] = {name: Counter() for name in self.configs}

    def caches(self, endpoint: str) -> bool:
        """Whether `endpoint` has a response cache at all."""
        return endpoint in self.configs

    async def lookup(self, endpoint: str, inputs: list[Any], *, read: bool = True,
                     write: bool = True, tenant: str | None = None) -> Lookup:
        """The items of a request to `endpoint` answered from the cache (`read`: look them
        up; False for ``Cache-Control: no-cache``), and what still runs. `write`: whether
        the outputs of what runs may be stored (False for ``no-store``). `tenant`: the
        caller, whose own entries only are read and written (None, or an endpoint with
        ``Cache(shared_across_tenants=True)``: every caller's)."""
        look = Lookup(endpoint, inputs)
        build = self.build_key(endpoint) if endpoint in self.configs else None
        if build is None:
            return _plan(look)
        look.build, look.write = build, write
        cfg = self.configs[endpoint]
        scope = None if cfg.shared_across_tenants else tenant
        look.keys = [_key(endpoint, build, x, scope) for x in inputs]
        counts = self.counts[endpoint]
        if not read:
            counts["bypassed"] += len(inputs)
            return _plan(look)
        store, now = self.stores[endpoint], self.monotonic()
        missing: dict[int, bytes] = {}
        for i, key in enumerate(look.keys):
            value = store.get(key, now) if key is not None else None
            if value is not None:
                look.found[i] = loads(value)
            elif key is not None:
                missing[i] = key
        if missing and cfg.shared and self.shared is not None:
            for i, value in (await self.shared.get_many(missing, cfg.ttl_s)).items():
                look.found[i] = loads(value)
                store.put(missing[i], value, self.monotonic())
                counts["shared_hits"] += 1
        counts["hits"] += look.hits
        counts["misses"] += len(inputs) - look.hits
        return _plan(look)

    def store(self, look: Lookup, results: list[Any]) -> int:
        """Keep the successful outputs among `results` (one per `look.run`) -> how many were
        stored. Nothing when the lookup may not write, or when the build serving the
        endpoint changed since the lookup (the outputs may be either build's)."""
        if look.build is None or not look.write or len(results) != len(look.run_indices):
            return 0
        if self.build_key(look.endpoint) != look.build:
            return 0
        store, now = self.stores[look.endpoint], self.monotonic()
        cfg = self.configs[look.endpoint]
        stored = 0
        for i, result in zip(look.run_indices, results, strict=True):
            key = look.keys[i]
            if key is None or isinstance(result, BaseException):
                continue
            try:
                value = dumps(result)
            except (TypeError, ValueError):
                continue   # not JSON: it could not be answered either
            if store.put(key, value, now):
                stored += 1
            if cfg.shared and self.shared is not None:
                self.shared.put(key, value, max_item_bytes=cfg.shared_max_item_bytes)
        return stored

    def stats(self) -> dict[str, dict[str, int]]:
        """Per endpoint with a cache: ``hits`` (items answered from it, either tier),
        ``misses`` (items looked up and not found), ``bypassed`` (items not looked up:
        ``no-cache``), ``shared_hits``, and of the local tier ``bytes``, ``entries``,
        ``evicted`` (by the byte budget), ``expired`` (past the time to live)."""
        out = {}
        for name, store in self.stores.items():
            s, c = store.stats, self.counts[name]
            out[name] = {"hits": c["hits"], "misses": c["misses"], "bypassed": c["bypassed"],
                         "shared_hits": c["shared_hits"], "bytes": s.bytes,
                         "entries": s.entries, "evicted": s.evicted, "expired": s.expired}
        return out


def _key(endpoint: str, build: str, item: Any, tenant: str | None) -> bytes | None:
    try:
        return item_key(endpoint, build, item, tenant)
    except (TypeError, ValueError):
        return None   # not JSON (a backend's own item type): runs uncached


__all__ = ["Lookup", "ResponseCache"]
