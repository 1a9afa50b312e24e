"""The router's loop lag over a replay, from two scrapes of its /metrics histogram."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from floodway.bench.routerlag import NAME, lag_between
from floodway.http.metrics import LAG_BUCKETS_S


def test_only_the_samples_between_the_scrapes_count():
    reg = CollectorRegistry()
    h = Histogram(NAME.removesuffix("_seconds"), "lag", unit="seconds", buckets=LAG_BUCKETS_S,
                  registry=reg)
    for _ in range(1000):
        h.observe(0.5)                     # before the replay: not counted
    before = generate_latest(reg).decode()
    for _ in range(98):
        h.observe(0.0005)
    h.observe(0.03)
    h.observe(0.2)
    lag = lag_between(before, generate_latest(reg).decode())
    assert lag is not None and lag.samples == 100
    assert lag.p50_s <= 0.001
    below = [b for b in LAG_BUCKETS_S if b >= 0.03][0]
    assert lag.p99_s == below                       # the 99th sample: the 30 ms one
    assert lag.max_s == [b for b in LAG_BUCKETS_S if b >= 0.2][0]


def test_no_histogram_is_none_and_no_samples_is_nan():
    assert lag_between("", "") is None
    reg = CollectorRegistry()
    Histogram(NAME.removesuffix("_seconds"), "lag", unit="seconds", buckets=LAG_BUCKETS_S,
              registry=reg)
    text = generate_latest(reg).decode()
    lag = lag_between(text, text)
    assert lag is not None and lag.samples == 0 and math.isnan(lag.p99_s)
