"""SharedTier: hashed keys, bounded values, its own TTL check; a broken store is a miss."""

import asyncio

import pytest

from floodway.cache.shared import SharedTier
from floodway.modal.kv import MemoryKV

KEY = bytes(range(32))


def _tier(kv, now=1000.0, **kw):
    return SharedTier(kv, wall=lambda: now, **kw)


def test_values_over_the_bound_are_not_shared():
    data: dict = {}

    async def go():
        tier = _tier(MemoryKV(data))
        small, big = tier.put(KEY, b"x" * 10, max_item_bytes=10), \
            tier.put(KEY[::-1], b"x" * 11, max_item_bytes=10)
        await tier.drain()
        return small, big

    assert asyncio.run(go()) == (True, False)
    assert data == {KEY.hex(): [1000.0, b"x" * 10]}


def test_entries_older_than_the_ttl_and_malformed_ones_are_misses():
    data = {KEY.hex(): [900.0, b"old"], KEY[::-1].hex(): "not ours", (b"\1" * 32).hex():
            [990.0, b"new"]}
    tier = _tier(MemoryKV(data))
    got = asyncio.run(tier.get_many({0: KEY, 1: KEY[::-1], 2: b"\1" * 32}, ttl_s=50))
    assert got == {2: b"new"} and (tier.hits, tier.misses) == (1, 2)


class Broken:
    async def get(self, key, default=None):
        raise ConnectionError("down")

    async def put(self, key, value, *, skip_if_exists=False):
        raise ConnectionError("down")


class Hanging:
    async def get(self, key, default=None):
        await asyncio.Event().wait()


def test_a_failing_store_answers_misses_and_swallows_writes():
    async def go():
        tier = _tier(Broken())
        got = await tier.get_many({0: KEY}, ttl_s=10)
        tier.put(KEY, b"v", max_item_bytes=10)
        await tier.drain()
        return tier, got

    tier, got = asyncio.run(go())
    assert got == {} and tier.errors == 2


@pytest.mark.parametrize("timeout_s", [0.001])
def test_a_store_that_does_not_answer_in_time_is_a_miss(timeout_s):
    tier = _tier(Hanging(), timeout_s=timeout_s)
    assert asyncio.run(tier.get_many({0: KEY, 1: KEY[::-1]}, ttl_s=10)) == {}
    assert tier.misses == 2 and tier.errors == 1
