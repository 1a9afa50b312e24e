"""The local pool's estimates for decide(): how soon a starting container is ready."""

from floodway.runtime.pool import start_remaining_s


def test_a_start_within_the_measured_cold_start_has_the_rest_to_go():
    assert start_remaining_s(2.0, 0.5) == 1.5


def test_an_overdue_start_is_never_counted_as_ready_now():
    # Measured 0.7 s (an idle machine); this start has taken 1.0 s and is still going.
    assert start_remaining_s(0.7, 1.0) == 1.0
    assert start_remaining_s(0.7, 0.7) > 0
