"""ResponseCache: which items of a request run, the outputs merged in order, what is kept."""

import asyncio

import floodway as fw
from floodway.cache import ResponseCache
from floodway.errors import EndpointError
from floodway.modal.kv import MemoryKV

app = fw.App("c")


@app.endpoint(cache=fw.Cache(max_bytes=1 << 20, ttl_s=60))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


@app.endpoint(cache=False)
def dice(model, texts: list[str]) -> list[str]:
    return texts


@app.endpoint(cache=fw.Cache(shared=True, ttl_s=60))
def shared(model, texts: list[str]) -> list[str]:
    return texts


@app.endpoint(cache=fw.Cache(shared_across_tenants=True))
def public(model, texts: list[str]) -> list[str]:
    return texts


class Clock:
    def __init__(self):
        self.t = 100.0

    def monotonic(self):
        return self.t

    def wall(self):
        return 1_700_000_000.0 + self.t


def _cache(builds=None, clock=None, shared_kv=None):
    builds = {"upper": "k1", "dice": "k1", "shared": "k1", "public": "k1"} \
        if builds is None else builds
    clock = clock or Clock()
    return ResponseCache(app, builds.get, monotonic=clock.monotonic, wall=clock.wall,
                         shared=shared_kv)


def _run(cache, endpoint, inputs, **kw):
    """One request: lookup, run the rest as the endpoint would, store -> (lookup, outputs,
    the items that ran)."""
    async def go():
        look = await cache.lookup(endpoint, inputs, **kw)
        ran = list(look.run)
        results = app[endpoint](None, ran)
        cache.store(look, results)
        return look, look.merge(results), ran
    return asyncio.run(go())


def test_ten_items_with_seven_cached_run_three_and_answer_in_order():
    cache = _cache()
    seven = [f"t{i}" for i in range(7)]
    _run(cache, "upper", seven)
    inputs = ["n0", "t0", "t1", "n1", "t2", "t3", "t4", "n2", "t5", "t6"]
    look, outputs, ran = _run(cache, "upper", inputs)
    assert ran == ["n0", "n1", "n2"] and look.hits == 7
    assert outputs == [x.upper() for x in inputs]
    assert cache.stats()["upper"]["hits"] == 7 and cache.stats()["upper"]["misses"] == 7 + 3


def test_a_new_build_never_finds_the_old_builds_outputs():
    builds = {"upper": "k1"}
    cache = _cache(builds)
    _run(cache, "upper", ["a"])
    builds["upper"] = "k2"
    look, _, ran = _run(cache, "upper", ["a"])
    assert ran == ["a"] and look.hits == 0 and look.build == "k2"


def test_nothing_is_read_or_kept_without_one_serving_build():
    builds = {"upper": None}
    cache = _cache(builds)
    look, _, ran = _run(cache, "upper", ["a"])
    assert look.build is None and ran == ["a"]
    builds["upper"] = "k1"
    assert _run(cache, "upper", ["a"])[2] == ["a"]     # nothing was stored under no build


def test_outputs_made_while_the_build_changed_are_not_kept():
    builds = {"upper": "k1"}
    cache = _cache(builds)

    async def go():
        look = await cache.lookup("upper", ["a"])
        builds["upper"] = "k2"                 # a rollout began while "a" ran
        return cache.store(look, ["A"])

    assert asyncio.run(go()) == 0 and cache.stats()["upper"]["entries"] == 0


def test_only_successful_outputs_are_kept():
    cache = _cache()

    async def go():
        look = await cache.lookup("upper", ["ok", "bad"])
        return cache.store(look, ["OK", EndpointError("boom")])

    assert asyncio.run(go()) == 1
    assert _run(cache, "upper", ["ok", "bad"])[2] == ["bad"]


def test_no_cache_skips_the_lookup_and_no_store_keeps_the_answer_out():
    cache = _cache()
    _run(cache, "upper", ["a"])
    look, _, ran = _run(cache, "upper", ["a"], read=False)
    assert ran == ["a"] and cache.stats()["upper"]["bypassed"] == 1
    _run(cache, "upper", ["b"], write=False)
    look, _, ran = _run(cache, "upper", ["b"], write=False)
    assert ran == ["b"]                      # still not stored, but looked up
    assert _run(cache, "upper", ["a"])[2] == []


def test_an_item_repeated_in_a_request_runs_once():
    cache = _cache()
    look, outputs, ran = _run(cache, "upper", ["a", "b", "a", "a"])
    assert ran == ["a", "b"] and outputs == ["A", "B", "A", "A"]


def test_an_endpoint_switched_off_never_caches():
    cache = _cache()
    _run(cache, "dice", ["a"])
    assert _run(cache, "dice", ["a"])[2] == ["a"] and "dice" not in cache.stats()


def test_a_cached_output_cannot_be_changed_through_a_returned_reference():
    cache = _cache()

    async def go():
        look = await cache.lookup("upper", ["a"])
        vector = [1.0, 2.0]
        cache.store(look, [vector])
        vector.append(3.0)                               # the caller's own output
        (await cache.lookup("upper", ["a"])).merge([])[0].append(4.0)   # a hit's
        return (await cache.lookup("upper", ["a"])).merge([])

    assert asyncio.run(go()) == [[1.0, 2.0]]


def test_entries_expire_after_ttl_s():
    clock = Clock()
    cache = _cache(clock=clock)
    _run(cache, "upper", ["a"])
    clock.t += 61
    assert _run(cache, "upper", ["a"])[2] == ["a"]
    assert cache.stats()["upper"]["expired"] == 1


def test_a_second_router_finds_what_the_first_stored_in_the_shared_tier():
    data: dict = {}
    first, second = _cache(shared_kv=MemoryKV(data)), _cache(shared_kv=MemoryKV(data))

    async def go():
        look = await first.lookup("shared", ["a", "b"])
        first.store(look, ["a!", "b!"])
        await first.shared.drain()
        look = await second.lookup("shared", ["a", "c"])
        return look

    look = asyncio.run(go())
    assert look.found == {0: "a!"} and look.run == ["c"]
    assert all(len(k) == 64 and isinstance(v[1], bytes) for k, v in data.items())   # hashed
    assert second.stats()["shared"]["shared_hits"] == 1
    assert second.stats()["shared"]["entries"] == 1       # kept locally too


def test_endpoints_without_shared_never_touch_the_shared_tier():
    data: dict = {}
    cache = _cache(shared_kv=MemoryKV(data))

    async def go():
        look = await cache.lookup("upper", ["a"])
        cache.store(look, ["A"])
        await cache.shared.drain()

    asyncio.run(go())
    assert data == {}


def test_a_tenant_never_finds_what_another_tenant_stored():
    cache = _cache()
    _run(cache, "upper", ["secret"], tenant="key-a")
    look, _, ran = _run(cache, "upper", ["secret"], tenant="key-b")
    assert look.hits == 0 and ran == ["secret"]
    assert _run(cache, "upper", ["secret"], tenant="key-a")[0].hits == 1   # its own, yes
    assert _run(cache, "upper", ["secret"])[0].hits == 0                   # nor unscoped


def test_shared_across_tenants_lets_every_tenant_find_the_entry():
    cache = _cache()
    _run(cache, "public", ["news"], tenant="key-a")
    assert _run(cache, "public", ["news"], tenant="key-b")[0].hits == 1


def test_the_shared_tier_is_scoped_by_tenant_too():
    data: dict = {}
    first, second = _cache(shared_kv=MemoryKV(data)), _cache(shared_kv=MemoryKV(data))

    async def go():
        look = await first.lookup("shared", ["a"], tenant="key-a")
        first.store(look, ["a!"])
        await first.shared.drain()
        other = await second.lookup("shared", ["a"], tenant="key-b")
        same = await second.lookup("shared", ["a"], tenant="key-a")
        return other, same

    other, same = asyncio.run(go())
    assert other.hits == 0 and same.found == {0: "a!"}
