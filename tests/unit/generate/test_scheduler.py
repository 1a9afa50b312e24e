"""Admission between steps: first come first served, under the sequence count and the
cache reservation budget."""

from __future__ import annotations

import pytest

from floodway.generate.scheduler import Limits, admit, fits_ever


def test_admits_from_the_head_while_count_and_budget_allow():
    lim = Limits(max_sequences=3, kv_capacity_tokens=100)
    assert admit([30, 30, 30, 30], running=0, reserved_tokens=0, limits=lim) == 3
    assert admit([30, 30], running=2, reserved_tokens=40, limits=lim) == 1
    assert admit([30], running=3, reserved_tokens=0, limits=lim) == 0
    assert admit([], running=0, reserved_tokens=0, limits=lim) == 0


def test_the_budget_stops_at_the_first_that_does_not_fit_nothing_overtakes_it():
    lim = Limits(max_sequences=8, kv_capacity_tokens=100)
    assert admit([50, 60, 10], running=1, reserved_tokens=20, limits=lim) == 1
    assert admit([90, 10], running=1, reserved_tokens=20, limits=lim) == 0
    assert admit([80], running=1, reserved_tokens=20, limits=lim) == 1   # exactly full


def test_fits_ever_and_limits_are_checked():
    lim = Limits(2, 64)
    assert fits_ever(64, lim) and not fits_ever(65, lim)
    with pytest.raises(ValueError):
        Limits(0, 10)
