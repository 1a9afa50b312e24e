"""fw.Cache and the endpoint's `cache=` switch: defaults, validation, streaming endpoints."""

import pytest

import floodway as fw


def _define(fn, **kw):
    return fw.App("cfg").endpoint(**kw)(fn)


def batch(model, texts: list[str]) -> list[str]:
    return texts


def stream(model, text: str):
    yield text


def test_on_by_default_off_for_streaming_endpoints_and_switchable():
    assert _define(batch).cache == fw.Cache()
    assert _define(stream).cache is None                 # sampled outputs: off
    assert _define(batch, cache=False).cache is None
    small = fw.Cache(max_bytes=4096, ttl_s=5.0)
    assert _define(batch, cache=small).cache is small


@pytest.mark.parametrize("cache,field,shown", [
    (fw.Cache(max_bytes=10), "cache.max_bytes", "10"),
    (fw.Cache(ttl_s=0), "cache.ttl_s", "0"),
    (fw.Cache(ttl_s=float("nan")), "cache.ttl_s", "nan"),
    (fw.Cache(shared="yes"), "cache.shared", "'yes'"),
    (fw.Cache(shared_max_item_bytes=0), "cache.shared_max_item_bytes", "0"),
    (fw.Cache(shared_across_tenants=1), "cache.shared_across_tenants", "1"),
    (True, "cache", "True"),
])
def test_bad_values_name_the_endpoint_the_field_and_the_value(cache, field, shown):
    with pytest.raises(fw.ConfigError) as e:
        _define(batch, cache=cache)
    assert f"endpoint 'batch': {field} = {shown} is not allowed" in str(e.value)


def test_a_streaming_endpoint_cannot_turn_it_on():
    with pytest.raises(fw.ConfigError, match="cache = Cache.*streaming endpoint"):
        _define(stream, cache=fw.Cache())
