"""Seconds one batch holds a container: the line `decide()` plans with, and its fits.

    ServiceTime(per_row_s, per_batch_s, per_token_s=0.0).seconds(rows, padded_tokens=0)
    ServiceTime.fit([(rows, seconds), ...], prior)                      two terms
    ServiceTime.fit_padded([(rows, padded_tokens, seconds), ...], prior)  three terms

A batch of text costs by its padded tokens (rows x its longest item, as the model sees the
padded batch), each row a little more (tokenizing, pooling, encoding the output), and each
batch a fixed amount (the call, the pipe): ``seconds = per_token_s * padded_tokens +
per_row_s * rows + per_batch_s``. A batch of other items has no tokens (`per_token_s` 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

# `fit_padded`'s pull towards the scaled prior, relative to the samples' own weight: small
# enough that any direction the samples decide follows them (a bias below 1e-4 of the fit),
# large enough to settle a direction they leave open (every batch of one shape; texts all
# of one length, where tokens and rows move together).
RIDGE = 1e-4


@dataclass(frozen=True)
class ServiceTime:
    """Seconds to run one batch of `rows` rows and `padded_tokens` padded tokens:
    ``per_token_s * padded_tokens + per_row_s * rows + per_batch_s`` (all >= 0)."""

    per_row_s: float
    per_batch_s: float
    per_token_s: float = 0.0

    def seconds(self, rows: int, padded_tokens: float = 0) -> float:
        return self.per_token_s * padded_tokens + self.per_row_s * rows + self.per_batch_s

    @classmethod
    def fit(cls, samples: Sequence[tuple[int, float]], prior: ServiceTime) -> ServiceTime:
        """Least-squares fit of (rows, seconds) samples; `prior` where they cannot decide.

        One distinct batch size cannot separate the two costs: all of it is taken as per-row
        cost (a line through the origin), which overestimates larger batches rather than
        underestimating them; a queue estimate that is too low misses deadlines, one that is
        too high only spills a little early, and the batcher soon yields other sizes.
        Coefficients are clamped at zero (a negative cost is noise, not a discount).
        """
        if not samples:
            return prior
        n = len(samples)
        mx = sum(r for r, _ in samples) / n
        my = sum(s for _, s in samples) / n
        sxx = sum((r - mx) ** 2 for r, _ in samples)
        if sxx < 1e-9:
            return cls(my / max(mx, 1e-9), 0.0)
        a = max(0.0, sum((r - mx) * (s - my) for r, s in samples) / sxx)
        b = max(0.0, my - a * mx)
        return cls(a, b)

    @classmethod
    def fit_padded(cls, samples: Sequence[tuple[int, int, float]], prior: ServiceTime
                   ) -> ServiceTime:
        """Non-negative least squares of (rows, padded_tokens, seconds) samples on the three
        terms; `prior` without samples.

        Where the samples cannot decide (one batch shape only; tokens proportional to rows),
        the fit leans on an anchor: the prior's per-token and per-row costs in their
        proportion, scaled to the measured level, with no per-batch cost. One batch shape
        so gives a line through the origin, as `fit` does and for the same reason (it
        overestimates larger batches rather than underestimating them), and texts of one
        length split their per-row cost between tokens and rows as the prior does. It
        minimizes ``sum (seconds - line)^2 + RIDGE * n * sum_j (s_j * (coef_j -
        anchor_j))^2``, with s_j each term's mean regressor (tokens, rows, 1), over
        coefficients >= 0. Exact: the minimum over the orthant is the least of the
        unconstrained minima on its faces that are feasible (eight 3x3 systems at most;
        microseconds for the estimator's 64 samples).
        """
        if not samples:
            return prior
        n = len(samples)
        xs = [(float(t), float(r), 1.0) for r, t, _ in samples]
        ys = [float(s) for _, _, s in samples]
        p = (prior.per_token_s, prior.per_row_s, 0.0)
        if p == (0.0, 0.0, 0.0):
            p = (0.0, 1.0, 0.0)   # a prior of fixed cost only: growing with rows
        pred = [sum(pj * xj for pj, xj in zip(p, x, strict=True)) for x in xs]
        pp = sum(v * v for v in pred)
        k = sum(v * y for v, y in zip(pred, ys, strict=True)) / pp if pp > 0 else 0.0
        anchor = tuple(max(0.0, k) * pj for pj in p)
        scale = [max(sum(x[j] for x in xs) / n, 1e-12) for j in range(3)]
        w = [RIDGE * n * s * s for s in scale]
        sxx = [[sum(x[i] * x[j] for x in xs) + (w[i] if i == j else 0.0) for j in range(3)]
               for i in range(3)]
        sxy = [sum(x[i] * y for x, y in zip(xs, ys, strict=True)) + w[i] * anchor[i]
               for i in range(3)]
        best, best_j = (0.0, 0.0, 0.0), _objective((0.0, 0.0, 0.0), sxx, sxy)
        for size in (1, 2, 3):
            for free in itertools.combinations(range(3), size):
                sol = _solve([[sxx[i][j] for j in free] for i in free], [sxy[i] for i in free])
                if sol is None or min(sol) < 0:
                    continue
                theta = [0.0, 0.0, 0.0]
                for i, v in zip(free, sol, strict=True):
                    theta[i] = v
                j = _objective(theta, sxx, sxy)
                if j < best_j:
                    best, best_j = (theta[0], theta[1], theta[2]), j
        return cls(per_row_s=best[1], per_batch_s=best[2], per_token_s=best[0])


def _objective(theta: Sequence[float], sxx: list[list[float]], sxy: list[float]) -> float:
    """The fit's objective up to a constant: theta' Sxx theta - 2 theta' Sxy."""
    quad = sum(theta[i] * sxx[i][j] * theta[j] for i in range(3) for j in range(3))
    return quad - 2.0 * sum(t * s for t, s in zip(theta, sxy, strict=True))


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x with a x = b (Gaussian elimination, partial pivoting); None when `a` is singular."""
    m = len(b)
    rows = [list(a[i]) + [b[i]] for i in range(m)]
    for col in range(m):
        piv = max(range(col, m), key=lambda r: abs(rows[r][col]))
        if abs(rows[piv][col]) < 1e-300:
            return None
        rows[col], rows[piv] = rows[piv], rows[col]
        for r in range(col + 1, m):
            f = rows[r][col] / rows[col][col]
            for c in range(col, m + 1):
                rows[r][c] -= f * rows[col][c]
    x = [0.0] * m
    for r in range(m - 1, -1, -1):
        x[r] = (rows[r][m] - sum(rows[r][c] * x[c] for c in range(r + 1, m))) / rows[r][r]
    return x


__all__ = ["RIDGE", "ServiceTime"]
