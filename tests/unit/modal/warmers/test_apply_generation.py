"""A streaming endpoint's warm pool on Modal is sized from tokens/s, as the local pool's: the
router publishes its generation fits (``generation:<endpoint>`` in the stats Dict), the
warmers read them back into `measured_generation` and `desired()`; a batch endpoint still
reads its batch time."""

from __future__ import annotations

import asyncio
import json
import pickle
from types import SimpleNamespace

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.core.estimators import ServiceEstimator, measured
from floodway.core.generation import GenerationEstimator, measured_generation
from floodway.core.priors import DECODE_STEP_PRIOR, GENERATED_TOKENS_PRIOR
from floodway.modal.kv import MemoryKV, MemoryStore
from floodway.modal.router.backend import COLD_REFRESH_S, ModalBackend
from floodway.modal.stats import (
    cold_estimator,
    generation_estimator,
    generation_key,
    generation_record,
    measured_record,
)
from floodway.modal.warmers.apply import TICK_PARAMS, Stores, measured_of, run_warmer
from floodway.warmers.target import History, PolicyState, desired, minute_of
from tests.unit.modal.router.test_streams import PROMPT, FakeStream
from tests.unit.modal.warmers.test_apply import Recorder, _utc

NOW = _utc(2025, 1, 6, 12)
SEQUENCES = 8


def _app() -> fw.App:
    app = fw.App("gen")

    @app.endpoint(generation=fw.Generation(max_sequences=SEQUENCES),
                  warm=fw.WarmPool(predictive=True, max_containers=40))
    async def talk(model, prompt: str):
        yield {"text": prompt, "tokens": 1}

    @app.endpoint(warm=fw.WarmPool(predictive=True, max_containers=40),
                  route=fw.Route(max_inflight_per_container=1))
    def rows(model, inputs: list[str]) -> list[str]:
        return inputs

    return app


def _estimator(tokens: int, step_s: float = 0.1) -> GenerationEstimator:
    """A router's estimator after streams of `tokens` generated tokens each (100-token
    prompts), decode steps of `step_s` with all `SEQUENCES` running, or half of them at
    half the per-step overhead."""
    est = GenerationEstimator()
    for _ in range(5):
        est.record_prefill(100, 0.05)
        est.record_prefill(300, 0.13)
        est.record_step(SEQUENCES, step_s)
        est.record_step(SEQUENCES // 2, step_s * 0.75)
        est.record_request(100, tokens)
    return est


def _traffic(per_minute: int) -> dict:
    m = minute_of(NOW)
    return {("arrivals", "gen", "talk", "r1"): {m - i: per_minute for i in range(30)}}


def _floor(app: fw.App, stats: dict, per_minute: int = 1200) -> int:
    stores = Stores(warm=MemoryStore(), traffic=MemoryStore(_traffic(per_minute)),
                    stats=MemoryStore(stats))
    [applied] = run_warmer(app, ["talk"], autoscale=Recorder(), stores=stores, now_s=NOW)
    assert applied.error is None, applied.error
    return applied.settings["min_containers"]


# ---------------------------------------------------------------- the record

def test_the_record_round_trips_to_the_same_measurements():
    est = _estimator(tokens=40)
    record = generation_record(est)
    # Plain data: a Modal Dict pickles it, and it reads as JSON too.
    assert pickle.loads(pickle.dumps(record)) == record == json.loads(json.dumps(record))
    assert record["samples"] == {"prefill": 10, "step": 10, "requests": 5}
    assert record["tokens_per_request"] == 40 and record["prompt_tokens_per_request"] == 100
    # Steps of 0.1 s with 8 running and 0.075 s with 4: 50 ms + 6.25 ms per sequence;
    # prompts of 100 and 300 tokens in 50 and 130 ms: 10 ms + 0.4 ms per token.
    assert record["step"] == pytest.approx({"per_row_s": 0.00625, "per_batch_s": 0.05})
    assert record["prefill"] == pytest.approx({"per_row_s": 0.0004, "per_batch_s": 0.01})
    back = generation_estimator(record)
    assert back.model.prefill == est.model.prefill and back.model.step == est.model.step
    assert back.tokens_per_request() == est.tokens_per_request()
    assert back.prompt_tokens_per_request() == est.prompt_tokens_per_request()
    cold = cold_estimator([{"init_s": 12.0}])
    assert measured_generation(cold, back, SEQUENCES) == measured_generation(cold, est, SEQUENCES)


def test_no_record_before_a_sample_and_the_priors_without_one():
    assert generation_record(GenerationEstimator()) is None
    prior = generation_estimator(None)
    assert prior.model.step == DECODE_STEP_PRIOR
    assert prior.tokens_per_request() == GENERATED_TOKENS_PRIOR
    # A record missing a field keeps that field's prior.
    partial = generation_estimator({"tokens_per_request": 7.0})
    assert partial.tokens_per_request() == 7.0 and partial.model.step == DECODE_STEP_PRIOR


def test_measured_record_is_a_streaming_endpoints_generation_and_a_batch_ones_service():
    app = _app()
    state = SimpleNamespace(service=ServiceEstimator(), generation=_estimator(tokens=20),
                            mean_rows=lambda: 2.0)
    key, record = measured_record(app["talk"], state, streaming=True)
    assert key == generation_key("talk") == "generation:talk"
    assert record == generation_record(state.generation)
    assert measured_record(app["rows"], state, streaming=False) == ("service:rows", None)
    state.service.record(32, 0.4)
    key, svc = measured_record(app["rows"], state, streaming=False)
    assert key == "service:rows" and svc["batch_rows"] == 32 and svc["rows_per_request"] == 2.0
    assert svc["batch_s"] == pytest.approx(0.4) and svc["samples"] == 1


# ---------------------------------------------------------------- the warmers

def test_a_streaming_endpoint_is_measured_from_its_generation_record():
    app = _app()
    ep = app["talk"]
    est = _estimator(tokens=40)
    stats = {"generation:talk": generation_record(est), "cold:talk": [{"init_s": 9.0}]}
    got = measured_of(ep, MemoryStore(stats))
    # The local pool's function, on what the router measured.
    assert got == measured_generation(cold_estimator([{"init_s": 9.0}]), est, SEQUENCES)
    assert got.concurrency == SEQUENCES
    # A request holds a container's share for 40 tokens at 80 tokens/s (8 sequences, 0.1 s
    # a step) plus a 100-token prefill (50 ms): 0.55 s, times the 8 it runs at once.
    assert got.service_s == pytest.approx(SEQUENCES * (40 / 80 + 0.05))
    # Without a record: the generation priors, not a batch endpoint's.
    prior = measured_of(ep, MemoryStore())
    assert prior == measured_generation(cold_estimator(), GenerationEstimator(), SEQUENCES)
    assert prior != measured(cold_estimator(), ServiceEstimator(), ep.batching.max_batch_rows)


def test_more_tokens_per_request_or_slower_decoding_asks_for_more_warm_containers():
    app = _app()
    short = _floor(app, {"generation:talk": generation_record(_estimator(tokens=10))})
    long = _floor(app, {"generation:talk": generation_record(_estimator(tokens=80))})
    slow = _floor(app, {"generation:talk": generation_record(_estimator(tokens=10,
                                                                         step_s=0.4))})
    # Little's law at 20 requests/s: 10 tokens at 80 tokens/s + 50 ms prefill = 0.175 s of a
    # container each -> 3.5 -> 4; 80 tokens: 1.05 s -> 21; 10 tokens at 20 tokens/s (0.4 s a
    # step): 0.55 s -> 11.
    assert (short, long, slow) == (4, 21, 11)
    # What desired() gives on the local pool's measurements of the same streams.
    est = _estimator(tokens=80)
    history = History.from_counts([1200] * 30, minute_of(NOW) - 29)
    target, _ = desired(NOW, history, app["talk"].warm,
                        measured_generation(cold_estimator(), est, SEQUENCES), PolicyState(),
                        params=TICK_PARAMS)
    assert long == target.min_containers


def test_a_batch_endpoint_ignores_generation_records():
    app = _app()
    svc = {"batch_s": 0.2, "batch_rows": 8, "rows_per_request": 1.0}
    plain = measured_of(app["rows"], MemoryStore({"service:rows": svc}))
    both = measured_of(app["rows"], MemoryStore({
        "service:rows": svc, "generation:rows": generation_record(_estimator(tokens=80))}))
    assert plain == both and (plain.service_s, plain.concurrency) == (0.2, 8.0)


# ---------------------------------------------------------------- the router publishes

def test_the_router_publishes_its_generation_fits_when_it_rereads_the_cold_starts():
    app = _app()
    clock = ManualClock()
    method = FakeStream(clock, queued_s=0.5, first_s=0.3, gap_s=0.05, tokens=21)

    async def stats():
        return SimpleNamespace(backlog=0, num_total_runners=1)

    method.get_current_stats = SimpleNamespace(aio=stats)
    kv = MemoryKV()
    backend = ModalBackend(app, {"talk": lambda: SimpleNamespace(stream=method)},
                                        clock=clock, stats=kv)

    async def go():
        await backend.run("talk", [PROMPT], timeout_s=60)
        await backend.refresh("talk")
        first = kv.data.pop("generation:talk", None)
        await backend.refresh("talk")               # throttled as the service record is
        again = kv.data.get("generation:talk")
        clock.advance(COLD_REFRESH_S)
        await backend.refresh("talk")
        return first, again, kv.data.get("generation:talk")

    first, again, later = asyncio.run(go())
    est = backend._eps["talk"].generation
    assert first == generation_record(est) and first["samples"]["requests"] == 1
    assert first["tokens_per_request"] == 21 and first["step"]["per_row_s"] > 0
    assert again is None and later == first
    assert "service:talk" not in kv.data
    # The warmers size from exactly what the router measured.
    assert measured_of(app["talk"], MemoryStore({"generation:talk": first})) == \
        measured_generation(cold_estimator(), est, SEQUENCES)
