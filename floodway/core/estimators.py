"""Estimators: what was measured of an endpoint, turned into the numbers `decide()` and the
warm-pool policies read. One set, used by the local pool, the Modal router and warmers, and
the simulator; each starts from a prior (`floodway.core.priors`) until it has samples.

    service = ServiceEstimator()          # (rows, seconds[, padded tokens]) per batch
                                          #   -> ServiceTime
    cold = ColdStartEstimator()           # seconds per container start -> estimate_s
    cold = ColdStartEstimator.known(probe_s=..., samples=...)   # seeded from a build
    rate = ArrivalRate()                  # (time, rows) per admitted request -> rows/s
    measured(cold, service, max_batch_rows) -> Measured   (for `desired()`)

All times are seconds on the caller's clock (monotonic or simulated); none reads a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from floodway.core.priors import (
    COLD_START_PRIOR_S,
    PROBE_START_FACTOR,
    PROBE_START_MARGIN_S,
    SERVICE_PRIOR,
)
from floodway.routers.decide import ServiceTime
from floodway.warmers.target import Measured

# Batches kept for the service-time fit: enough to separate the per-row and per-batch cost
# over a few batch sizes, few enough that the fit follows a change (a new build, a loaded
# machine) within seconds of traffic.
SERVICE_SAMPLES = 64
# Container starts kept: the estimate is the slowest of these (a plan that counts on a
# start being quick misses deadlines when it is not).
COLD_SAMPLES = 8
# The arrival rate is the rows admitted over the last RATE_WINDOW_S seconds: long enough to
# smooth a burst's first requests, short enough to follow it (the batcher's fill estimate).
RATE_WINDOW_S = 5.0


def start_remaining_s(measured_s: float, elapsed_s: float) -> float:
    """Seconds until a container that has been starting for `elapsed_s` is ready, when cold
    starts measured `measured_s`. A start that has overrun the measurement (a loaded machine
    starts slower) is not about to finish: it is assumed to need as long again as it has
    taken, never zero, so that work is not queued for capacity that is not there."""
    return measured_s - elapsed_s if elapsed_s < measured_s else elapsed_s


def build_start_s(probe_s: float) -> float:
    """A container's cold start as the build's cold-start probe implies it, before any start
    was timed: `PROBE_START_FACTOR` x `probe_s` + `PROBE_START_MARGIN_S` (why those:
    `floodway.core.priors`)."""
    return PROBE_START_FACTOR * max(0.0, probe_s) + PROBE_START_MARGIN_S


class ServiceEstimator:
    """Seconds per batch as a linear fit of measured batches, `prior` until the first
    sample: of (rows, seconds) (`ServiceTime.fit`, least squares), or, once batches come
    with their padded tokens (rows x the longest input's estimated tokens: an endpoint
    taking text), of (rows, padded tokens, seconds) on three terms
    (`ServiceTime.fit_padded`). The fit is recomputed on each `record` (at most
    `SERVICE_SAMPLES` points: microseconds).

    `row_tokens_prior`: padded tokens per row before any batch with tokens was measured
    (what `row_tokens()` says until then)."""

    def __init__(self, prior: ServiceTime = SERVICE_PRIOR, samples: int = SERVICE_SAMPLES,
                 *, row_tokens_prior: float = 0.0):
        self.prior, self.row_tokens_prior = prior, row_tokens_prior
        self.samples: deque[tuple[int, float]] = deque(maxlen=samples)
        self.tokens: deque[int] = deque(maxlen=samples)   # padded tokens, as `samples`
        self.fit: ServiceTime = prior

    def _add(self, rows: int, seconds: float, padded_tokens: int) -> None:
        self.samples.append((int(rows), float(seconds)))
        self.tokens.append(max(0, int(padded_tokens)))

    def _refit(self) -> None:
        if any(self.tokens):
            self.fit = ServiceTime.fit_padded(
                [(r, t, s) for (r, s), t in zip(self.samples, self.tokens, strict=True)],
                self.prior)
        else:
            self.fit = ServiceTime.fit(list(self.samples), self.prior)

    def record(self, rows: int, seconds: float, padded_tokens: int = 0) -> None:
        """One batch of `rows` rows took `seconds`; `padded_tokens`: its padded tokens
        (0: not known, a batch of items that are not text)."""
        self._add(rows, seconds, padded_tokens)
        self._refit()

    def extend(self, samples: Iterable[tuple[int, float] | tuple[int, float, int]]) -> None:
        """`record` each of (rows, seconds) or (rows, seconds, padded_tokens)."""
        for rows, seconds, *tokens in samples:
            self._add(rows, seconds, tokens[0] if tokens else 0)
        self._refit()

    def row_tokens(self) -> float:
        """Mean padded tokens per row of the batches measured with tokens (the length of a
        row whose own is not known), `row_tokens_prior` before any."""
        rows = sum(r for (r, _), t in zip(self.samples, self.tokens, strict=True) if t)
        return sum(self.tokens) / rows if rows else self.row_tokens_prior


class ColdStartEstimator:
    """Seconds from asking for a container to its first ready answer: `boot_s` plus the
    slowest of the last `COLD_SAMPLES` measured starts, or `prior` without any.

    `boot_s` is what the measurement cannot see: on Modal, scheduling and the snapshot
    restore before the container's own start hooks run (0 locally: the router times the
    whole process start)."""

    def __init__(self, prior_s: float = COLD_START_PRIOR_S, *, boot_s: float = 0.0,
                 samples: int = COLD_SAMPLES):
        self.prior_s, self.boot_s = prior_s, boot_s
        self.samples: deque[float] = deque(maxlen=samples)
        self.seeded_from = "prior"      # what `prior_s` and the first samples came from

    @classmethod
    def known(cls, *, probe_s: float | None = None, samples: Iterable[float] = (),
              boot_s: float = 0.0, keep: int = COLD_SAMPLES) -> ColdStartEstimator:
        """Seeded with what is known before this router timed a start: `samples`, starts
        measured earlier of the same build (they count as measured ones), and, without
        them, the build's cold-start probe (`build_start_s(probe_s)` + `boot_s`); the prior
        `COLD_START_PRIOR_S` only where neither is known."""
        prior = COLD_START_PRIOR_S if probe_s is None else boot_s + build_start_s(probe_s)
        est = cls(prior, boot_s=boot_s, samples=keep)
        est.replace(samples)
        est.seeded_from = ("earlier starts" if est.samples else
                           "prior" if probe_s is None else f"build probe {probe_s:.2f}s")
        return est

    def record(self, seconds: float) -> None:
        self.samples.append(float(seconds))

    def replace(self, samples: Iterable[float]) -> None:
        """Take these samples instead (a store read back, e.g. the Modal stats Dict)."""
        self.samples.clear()
        self.samples.extend(float(s) for s in samples)

    def estimate_s(self) -> float:
        return self.boot_s + max(self.samples) if self.samples else self.prior_s

    def remaining_s(self, elapsed_s: float) -> float:
        """Seconds until a start running for `elapsed_s` is ready (`start_remaining_s`)."""
        return start_remaining_s(self.estimate_s(), elapsed_s)


class ArrivalRate:
    """Rows admitted per second over the last `window_s` seconds: the arrivals recorded at
    times t with ``now - window_s <= t``, summed and divided by `window_s`. Record each
    admitted request (those that `decide()` dispatched, queued or spilled to a cold
    container) before its successor is decided; `rate` forgets what fell out of the window."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self._arrivals: deque[tuple[float, int]] = deque()
        self._rows = 0

    def record(self, now_s: float, rows: int) -> None:
        self._arrivals.append((now_s, rows))
        self._rows += rows

    def rate(self, now_s: float) -> float:
        arrivals, cut = self._arrivals, now_s - self.window_s
        while arrivals and arrivals[0][0] < cut:
            self._rows -= arrivals.popleft()[1]
        return self._rows / self.window_s


def measured(cold: ColdStartEstimator, service: ServiceEstimator, max_batch_rows: int,
             rows_per_request: float = 1.0) -> Measured:
    """What the warm-pool policies read (`desired(..., measured)`): the cold-start estimate
    and one full batch's fitted time at its concurrency (`Measured.from_batches`), its rows
    at the measured mean row length (`ServiceEstimator.row_tokens`)."""
    batch_s = service.fit.seconds(max_batch_rows, max_batch_rows * service.row_tokens())
    return Measured.from_batches(cold.estimate_s(), batch_s, max_batch_rows,
                                 rows_per_request)


__all__ = ["RATE_WINDOW_S", "ArrivalRate", "ColdStartEstimator", "ServiceEstimator",
           "build_start_s", "measured", "start_remaining_s"]
