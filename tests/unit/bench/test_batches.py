"""Batch times from a router's /metrics: totals read per endpoint, differences per
interval, lone batches exact, a linear fit on the totals, the JSON written, and the
sampler driven over a real /metrics route."""

import asyncio
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from floodway.bench.batches import FORMAT, BatchSampler, batch_times, batch_totals, fit, watch
from floodway.http.metrics import Metrics


def _metrics() -> Metrics:
    return Metrics(readiness=lambda: {})


def _text(m: Metrics) -> str:
    from prometheus_client.exposition import generate_latest

    return generate_latest(m.registry).decode()


def test_totals_per_endpoint():
    m = _metrics()
    m.batch("embed", 4, 0.04)
    m.batch("embed", 8, 0.06)
    m.batch("other", 32, 1.0)
    n, rows, sec = batch_totals(_text(m), "embed")
    assert (n, rows) == (2, 12) and sec == pytest.approx(0.10)
    assert batch_totals(_text(m), "absent") is None


def test_sampler_takes_differences_and_skips_idle_intervals():
    m, s = _metrics(), BatchSampler("embed")
    s.add(0.0, _text(m))                 # no batch yet: nothing for the endpoint
    assert not s.seen
    m.batch("embed", 1, 0.01)
    s.add(0.25, _text(m))                # the first totals: the baseline
    m.batch("embed", 10, 0.07)
    s.add(0.5, _text(m))
    s.add(0.75, _text(m))                # idle: left out
    m.batch("embed", 4, 0.03)
    m.batch("embed", 6, 0.04)
    s.add(1.0, _text(m))
    assert s.seen
    assert [(t, n, r) for t, n, r, _ in s.intervals] == [(0.5, 1, 10), (1.0, 2, 10)]
    assert [x[3] for x in s.intervals] == pytest.approx([0.07, 0.07])


def test_fit_recovers_a_linear_batch_time():
    per_batch, per_row = 0.02, 0.005
    ivs = [(float(i), n, r, n * per_batch + r * per_row)
           for i, (n, r) in enumerate([(1, 4), (1, 32), (2, 10), (3, 60), (1, 16)])]
    f = fit(ivs)
    assert f["per_batch_s"] == pytest.approx(per_batch)
    assert f["per_row_s"] == pytest.approx(per_row)
    assert f["intervals"] == 5
    # a fit with a negative per-batch part: it clamps at 0, rows alone refitted
    g = fit([(0.0, 1, 10, 0.05), (1.0, 1, 20, 0.11), (2.0, 2, 10, 0.04)])
    assert g["per_batch_s"] == 0.0 and g["per_row_s"] > 0
    assert fit([]) is None


def test_the_json_groups_lone_batches_by_rows():
    s = BatchSampler("embed", intervals=[(0.25, 1, 8, 0.06), (0.5, 1, 8, 0.08),
                                         (0.75, 2, 20, 0.15), (1.0, 1, 32, 0.2)])
    doc = batch_times(s)
    assert doc["format"] == FORMAT and doc["endpoint"] == "embed"
    assert doc["batches"] == [{"rows": 8, "seconds": 0.06}, {"rows": 8, "seconds": 0.08},
                              {"rows": 32, "seconds": 0.2}]
    assert [(b["rows"], b["batches"]) for b in doc["by_rows"]] == [(8, 2), (32, 1)]
    assert doc["by_rows"][0]["mean_s"] == pytest.approx(0.07)
    assert len(doc["intervals"]) == 4 and doc["fit"]["intervals"] == 4
    assert batch_times(BatchSampler("embed")) is None


def test_watch_samples_until_stopped():
    m = _metrics()
    m.batch("embed", 2, 0.01)
    scrapes = []

    stop = asyncio.Event()

    async def metrics(request):
        scrapes.append(1)
        stop.set()                        # stop after this one: then the closing scrape
        m.batch("embed", 3, 0.02)        # a batch ran between two scrapes
        return PlainTextResponse(_text(m))

    app = Starlette(routes=[Route("/metrics", metrics)])
    sampler = BatchSampler("embed")

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://r") as client:
            await watch(client, sampler, stop, time.perf_counter)

    asyncio.run(go())
    assert len(scrapes) == 1 + 1
    assert [(n, r) for _, n, r, _ in sampler.intervals] == [(1, 3)]
