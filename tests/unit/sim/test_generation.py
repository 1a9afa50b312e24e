"""The generation simulator: exact first-token and finish times on tiny traces, continuous
batching, overload accounting, the KV budget, the warm pool, and a slice of the real LLM
trace (skipped when the shared traces are absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from floodway.config import Route, WarmPool
from floodway.core.generation import GenerationModel
from floodway.routers.decide import ServiceTime
from floodway.sim.generation import GenSimConfig, scale_trace, simulate_generation
from floodway.sim.model import ColdStartModel
from floodway.sim.trace import Trace, read_trace

LLM_TRACE = Path(__file__).parents[3].parent / "shared" / "traces" / "azure_llm_2023_code.csv"
# 1,000 prompt tokens/s; a decode step of 50 ms whatever the batch.
MODEL = GenerationModel(ServiceTime(0.001, 0.0), ServiceTime(0.0, 0.05))


def trace(times, prompts, gens) -> Trace:
    return Trace.from_times(np.asarray(times, dtype=float), prompt_tokens=np.asarray(prompts),
                            generated_tokens=np.asarray(gens))


def cfg(**kw) -> GenSimConfig:
    base = dict(route=Route(timeout_s=2.0), warm=WarmPool(min_containers=1, max_containers=1),
                max_sequences=8, max_new_tokens=64, model=MODEL, cold=ColdStartModel.of(5.0))
    return GenSimConfig(**{**base, **kw})


def test_one_request_first_token_after_prefill_and_a_step():
    r = simulate_generation(trace([60.5], [100], [10]), cfg())
    assert r.dispatched == 1 and r.finished == 1 and r.tokens == 10
    assert r.ttft_s[0] == pytest.approx(0.1 + 0.05)
    assert r.done_s[0] == pytest.approx(0.15 + 9 * 0.05)
    assert r.within_deadline == 1 and r.tokens_per_s == pytest.approx(10 / 0.6)


def test_a_second_sequence_joins_between_steps():
    # The first iteration runs 60.5 .. 60.65; the second request (60.51) joins the next one:
    # prefill 0.02 s + a step -> first token at 60.72.
    r = simulate_generation(trace([60.5, 60.51], [100, 20], [10, 10]), cfg())
    assert r.dispatched == 2
    assert r.ttft_s[1] == pytest.approx(60.72 - 60.51)
    # The first sequence's tokens wait for that prefill once: it ends 0.02 s later.
    assert r.done_s[0] == pytest.approx(0.6 + 0.02)


def test_generated_tokens_are_capped_by_max_new_tokens():
    r = simulate_generation(trace([60.0], [10], [500]), cfg(max_new_tokens=64))
    assert r.tokens == 64


def _burst() -> Trace:
    n = 60
    return trace(60.0 + np.arange(n) * 0.1, np.full(n, 20), np.full(n, 40))


def test_overload_is_accounted_and_served_requests_meet_their_deadline():
    r = simulate_generation(_burst(), cfg(max_sequences=2))
    assert r.dispatched + r.queued + r.spill_cold + r.spill_async + r.shed + r.rejected \
        == r.requests
    assert r.spill_async > 0 and r.queued > 0            # overloaded: some wait, some spill
    assert r.served == r.finished == r.dispatched + r.queued - r.expired
    assert r.within_deadline == r.served
    assert r.ttft_p99_s <= 2.0


def test_continuous_batching_and_more_containers_serve_more():
    one_at_a_time = simulate_generation(_burst(), cfg(max_sequences=1))
    batched = simulate_generation(_burst(), cfg(max_sequences=8))
    assert batched.finished > 2 * one_at_a_time.finished
    assert batched.tokens_per_s > 2 * one_at_a_time.tokens_per_s
    more = simulate_generation(_burst(), cfg(max_sequences=1, cold=ColdStartModel.of(0.3),
                                             warm=WarmPool(min_containers=1,
                                                           max_containers=4)))
    assert more.spill_cold > 0 and more.containers_started == more.spill_cold
    assert more.finished > one_at_a_time.finished


def test_a_sequence_longer_than_the_kv_budget_is_rejected():
    r = simulate_generation(trace([60.0, 61.0], [100, 10], [5, 5]), cfg(kv_cache_tokens=120))
    assert r.rejected == 1 and r.finished == 1          # 100 + 64 > 120; 10 + 64 fits


def test_the_warm_pool_grows_with_the_token_rate():
    # Ten minutes of 4 requests/s of 40 tokens: 160 tokens/s against 8 / 50 ms = 160 tokens/s
    # per container: the predictive policy asks for a second container.
    n = 2400
    tr = trace(np.arange(n) * 0.25, np.full(n, 20), np.full(n, 40))
    warm = WarmPool(min_containers=1, max_containers=4, predictive=True)
    r = simulate_generation(tr, cfg(warm=warm))
    assert r.containers_started >= 1
    fixed = simulate_generation(tr, cfg(warm=WarmPool(min_containers=1, max_containers=1)))
    assert r.finished > fixed.finished


def test_scale_trace_compresses_time_and_tokens():
    tr = trace([10.0, 12.0, 20.0], [100, 7, 1000], [10, 3, 1])
    s = scale_trace(tr, time_scale=0.5, token_scale=0.1)
    assert s.times_s.tolist() == [10.0, 11.0, 15.0]
    assert s.prompt_tokens.tolist() == [10, 1, 100] and s.generated_tokens.tolist() == [1, 1, 1]


def test_token_columns_are_read_from_a_per_request_csv(tmp_path):
    p = tmp_path / "llm.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:04.0,300,8\n2023-11-16 18:17:03.0,4808,10\n")
    t = read_trace(p)
    assert t.prompt_tokens.tolist() == [4808, 300] and t.generated_tokens.tolist() == [10, 8]
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.0,3x,8\n")
    with pytest.raises(Exception, match="ContextTokens"):
        read_trace(p)


@pytest.mark.skipif(not LLM_TRACE.is_file(), reason="shared LLM trace not present")
def test_a_slice_of_the_real_llm_trace():
    full = read_trace(LLM_TRACE)
    n = 400
    tr = scale_trace(Trace.from_times(full.times_s[:n], prompt_tokens=full.prompt_tokens[:n],
                                      generated_tokens=full.generated_tokens[:n]),
                     token_scale=0.05)
    r = simulate_generation(tr, cfg(max_new_tokens=256,
                                    warm=WarmPool(min_containers=1, max_containers=4),
                                    cold=ColdStartModel.of(1.0)))
    assert r.requests == n and r.served > n // 2
    done = ~np.isnan(r.done_s)
    assert r.tokens == int(np.minimum(tr.generated_tokens, 256)[done].sum())
    assert 0 < r.ttft_p50_s <= r.ttft_p99_s <= 2.0
    assert r.tokens_per_s > 0
