"""SimResult: decision codes follow `Action`, and per-minute coverage of intervals."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.routers.decide import Action
from floodway.sim import ACTIONS, CODES
from floodway.sim.result import coverage_per_minute


def test_decision_codes_are_positions_in_action() -> None:
    assert ACTIONS == tuple(Action)
    assert [CODES[a] for a in Action] == list(range(len(Action)))
    assert CODES[Action.DISPATCH] == 0          # what bulk segments write for a dispatch


def test_coverage_per_minute() -> None:
    cov = coverage_per_minute(np.array([30.0, 100.0]), np.array([90.0, 110.0]), 0, 3)
    assert cov.tolist() == pytest.approx([30.0, 40.0, 0.0])
