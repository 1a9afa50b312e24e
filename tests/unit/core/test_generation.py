"""The generation service model: prompt-token estimates, the estimator's fits and priors, and
the warm-pool numbers it gives."""

from __future__ import annotations

import math

import pytest

from floodway.core.estimators import ColdStartEstimator
from floodway.core.generation import (
    GenerationEstimator,
    GenerationModel,
    estimate_message_tokens,
    estimate_prompt_tokens,
    measured_generation,
)
from floodway.core.priors import DECODE_STEP_PRIOR, GENERATED_TOKENS_PRIOR, PREFILL_PRIOR
from floodway.routers.decide import ServiceTime
from floodway.warmers.target import Measured


def test_prompt_tokens_are_about_four_characters_each_and_capped():
    assert estimate_prompt_tokens("") == 1
    assert estimate_prompt_tokens("abcd") == 1
    assert estimate_prompt_tokens("abcde") == 2
    assert estimate_prompt_tokens("x" * 4000) == 1000
    assert estimate_prompt_tokens("x" * 4000, cap=512) == 512


def test_chat_messages_count_their_formatting():
    msgs = [{"role": "user", "content": "x" * 40}]
    # role 1 + content 10 + 3 per message + 3 for the reply
    assert estimate_message_tokens(msgs) == 17
    assert estimate_message_tokens(msgs * 2) == 31
    assert estimate_message_tokens(msgs * 100, cap=64) == 64


def test_the_estimator_starts_from_the_priors():
    est = GenerationEstimator()
    assert est.model == GenerationModel(PREFILL_PRIOR, DECODE_STEP_PRIOR)
    assert est.tokens_per_request() == GENERATED_TOKENS_PRIOR


def test_the_step_fit_recovers_a_linear_step_time():
    est = GenerationEstimator()
    for active in (1, 2, 4, 8, 8, 3):
        est.record_step(active, 0.01 + 0.002 * active)
    m = est.model
    assert m.step.per_batch_s == pytest.approx(0.01)
    assert m.step.per_row_s == pytest.approx(0.002)
    assert m.tokens_per_s(8) == pytest.approx(8 / 0.026)
    # Continuous batching pays: eight sequences decode more tokens/s than one.
    assert m.tokens_per_s(8) > 3 * m.tokens_per_s(1)


def test_the_prefill_fit_gives_prompt_tokens_per_second():
    est = GenerationEstimator()
    for tokens in (100, 400, 1600):
        est.record_prefill(tokens, 0.005 + tokens / 2000)
    m = est.model
    assert m.prefill_tokens_per_s == pytest.approx(2000)
    assert m.prefill_s(1000, prompts=2) == pytest.approx(0.5 + 0.01)


def test_bad_samples_are_ignored_and_requests_average():
    est = GenerationEstimator()
    est.record_step(0, 1.0)
    est.record_prefill(10, -1.0)
    assert est.model == GenerationModel()
    est.record_request(100, 20)
    est.record_request(300, 60)
    assert est.tokens_per_request() == 40 and est.prompt_tokens_per_request() == 200


def test_measured_generation_costs_a_request_its_tokens():
    est = GenerationEstimator(step_prior=ServiceTime(0.0, 0.05),
                              prefill_prior=ServiceTime(0.0, 0.0))
    est.record_request(10, 100)
    m = measured_generation(ColdStartEstimator(12.0), est, max_sequences=8)
    # 8 sequences a step of 50 ms: 160 tokens/s; 100 tokens hold a container 0.625 s.
    assert m.cold_start_s == 12.0 and m.concurrency == 8
    assert m.service_s == pytest.approx(8 * 100 / 160)


def test_from_tokens_refuses_a_container_that_decodes_nothing():
    with pytest.raises(ValueError, match="tokens_per_s"):
        Measured.from_tokens(1.0, 0.0, 8, 10)


def test_step_time_never_divides_by_zero():
    m = GenerationModel(step=ServiceTime(0.0, 0.0))
    assert math.isinf(m.tokens_per_s(4)) and m.step_s(0) == 0.0


def test_expected_tokens_from_the_measured_lengths():
    m = GenerationModel(lengths=(10, 20, 30, 200))
    # Not started, at most 128: E[min(N, 128)].
    assert m.expected_new(128) == pytest.approx((10 + 20 + 30 + 128) / 4)
    # 25 generated: only 30 and 200 are still running; E[min(N, 128) - 25 | N > 25].
    assert m.expected_remaining(25, 128) == pytest.approx((30 + 128) / 2 - 25)
    # Longer than everything measured: only the cap bounds it; never below one token.
    assert m.expected_remaining(250, 300) == 50
    assert m.expected_remaining(29, 30) == 1
    # Nothing measured: the upper bound, max_new_tokens.
    assert GenerationModel().expected_new(128) == 128
    assert GenerationModel().expected_remaining(100, 128) == 28


def test_the_estimator_model_carries_the_finished_lengths():
    est = GenerationEstimator()
    before = est.model
    for g in (40, 5, 12):
        est.record_request(10, g)
    assert before.lengths == () and est.model.lengths == (5, 12, 40)
    assert est.model.expected_new(20) == pytest.approx((5 + 12 + 20) / 3)


def test_running_sequences_end_as_order_statistics():
    m = GenerationModel(lengths=(10, 20, 30, 200))
    # Two at 25 generated: each has 5 or 103 (128 - 25) left, even odds. The first ends
    # after 5 unless both have 103 (1/4); the second after 103 unless both have 5.
    assert m.expected_ends([25, 25], [128, 128]) == pytest.approx([29.5, 78.5])
    # Known remaining tokens are point masses; nothing measured: every one runs to its cap.
    assert m.expected_ends([], [], exact=[7, 3]) == [3, 7]
    assert GenerationModel().expected_ends([3, 10], [128, 20]) == [10, 125]
