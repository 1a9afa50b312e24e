"""The shared estimators: priors until measured, then the measurements."""

from __future__ import annotations

import pytest

from floodway.core.estimators import (
    RATE_WINDOW_S,
    ArrivalRate,
    ColdStartEstimator,
    ServiceEstimator,
    build_start_s,
    measured,
    start_remaining_s,
)
from floodway.core.priors import (
    COLD_START_PRIOR_S,
    PROBE_START_FACTOR,
    PROBE_START_MARGIN_S,
    SERVICE_PRIOR,
    SERVICE_PRIOR_S,
)
from floodway.routers.decide import ServiceTime
from floodway.warmers.target import Measured


def test_service_starts_from_the_prior_and_follows_measurements():
    est = ServiceEstimator()
    assert est.fit == SERVICE_PRIOR
    for rows in (1, 8, 32):
        est.record(rows, 0.01 + 0.002 * rows)
    assert est.fit.per_row_s == pytest.approx(0.002)
    assert est.fit.per_batch_s == pytest.approx(0.01)


def test_service_keeps_only_the_latest_samples():
    est = ServiceEstimator(samples=4)
    est.extend([(1, 1.0)] * 4)
    est.extend([(2, 0.02), (4, 0.04), (8, 0.08), (16, 0.16)])
    assert est.fit.seconds(10) == pytest.approx(0.1)


def test_cold_start_is_the_prior_until_measured_then_boot_plus_the_slowest():
    est = ColdStartEstimator(boot_s=5.0)
    assert est.estimate_s() == COLD_START_PRIOR_S
    est.record(2.0)
    est.record(3.5)
    est.record(1.0)
    assert est.estimate_s() == 8.5
    est.replace([0.5])
    assert est.estimate_s() == 5.5


def test_a_cold_start_seeded_from_a_build_probe_uses_it_not_the_prior():
    est = ColdStartEstimator.known(probe_s=0.4)
    assert est.estimate_s() == build_start_s(0.4) == pytest.approx(
        PROBE_START_FACTOR * 0.4 + PROBE_START_MARGIN_S)
    assert 0.4 < est.estimate_s() < COLD_START_PRIOR_S
    assert est.seeded_from.startswith("build probe")
    est.record(3.0)                                  # a start timed here replaces it
    assert est.estimate_s() == 3.0
    # On Modal the boot (scheduling, restore) is added to the probe's figure as a floor.
    assert ColdStartEstimator.known(probe_s=0.4, boot_s=5.0).estimate_s() == pytest.approx(
        5.0 + build_start_s(0.4))


def test_earlier_starts_count_as_measured_and_the_prior_stays_where_nothing_is_known():
    est = ColdStartEstimator.known(probe_s=0.4, samples=[0.6, 0.9])
    assert est.estimate_s() == 0.9 and est.seeded_from == "earlier starts"
    none = ColdStartEstimator.known()
    assert none.estimate_s() == COLD_START_PRIOR_S and none.seeded_from == "prior"


def test_cold_start_forgets_old_starts():
    est = ColdStartEstimator(samples=2)
    for s in (9.0, 1.0, 2.0):
        est.record(s)
    assert est.estimate_s() == 2.0


def test_a_start_overrunning_the_estimate_is_not_about_to_finish():
    assert start_remaining_s(2.0, 0.5) == 1.5
    assert start_remaining_s(0.7, 1.0) == 1.0
    assert start_remaining_s(0.7, 0.7) > 0
    assert ColdStartEstimator(prior_s=2.0).remaining_s(0.5) == 1.5


def test_arrival_rate_counts_rows_within_the_window():
    rate = ArrivalRate()
    assert rate.rate(0.0) == 0.0
    rate.record(0.0, 10)
    rate.record(1.0, 5)
    assert rate.rate(1.0) == pytest.approx(15 / RATE_WINDOW_S)
    # Exactly window_s old still counts; older does not.
    assert rate.rate(RATE_WINDOW_S) == pytest.approx(15 / RATE_WINDOW_S)
    assert rate.rate(RATE_WINDOW_S + 0.5) == pytest.approx(5 / RATE_WINDOW_S)
    assert rate.rate(100.0) == 0.0


def test_measured_reads_a_full_batch_at_its_concurrency():
    svc = ServiceEstimator(prior=ServiceTime(0.01, 0.02))
    m = measured(ColdStartEstimator(prior_s=3.0), svc, 32)
    assert m == Measured.from_batches(3.0, 0.01 * 32 + 0.02, 32)
    assert m.concurrency == 32


def test_the_warm_policies_default_to_the_same_priors():
    assert Measured().cold_start_s == COLD_START_PRIOR_S
    assert Measured().service_s == SERVICE_PRIOR_S == SERVICE_PRIOR.seconds(1)


def test_batches_with_padded_tokens_fit_three_terms_from_the_text_prior():
    from floodway.core.priors import ROW_TOKENS_PRIOR, TEXT_SERVICE_PRIOR

    est = ServiceEstimator(TEXT_SERVICE_PRIOR, row_tokens_prior=ROW_TOKENS_PRIOR)
    assert est.fit == TEXT_SERVICE_PRIOR and est.row_tokens() == ROW_TOKENS_PRIOR
    line = ServiceTime(per_row_s=0.002, per_batch_s=0.01, per_token_s=0.0001)
    shapes = [(1, 10), (8, 40), (8, 256), (32, 20), (16, 128), (4, 64)]
    for rows, longest in shapes:
        est.record(rows, line.seconds(rows, rows * longest), rows * longest)
    assert est.fit.per_token_s == pytest.approx(1e-4, rel=1e-3)
    assert est.fit.per_row_s == pytest.approx(0.002, rel=1e-2)
    assert est.fit.per_batch_s == pytest.approx(0.01, rel=1e-2)
    rows = sum(r for r, _ in shapes)
    assert est.row_tokens() == pytest.approx(sum(r * t for r, t in shapes) / rows)
    # The warm policies' full batch is costed at the measured row length.
    m = measured(ColdStartEstimator(prior_s=3.0), est, 32)
    assert m == Measured.from_batches(3.0, est.fit.seconds(32, 32 * est.row_tokens()), 32)


def test_batches_without_tokens_fit_rows_as_before():
    est = ServiceEstimator()
    est.extend([(1, 0.012), (8, 0.026), (32, 0.074)])
    assert est.fit.per_token_s == 0 and est.row_tokens() == 0
    assert est.fit.per_row_s == pytest.approx(0.002)
