"""Warm pools sized from tokens/s (`Measured.from_tokens`): a request costs its generated
tokens against a container's decode rate at max_sequences."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.config import WarmPool
from floodway.warmers.target import History, Measured, desired


def test_from_tokens_is_littles_law_in_tokens():
    m = Measured.from_tokens(3.0, tokens_per_s=200.0, max_sequences=8, tokens_per_request=50,
                             prefill_s=0.05)
    # A request holds a container 50 / 200 + 0.05 = 0.3 s of its time: 8 slots x 0.3 s.
    assert m.cold_start_s == 3.0 and m.concurrency == 8
    assert m.service_s == pytest.approx(8 * 0.3)
    with pytest.raises(ValueError, match="max_sequences"):
        Measured.from_tokens(3.0, 200.0, 0, 50)


def _warm_target(tokens_per_request: float, tokens_per_s: float) -> int:
    counts = np.zeros(10, dtype=np.int64)
    counts[-1] = 600                                   # 10 requests/s in the last minute
    m = Measured.from_tokens(10.0, tokens_per_s, 8, tokens_per_request)
    target, _ = desired(9.5 * 60, History.from_counts(counts), WarmPool(predictive=True), m)
    return target.min_containers


def test_a_higher_token_rate_asks_for_more_warm_containers():
    # 10 requests/s x 50 tokens = 500 tokens/s over 200 tokens/s per container: 3.
    assert _warm_target(50, 200.0) == 3
    assert _warm_target(200, 200.0) == 10               # 2,000 tokens/s
    assert _warm_target(200, 400.0) == 5                # faster containers: fewer
    assert _warm_target(200, 400.0) < _warm_target(400, 400.0)


