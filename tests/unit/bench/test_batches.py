"""Batch times from a router's /metrics: totals read per endpoint, differences per
interval, lone batches exact, padded tokens measured (a router that exports them) or
estimated from the answers, the service fit on padded tokens, rows and batches as the
router fits its own, the JSON written, and the sampler driven over a real /metrics route."""

import asyncio
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from floodway.bench.batches import (
    FORMAT,
    BatchSampler,
    Interval,
    batch_times,
    batch_totals,
    estimate_tokens,
    fit,
    read_metrics,
    watch,
)
from floodway.core.priors import TEXT_SERVICE_PRIOR
from floodway.http.metrics import Metrics
from floodway.routers.service import ServiceTime
from floodway.sim.model import ServiceModel


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
    t = batch_totals(_text(m), "embed")
    assert (t.batches, t.rows) == (2, 12) and t.compute_s == pytest.approx(0.10)
    assert t.tokens is None and t.service_s is None      # not exported by this router
    assert batch_totals(_text(m), "absent") is None


# A router that exports each batch's padded tokens and service seconds (the metrics this
# module reads where they exist), in the exposition format.
EXPORTED = """# TYPE floodway_batch_rows histogram
floodway_batch_rows_count{endpoint="embed"} 3
floodway_batch_rows_sum{endpoint="embed"} 20
# TYPE floodway_batch_seconds histogram
floodway_batch_seconds_count{endpoint="embed"} 3
floodway_batch_seconds_sum{endpoint="embed"} 0.25
# TYPE floodway_batch_padded_tokens histogram
floodway_batch_padded_tokens_count{endpoint="embed"} 3
floodway_batch_padded_tokens_sum{endpoint="embed"} 1900
# TYPE floodway_batch_service_seconds histogram
floodway_batch_service_seconds_count{endpoint="embed"} 3
floodway_batch_service_seconds_sum{endpoint="embed"} 0.31
# TYPE floodway_containers gauge
floodway_containers{endpoint="embed",lane="",state="ready"} 1
floodway_containers{endpoint="embed",lane="",state="busy"} 1
floodway_containers{endpoint="embed",lane="",state="stopped"} 4
# TYPE floodway_cold_start_seconds gauge
floodway_cold_start_seconds{container="1",endpoint="embed",lane="",phase="total"} 0.4
floodway_cold_start_seconds{container="1",endpoint="embed",lane="",phase="imports"} 0.3
"""


def test_exported_tokens_service_seconds_containers_and_cold_starts_are_read():
    seen = read_metrics(EXPORTED, "embed")
    assert seen.totals.tokens == 1900 and seen.totals.service_s == pytest.approx(0.31)
    assert seen.live == 2                               # ready + busy, not stopped
    assert seen.cold_s == {"1": 0.4}
    s = BatchSampler("embed")
    s.add(0.25, EXPORTED.replace(" 3\n", " 1\n").replace(" 20\n", " 4\n")
          .replace(" 1900\n", " 300\n").replace(" 0.31\n", " 0.05\n"))
    s.add(0.5, EXPORTED)
    # the interval's seconds are service seconds where exported, its tokens measured
    assert s.intervals == [Interval(0.5, 2, 16, pytest.approx(0.26), 1600, 0.25, 1.0)]
    assert s.service_seconds and s.most_live == 2 and s.cold_s == {"1": 0.4}


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
    assert [(iv.t_s, iv.batches, iv.rows) for iv in s.intervals] == [(0.5, 1, 10),
                                                                      (1.0, 2, 10)]
    assert [iv.seconds for iv in s.intervals] == pytest.approx([0.07, 0.07])
    assert [iv.since_s for iv in s.intervals] == [0.25, 0.75]   # the idle one's end
    assert not s.service_seconds


def test_fit_recovers_a_linear_batch_time():
    per_batch, per_row = 0.02, 0.005
    ivs = [Interval(float(i), n, r, n * per_batch + r * per_row)
           for i, (n, r) in enumerate([(1, 4), (1, 32), (2, 10), (3, 60), (1, 16)])]
    f = fit(ivs)
    assert f["per_batch_s"] == pytest.approx(per_batch)
    assert f["per_row_s"] == pytest.approx(per_row)
    assert f["intervals"] == 5 and f["batches"] == 8 and "per_token_s" not in f
    # a fit with a negative per-batch part: it clamps at 0, rows alone refitted
    g = fit([Interval(0.0, 1, 10, 0.05), Interval(1.0, 1, 20, 0.11),
             Interval(2.0, 2, 10, 0.04)])
    assert g["per_batch_s"] == 0.0 and g["per_row_s"] > 0
    assert fit([]) is None


def test_the_json_groups_lone_batches_by_rows():
    s = BatchSampler("embed", intervals=[Interval(0.25, 1, 8, 0.06), Interval(0.5, 1, 8, 0.08),
                                         Interval(0.75, 2, 20, 0.15), Interval(1.0, 1, 32, 0.2)])
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
    assert [(iv.batches, iv.rows) for iv in sampler.intervals] == [(1, 3)]


def _line(n: int, rows: float, tokens: float, f: ServiceTime) -> float:
    return n * f.per_batch_s + rows * f.per_row_s + tokens * f.per_token_s


def test_the_fit_on_padded_tokens_recovers_the_line_as_the_router_would():
    truth = ServiceTime(per_row_s=0.002, per_batch_s=0.01, per_token_s=0.0001)
    shapes = [(1, 4, 120), (1, 16, 4096), (2, 12, 800), (1, 8, 256), (3, 30, 3000),
              (1, 2, 512), (2, 20, 5000)]
    ivs = [Interval(float(i), n, r, _line(n, r, t, truth), t) for i, (n, r, t) in
           enumerate(shapes)]
    f = fit(ivs)
    assert f["per_token_s"] == pytest.approx(truth.per_token_s, rel=1e-3)
    assert f["per_row_s"] == pytest.approx(truth.per_row_s, rel=1e-2)
    assert f["per_batch_s"] == pytest.approx(truth.per_batch_s, rel=1e-2)
    assert f["batches"] == 11
    # the same as the runtime's own fit on those batches (each interval's mean batch, once
    # per batch)
    own = ServiceTime.fit_padded([(r / n, t / n, _line(n, r, t, truth) / n)
                                  for n, r, t in shapes for _ in range(n)], TEXT_SERVICE_PRIOR)
    assert f["per_token_s"] == pytest.approx(own.per_token_s)


def test_tokens_are_estimated_from_the_answers_of_each_interval():
    ivs = [Interval(1.0, 1, 4, 0.1, None, 0.5), Interval(2.0, 2, 6, 0.2, None, 1.0),
           Interval(3.0, 1, 2, 0.1, 77.0, 2.0), Interval(4.0, 1, 3, 0.1, None, 3.0)]
    answered = [(0.7, 100), (0.9, 300), (1.5, 50), (1.0, 10), (3.5, 1000)]
    out = estimate_tokens(ivs, answered)
    # (0.5, 1]: 100, 300, 10 -> mean 136.7; (1, 2]: 50; measured kept; (3, 4]: 1000
    assert [iv.tokens for iv in out] == pytest.approx([4 * 410 / 3, 6 * 50.0, 77.0, 3000.0])
    lone = estimate_tokens([Interval(9.0, 1, 2, 0.1, None, 8.0)], answered)
    assert lone[0].tokens == pytest.approx(2 * 1460 / 5)   # none answered then: the mean
    assert estimate_tokens(ivs, []) == ivs


def test_the_json_with_tokens_gives_the_simulator_a_per_token_term():
    truth = ServiceTime(per_row_s=0.001, per_batch_s=0.005, per_token_s=0.0002)
    shapes = [(1, 4, 400), (1, 8, 2048), (2, 10, 1000), (1, 2, 80), (1, 16, 4096)]
    s = BatchSampler("embed", intervals=[
        Interval(float(i + 1), n, r, _line(n, r, t * r, truth), None, float(i))
        for i, (n, r, t) in enumerate(shapes)])
    # one answer per interval, its text as long as the interval's padded rows
    answered = [(i + 0.5, t) for i, (_, _, t) in enumerate(shapes)]
    doc = batch_times(s, answered=answered)
    assert doc["tokens"] == "estimated" and doc["seconds"] == "compute"
    assert doc["intervals"][1]["padded_tokens"] == 8 * 2048
    model = ServiceModel.from_batch_times(doc)
    assert model.fit.per_token_s == pytest.approx(truth.per_token_s, rel=1e-2)
    assert not model.sized          # the fit explains the sizes: no per-size times
    assert batch_times(s)["tokens"] is None and "per_token_s" not in batch_times(s)["fit"]
