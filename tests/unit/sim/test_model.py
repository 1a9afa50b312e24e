"""Cold-start and service-time models: the priors by default, samples checked."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR
from floodway.routers.decide import ServiceTime
from floodway.sim import ColdStartModel, ServiceModel


def test_without_measurements_the_models_are_the_priors() -> None:
    assert ColdStartModel().samples_s == (COLD_START_PRIOR_S,)
    assert ColdStartModel().estimate_s == COLD_START_PRIOR_S
    assert ServiceModel().fit == SERVICE_PRIOR and ServiceModel().samples_s == ()


def test_the_cold_start_estimate_is_the_slowest_sample() -> None:
    m = ColdStartModel.of([20, 30.5, 25])
    assert m.estimate_s == 30.5
    rng = np.random.default_rng(0)
    assert {m.sample(rng) for _ in range(200)} == {20.0, 30.5, 25.0}
    assert ColdStartModel.of(12).sample(rng) == 12.0
    for bad in ([], [-1.0, 3.0]):
        with pytest.raises(ValueError, match="cold-start samples"):
            ColdStartModel.of(bad)


def test_service_samples_are_told_to_decide_as_their_mean() -> None:
    assert ServiceModel.of(0.04, 0.002).fit == ServiceTime(0.002, 0.04)
    s = ServiceModel.of([0.1, 0.3])
    assert s.fit == ServiceTime(0.0, pytest.approx(0.2)) and s.samples_s == (0.1, 0.3)
    with pytest.raises(ValueError, match="service-time samples"):
        ServiceModel.of([0.1, -0.1])
