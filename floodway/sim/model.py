"""What the simulator assumes about an endpoint's containers, from measurements:
`ColdStartModel` (sampled cold starts; the router's estimate is the slowest) and
`ServiceModel` (the router's linear fit, samples, or batch times by size from a
``floodway bench`` run's ``batch_times.json``); without measurements, the priors of
`floodway.core.priors`. docs/design/simulator.md ("Cold start and service time").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from floodway.core.priors import COLD_START_PRIOR_S, SERVICE_PRIOR
from floodway.errors import FloodwayError
from floodway.routers.decide import ServiceTime

# The window (seconds) over which the load term counts arrivals, in the bench's fit and at
# a simulated batch's start (`floodway.bench.contention`).
LOAD_WINDOW_S = 1.0

# The least share of a core a busy container gets, in cores / (busy + this): the fair share
# when the router and the client each keep a core busy (each is one Python process).
OTHER_PROCESSES = 2

# The format `floodway bench` writes its measured batch times in (floodway.bench.batches).
BATCH_TIMES_FORMAT = "floodway.bench.batches/1"


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
class CpuShare:
    """The load term: the router and the client share the machine's `cores` with the
    containers and take ``other_cores + other_per_request_s * a`` of them while `a`
    requests/s arrive (cores, and CPU seconds per request); a batch's container gets
    `share` of a core, and its time is multiplied by ``at_rest / share``
    (`floodway.bench.contention` fits it from a bench run). `cores` 0: no load term.
    Raises ValueError on a negative value or `at_rest` not > 0."""

    cores: float = 0.0
    other_cores: float = 0.0
    other_per_request_s: float = 0.0
    at_rest: float = 1.0

    def __post_init__(self) -> None:
        vals = (self.cores, self.other_cores, self.other_per_request_s)
        if not all(0 <= float(v) < math.inf for v in vals) or \
                not 0 < float(self.at_rest) < math.inf:
            raise ValueError(f"load needs cores, other_cores and other_per_request_s >= 0 "
                             f"and at_rest > 0, got {self!r}")

    @property
    def active(self) -> bool:
        return self.cores > 0

    def share(self, other_cores: float, busy: int) -> float:
        """Of a core, what each of `busy` containers gets while the router and the client
        take `other_cores`: the rest split evenly, at most 1, at least the fair share of
        ``cores / (busy + OTHER_PROCESSES)``."""
        busy = max(busy, 1)
        return min(1.0, max((self.cores - other_cores) / busy,
                            self.cores / (busy + OTHER_PROCESSES)))

    def factor(self, arrivals_per_s: float, busy: int) -> float:
        """A batch's time multiplier while `arrivals_per_s` requests/s arrive and `busy`
        containers (its own included) run; 1.0 without a load term."""
        if not self.active:
            return 1.0
        other = self.other_cores + self.other_per_request_s * arrivals_per_s
        return self.at_rest / self.share(other, busy)


@dataclass(frozen=True)
class ServiceModel:
    """Seconds per batch: `fit.seconds(rows, padded_tokens)`, or a random draw of
    `samples_s` (then independent of the rows) when given, or, for a batch of a size in
    `by_rows` ((rows, seconds) pairs, measured), that size's seconds (the fit for other
    sizes; used only while the fit has no per-token term, which then explains the spread).
    Default: the prior, `SERVICE_PRIOR`.

    `contention`: factors a batch's time is multiplied by, the k-th for k containers busy
    when it starts (its own included), the last for more; empty: none (the measured
    ``contention`` of ``batch_times.json``, `floodway.bench.contention`).
    `load`: the load term (`CpuShare`), a batch's time also multiplied by its `factor` for
    the requests/s arriving in the `LOAD_WINDOW_S` before it starts (the router and the
    client share the cores: ``load`` of ``batch_times.json``); the default: none.

    `follow_batches`: 0, the simulated router plans with `fit` throughout; n > 0, it starts
    from `fit` and re-fits on the last n simulated batches' times, as the runtime's router
    does (`floodway.core.estimators.ServiceEstimator`, `SERVICE_SAMPLES`); the batches
    themselves still run `fit`'s times. Raises ValueError on a negative sample or time, a
    factor not > 0 or a negative `follow_batches`."""

    fit: ServiceTime = SERVICE_PRIOR
    samples_s: tuple[float, ...] = ()
    by_rows: tuple[tuple[int, float], ...] = ()
    contention: tuple[float, ...] = ()
    follow_batches: int = 0
    load: CpuShare = CpuShare()

    def __post_init__(self) -> None:
        s = tuple(float(x) for x in self.samples_s)
        if s and min(s) < 0:
            raise ValueError("service-time samples must be >= 0")
        object.__setattr__(self, "samples_s", s)
        if s:
            object.__setattr__(self, "fit", ServiceTime(0.0, float(np.mean(s))))
        by = tuple(sorted((int(r), float(x)) for r, x in self.by_rows))
        if any(r < 1 or not x >= 0 for r, x in by):
            raise ValueError(f"batch times by rows need rows >= 1 and seconds >= 0, got {by!r}")
        object.__setattr__(self, "by_rows", by)
        c = tuple(float(x) for x in self.contention)
        if any(not 0 < x < math.inf for x in c):
            raise ValueError(f"contention factors must be > 0, got {c!r}")
        object.__setattr__(self, "contention", c)
        if self.follow_batches < 0:
            raise ValueError(f"follow_batches must be >= 0, got {self.follow_batches}")
        object.__setattr__(self, "_by", dict(by) if self.fit.per_token_s == 0 else {})

    @property
    def sized(self) -> bool:
        """Whether some batch sizes run their measured time rather than the fit's."""
        return bool(self._by)  # type: ignore[attr-defined]

    @property
    def plain(self) -> bool:
        """Whether every batch runs its fitted (or sampled) time, planned with that fit: no
        size measured apart, no contention factor and no estimate following the batches
        (what the simulator's exact fast path assumes)."""
        return not self.sized and not self.contention and not self.follow_batches and \
            not self.load.active

    def factor(self, busy: int) -> float:
        """The contention factor of a batch starting while `busy` containers are busy
        (its own included; 1.0 without contention factors)."""
        c = self.contention
        return c[min(max(busy, 1), len(c)) - 1] if c else 1.0

    def batch_s(self, rows: int, est_s: float) -> float:
        """Seconds a batch of `rows` rows runs whose fitted time is `est_s` (not sampled)."""
        return self._by.get(rows, est_s)  # type: ignore[attr-defined]

    @classmethod
    def of(cls, seconds: float | Sequence[float], per_row_s: float = 0.0) -> ServiceModel:
        """A fixed batch time (plus `per_row_s` per row) or samples of batch times."""
        if isinstance(seconds, (int, float)):
            return cls(ServiceTime(per_row_s, float(seconds)))
        return cls(samples_s=tuple(seconds))

    @classmethod
    def from_batch_times(cls, doc: Mapping, where: str = "batch times") -> ServiceModel:
        """The model a ``floodway bench`` run measured (its ``batch_times.json``, format
        `BATCH_TIMES_FORMAT`): the fit (``per_batch_s``, ``per_row_s`` and, where present,
        ``per_token_s``, seconds), the mean time of each batch size in ``by_rows`` and,
        where present, the ``contention`` factors by busy containers (`contention_of`)
        and the ``load`` term (`CpuShare`'s fields; a ``load`` without ``cores``, as
        documents before it wrote, is none).
        Raises FloodwayError naming `where` and the field when the document is not one."""
        if not isinstance(doc, Mapping) or doc.get("format") != BATCH_TIMES_FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise FloodwayError(f"{where}: format must be {BATCH_TIMES_FORMAT!r} (written by "
                                f"floodway bench), got {got!r}")
        fit = doc.get("fit")
        if not isinstance(fit, Mapping):
            raise FloodwayError(f"{where}: fit: no fitted batch time (got {fit!r})")
        try:
            terms = [float(fit.get(k, 0.0)) for k in ("per_row_s", "per_batch_s", "per_token_s")]
            by = tuple((int(b["rows"]), float(b["mean_s"])) for b in doc.get("by_rows") or ())
        except (TypeError, ValueError, KeyError) as e:
            raise FloodwayError(f"{where}: fit / by_rows: not numbers ({e})") from None
        if not all(0 <= x < 3600 for x in terms):
            raise FloodwayError(f"{where}: fit: each term must be in 0..3600 s, got {terms}")
        con = contention_of(doc.get("contention"), where)
        ld = doc.get("load") or {}
        try:
            load = CpuShare() if "cores" not in ld else CpuShare(
                float(ld["cores"]), float(ld.get("other_cores", 0.0)),
                float(ld.get("other_per_request_s", 0.0)), float(ld.get("at_rest", 1.0)))
            return cls(ServiceTime(*terms), by_rows=by, contention=con, load=load)
        except (AttributeError, TypeError, ValueError) as e:
            raise FloodwayError(f"{where}: by_rows / contention / load: {e}") from None

    @classmethod
    def read_batch_times(cls, path: str | Path) -> ServiceModel:
        """`from_batch_times` of a JSON file; FloodwayError when it cannot be read."""
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise FloodwayError(f"--batch-times {p}: cannot read it as JSON ({e})") from None
        return cls.from_batch_times(doc, f"--batch-times {p}")


def contention_of(doc: object, where: str = "batch times") -> tuple[float, ...]:
    """`ServiceModel.contention` from ``batch_times.json``'s ``contention`` field
    (`floodway.bench.contention`): the k-th factor for k busy containers, k = 1 .. the
    largest count measured; a count not measured takes the nearest measured below it (the
    smallest measured for counts below all). () when the field is absent or null. Raises
    FloodwayError naming `where` when it is not a list of (busy >= 1, factor > 0)."""
    if doc is None:
        return ()
    try:
        got = {int(c["busy"]): float(c["factor"]) for c in doc["by_busy"]}  # type: ignore[index]
    except (TypeError, ValueError, KeyError) as e:
        raise FloodwayError(f"{where}: contention.by_busy: not a list of busy counts and "
                            f"factors ({e!r})") from None
    if not got:
        return ()
    if min(got) < 1 or not all(0 < x < math.inf for x in got.values()):
        raise FloodwayError(f"{where}: contention.by_busy: busy must be >= 1 and factor > 0, "
                            f"got {got!r}")
    out, last = [], got[min(got)]
    for k in range(1, max(got) + 1):
        last = got.get(k, last)
        out.append(last)
    return tuple(out)


__all__ = ["BATCH_TIMES_FORMAT", "LOAD_WINDOW_S", "ColdStartModel", "CpuShare", "ServiceModel",
           "contention_of"]
