"""What the simulator assumes about an endpoint's containers: cold start and service time.

Both come from measurements, not constants baked into the engine:

- `ColdStartModel`: seconds from asking for a container to its being ready, sampled from a
  list of measured cold starts (e.g. the cold-start benchmark's or ``floodway serve``'s
  recorded starts) with the simulation's seeded numpy Generator. The router's estimate
  (`estimate_s`, what `decide()` is told) is the slowest sample, as the router's estimator
  uses the slowest recorded start (`floodway.core.estimators.ColdStartEstimator`).
- `ServiceModel`: seconds one batch of `rows` rows runs, either the router's linear fit
  (`floodway.routers.decide.ServiceTime`) or per-batch samples. `decide()` is always told the
  linear fit (with samples: per_batch_s = their mean), as the router only knows a fit.

Without measurements both default to the priors every runtime starts from
(`floodway.core.priors`: a 30 s cold start; 20 ms + 5 ms per row per batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR
from floodway.routers.decide import ServiceTime


@dataclass(frozen=True)
class ColdStartModel:
    """Measured cold starts in seconds (one or more samples, each >= 0; default the prior).
    Raises ValueError on no sample or a negative one."""

    samples_s: tuple[float, ...] = (COLD_START_PRIOR_S,)

    def __post_init__(self) -> None:
        s = tuple(float(x) for x in self.samples_s)
        if not s or min(s) < 0:
            raise ValueError(f"cold-start samples must be >= 0 and at least one, got {s!r}")
        object.__setattr__(self, "samples_s", s)

    @classmethod
    def of(cls, samples_s: float | Sequence[float]) -> ColdStartModel:
        return cls((float(samples_s),) if isinstance(samples_s, (int, float))
                   else tuple(samples_s))

    @property
    def estimate_s(self) -> float:
        """What the router predicts: the slowest measured start."""
        return max(self.samples_s)

    def sample(self, rng: np.random.Generator) -> float:
        s = self.samples_s
        return s[0] if len(s) == 1 else s[int(rng.integers(len(s)))]


@dataclass(frozen=True)
class ServiceModel:
    """Seconds per batch: `fit.seconds(rows)`, or a random draw of `samples_s` (then
    independent of the rows) when given. Default: the prior, `SERVICE_PRIOR`. Raises
    ValueError on a negative sample."""

    fit: ServiceTime = SERVICE_PRIOR
    samples_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        s = tuple(float(x) for x in self.samples_s)
        if s and min(s) < 0:
            raise ValueError("service-time samples must be >= 0")
        object.__setattr__(self, "samples_s", s)
        if s:
            object.__setattr__(self, "fit", ServiceTime(0.0, float(np.mean(s))))

    @classmethod
    def of(cls, seconds: float | Sequence[float], per_row_s: float = 0.0) -> ServiceModel:
        """A fixed batch time (plus `per_row_s` per row) or samples of batch times."""
        if isinstance(seconds, (int, float)):
            return cls(ServiceTime(per_row_s, float(seconds)))
        return cls(samples_s=tuple(seconds))


__all__ = ["ColdStartModel", "ServiceModel"]
