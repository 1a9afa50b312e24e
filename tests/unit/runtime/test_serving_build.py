"""rollout.serving: the one build serving an endpoint (the response cache's key), or None."""

import pytest

from floodway.runtime.rollout import serving


@pytest.mark.parametrize("latest,builds,expected", [
    ("k1", ["k1", "k1"], "k1"),
    (None, ["k1"], "k1"),            # before the pool first read LATEST
    ("k1", [], "k1"),                # scaled to zero: what would start
    (None, [], None),
    ("k2", ["k1", "k2"], None),      # a rollout: two builds serve
    ("k2", ["k1"], None),            # a rollout about to start
    ("k1", [None], None),            # a container whose build is unknown
])
def test_serving(latest, builds, expected):
    assert serving(latest, builds) == expected


def test_the_server_keys_the_cache_by_the_pools_live_containers():
    from types import SimpleNamespace as NS

    from floodway.server import build_keys

    containers = [NS(build="k1")]
    pool = NS(endpoints={"e": NS(latest="k2", live=lambda: containers)})
    key = build_keys(pool)
    assert key("e") is None                      # a rollout to k2 is about to start
    containers[:] = [NS(build="k2")]
    assert key("e") == "k2"
