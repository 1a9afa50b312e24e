"""The service-time line on padded tokens, rows and batches, and its fit."""

from __future__ import annotations

import random

import pytest

from floodway.core.priors import ROW_TOKENS_PRIOR, SERVICE_PRIOR, TEXT_SERVICE_PRIOR
from floodway.routers.service import ServiceTime

TRUE = ServiceTime(per_row_s=0.002, per_batch_s=0.01, per_token_s=0.0001)


def batches(n: int, seed: int = 1) -> list[tuple[int, int, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rows, longest = rng.randint(1, 32), rng.randint(5, 256)
        out.append((rows, rows * longest, TRUE.seconds(rows, rows * longest)))
    return out


def test_seconds_add_tokens_rows_and_the_batch():
    assert TRUE.seconds(4, 400) == pytest.approx(0.04 + 0.008 + 0.01)
    assert ServiceTime(0.005, 0.02).seconds(3) == pytest.approx(0.035)   # rows only


def test_the_fit_recovers_a_line_from_batches_of_many_shapes():
    fit = ServiceTime.fit_padded(batches(40), TEXT_SERVICE_PRIOR)
    assert fit.per_token_s == pytest.approx(0.0001, rel=1e-3)
    assert fit.per_row_s == pytest.approx(0.002, rel=1e-2)
    assert fit.per_batch_s == pytest.approx(0.01, rel=1e-2)


def test_the_fit_never_goes_negative():
    # Long batches measured faster than short ones (noise): no negative cost per token.
    samples = [(8, 8 * 20, 0.05), (8, 8 * 200, 0.04), (2, 2 * 20, 0.02), (2, 2 * 200, 0.015)]
    fit = ServiceTime.fit_padded(samples, TEXT_SERVICE_PRIOR)
    assert min(fit.per_token_s, fit.per_row_s, fit.per_batch_s) >= 0
    assert fit.per_token_s == 0


def test_without_samples_the_prior_and_one_batch_shape_a_line_through_the_origin():
    assert ServiceTime.fit_padded([], TEXT_SERVICE_PRIOR) == TEXT_SERVICE_PRIOR
    one = ServiceTime.fit_padded([(4, 40, 0.012)] * 5, TEXT_SERVICE_PRIOR)
    assert one.seconds(4, 40) == pytest.approx(0.012, rel=1e-3)
    # As `fit` does: no per-batch cost, so larger batches are overestimated rather than
    # under; tokens and rows share the cost in the prior's proportion.
    assert one.per_batch_s == pytest.approx(0.0, abs=1e-6)
    assert one.seconds(40, 400) == pytest.approx(0.12, rel=1e-3)
    assert one.per_token_s / one.per_row_s == pytest.approx(
        TEXT_SERVICE_PRIOR.per_token_s / TEXT_SERVICE_PRIOR.per_row_s, rel=1e-3)


def test_texts_of_one_length_still_predict_their_own_batches():
    # Tokens proportional to rows: the samples fix the line along that direction only.
    samples = [(r, 30 * r, 0.003 * r + 0.01) for r in (1, 4, 16, 32)] * 2
    fit = ServiceTime.fit_padded(samples, TEXT_SERVICE_PRIOR)
    for rows in (1, 8, 32):
        assert fit.seconds(rows, 30 * rows) == pytest.approx(0.003 * rows + 0.01, rel=1e-3)


def test_the_text_prior_costs_a_prior_length_row_as_the_row_prior_does():
    for rows in (1, 8, 32):
        assert TEXT_SERVICE_PRIOR.seconds(rows, rows * ROW_TOKENS_PRIOR) == \
            pytest.approx(SERVICE_PRIOR.seconds(rows))
    # A full batch of 256-token texts: over 5x the same rows of prior-length texts.
    assert TEXT_SERVICE_PRIOR.seconds(32, 32 * 256) > 5 * SERVICE_PRIOR.seconds(32)
