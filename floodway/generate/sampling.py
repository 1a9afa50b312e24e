"""Choosing the next token from a sequence's scores: greedy, or sampled with temperature and
top-p (nucleus sampling: Holtzman et al. 2019, "The Curious Case of Neural Text
Degeneration"), from a numpy Generator of the sequence's own, so that the same seed gives
the same tokens whether the sequence ran alone or batched with others.
"""

from __future__ import annotations

import numpy as np

# Below this temperature a sequence is decoded greedily. Dividing scores by a temperature
# near the smallest float overflows to inf (and inf - inf is NaN); well before that, at
# 1e-5, a gap of 0.001 between the two best scores already gives the runner-up a
# probability of exp(-100), about 4e-44: sampling is greedy decoding in all but name.
MIN_TEMPERATURE = 1e-5


class Sampler:
    """`temperature` 0 (or below `MIN_TEMPERATURE`): the highest score (argmax, the lowest
    id on a tie, as `transformers`' greedy search does); else softmax(scores /
    temperature), cut to the smallest set of most likely tokens whose probability reaches
    `top_p` (the one that crosses it included), renormalized, and drawn with one uniform
    number from `numpy.random.default_rng(seed)` (seed None: fresh OS entropy)."""

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None):
        if not 0.0 <= temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {temperature!r}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.temperature < MIN_TEMPERATURE

    def __call__(self, scores: np.ndarray) -> int:
        """The next token id from `scores` (vocab,), float."""
        if self.greedy:
            return int(np.argmax(scores))
        return int(sample(scores, self.temperature, self.top_p, self.rng.random()))


def probabilities(scores: np.ndarray, temperature: float, top_p: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, their probabilities) kept by temperature and top-p, most likely first;
    the probabilities sum to 1. Computed in float64."""
    z = scores.astype(np.float64)
    # The max subtracted before scaling: every z is then <= 0 and the largest exactly 0,
    # so a small temperature gives -inf at worst (probability 0), never inf - inf = NaN.
    z = (z - z.max()) / max(temperature, MIN_TEMPERATURE)
    p = np.exp(z)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")     # ties: the lower id first, deterministically
    ranked = p[order]
    if top_p < 1.0:
        before = np.cumsum(ranked) - ranked    # the mass of the tokens ranked above each
        keep = max(1, int(np.count_nonzero(before < top_p)))
        order, ranked = order[:keep], ranked[:keep]
    return order, ranked / ranked.sum()


def sample(scores: np.ndarray, temperature: float, top_p: float, u: float) -> int:
    """The token drawn by the uniform number `u` in [0, 1) (inverse transform sampling)."""
    ids, p = probabilities(scores, temperature, top_p)
    i = int(np.searchsorted(np.cumsum(p), u, side="right"))
    return int(ids[min(i, len(ids) - 1)])


__all__ = ["MIN_TEMPERATURE", "Sampler", "probabilities", "sample"]
