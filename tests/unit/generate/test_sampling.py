"""Greedy, temperature and top-p choices of the next token."""

from __future__ import annotations

import numpy as np
import pytest

from floodway.generate.sampling import Sampler, probabilities, sample

SCORES = np.log(np.array([0.1, 0.5, 0.25, 0.15]))


def test_greedy_takes_the_highest_score_and_the_lowest_id_on_a_tie():
    assert Sampler()(SCORES) == 1
    assert Sampler()(np.array([0.0, 2.0, 2.0])) == 1


def test_top_p_keeps_the_smallest_most_likely_set_reaching_it():
    ids, p = probabilities(SCORES, 1.0, 0.7)
    assert ids.tolist() == [1, 2] and np.allclose(p, [0.5 / 0.75, 0.25 / 0.75])
    ids, _ = probabilities(SCORES, 1.0, 0.75)       # reached exactly by two
    assert ids.tolist() == [1, 2]
    ids, _ = probabilities(SCORES, 1.0, 0.01)       # always at least one
    assert ids.tolist() == [1]
    ids, p = probabilities(SCORES, 1.0, 1.0)
    assert ids.tolist() == [1, 2, 3, 0] and np.isclose(p.sum(), 1.0)


def test_temperature_sharpens_or_flattens():
    _, cold = probabilities(SCORES, 0.25, 1.0)
    _, hot = probabilities(SCORES, 2.0, 1.0)
    assert cold[0] > 0.5 > hot[0]


def test_inverse_transform_picks_by_cumulative_probability():
    assert [sample(SCORES, 1.0, 1.0, u) for u in (0.0, 0.49, 0.51, 0.76, 0.91)] == \
        [1, 1, 2, 3, 0]


def test_the_same_seed_draws_the_same_tokens_and_frequencies_follow_p():
    a = [Sampler(1.0, 1.0, seed=5)(SCORES) for _ in range(1)]
    s1, s2 = Sampler(1.0, 1.0, seed=5), Sampler(1.0, 1.0, seed=5)
    draws1 = [s1(SCORES) for _ in range(4000)]
    assert draws1 == [s2(SCORES) for _ in range(4000)] and a[0] == draws1[0]
    freq = np.bincount(draws1, minlength=4) / 4000
    assert np.allclose(freq, [0.1, 0.5, 0.25, 0.15], atol=0.03)
    s3 = Sampler(1.0, 1.0, seed=6)
    assert [s3(SCORES) for _ in range(50)] != draws1[:50]


@pytest.mark.parametrize("kw", [{"temperature": -0.1}, {"temperature": 2.5}, {"top_p": 0.0},
                                {"top_p": 1.5}])
def test_out_of_range_settings_are_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        Sampler(**kw)


@pytest.mark.parametrize("temperature", [1e-308, 5e-324, 2.2250738585072014e-308, 1e-45, 1e-6])
def test_a_tiny_temperature_is_greedy_never_nan(temperature):
    scores = np.array([3.0, 40.0, 39.999, -2.0], dtype=np.float32)
    s = Sampler(temperature, 0.9, seed=7)
    assert s.greedy
    assert [s(scores) for _ in range(5)] == [1] * 5
    ids, p = probabilities(scores, temperature, 1.0)   # also when asked directly
    assert not np.isnan(p).any() and ids[0] == 1 and p[0] == pytest.approx(1.0)


def test_large_scores_at_a_small_temperature_above_the_floor_stay_finite():
    scores = np.array([1e30, 1e30 - 1e15, 0.0])
    ids, p = probabilities(scores, 1e-3, 1.0)
    assert np.isfinite(p).all() and ids[0] == 0 and p.sum() == pytest.approx(1.0)
    assert not Sampler(1e-3).greedy
