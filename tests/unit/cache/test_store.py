"""LruStore: bounded by bytes (least recently used out first), entries live ttl_s."""

import pytest

from floodway.cache.store import ENTRY_OVERHEAD_B, LruStore

K = [bytes([i]) * 32 for i in range(8)]
V = b"x" * 100
COST = 32 + 100 + ENTRY_OVERHEAD_B


def test_get_after_put_counts_a_hit_and_absent_a_miss():
    s = LruStore(max_bytes=10 * COST, ttl_s=10)
    assert s.put(K[0], V, 0.0)
    assert s.get(K[0], 1.0) == V and s.get(K[1], 1.0) is None
    assert (s.stats.hits, s.stats.misses, s.stats.entries, s.stats.bytes) == (1, 1, 1, COST)


def test_the_byte_budget_drops_the_least_recently_used_first():
    s = LruStore(max_bytes=3 * COST, ttl_s=100)
    for k in K[:3]:
        s.put(k, V, 0.0)
    assert s.get(K[0], 1.0) == V          # K[0] used: K[1] is now the oldest use
    s.put(K[3], V, 2.0)
    assert K[1] not in s and all(k in s for k in (K[0], K[2], K[3]))
    assert s.stats.evicted == 1 and s.stats.bytes == 3 * COST <= s.max_bytes


def test_an_entry_expires_ttl_s_after_its_put_and_is_not_served():
    s = LruStore(max_bytes=10 * COST, ttl_s=5)
    s.put(K[0], V, 0.0)
    assert s.get(K[0], 5.0) == V           # exactly ttl_s old: still fresh
    assert s.get(K[0], 5.01) is None       # a hit does not extend its life
    assert s.stats.expired == 1 and s.stats.entries == 0 and s.stats.bytes == 0


def test_replacing_a_key_counts_its_bytes_once():
    s = LruStore(max_bytes=10 * COST, ttl_s=5)
    s.put(K[0], V, 0.0)
    s.put(K[0], V + V, 1.0)
    assert s.stats.entries == 1 and s.stats.bytes == COST + 100 and s.get(K[0], 2.0) == V + V


def test_an_entry_larger_than_the_budget_is_refused_and_evicts_nothing():
    s = LruStore(max_bytes=2 * COST, ttl_s=5)
    s.put(K[0], V, 0.0)
    assert not s.put(K[1], b"y" * (2 * COST), 0.0)
    assert K[0] in s and K[1] not in s and s.stats.evicted == 0


def test_expired_entries_pushed_out_count_as_expired_not_evicted():
    s = LruStore(max_bytes=2 * COST, ttl_s=1)
    s.put(K[0], V, 0.0)
    s.put(K[1], V, 0.0)
    s.put(K[2], V, 5.0)
    assert s.stats.expired == 1 and s.stats.evicted == 0


@pytest.mark.parametrize("max_bytes,ttl_s", [(0, 1), (10, 0)])
def test_a_store_needs_a_budget_and_a_lifetime(max_bytes, ttl_s):
    with pytest.raises(ValueError, match="must be > 0"):
        LruStore(max_bytes=max_bytes, ttl_s=ttl_s)
