"""The router's event-loop lag over a replay, from its ``/metrics`` before and after: the
``floodway_event_loop_lag_seconds`` histogram's samples in between (one per
`floodway.http.looplag.INTERVAL_S` the loop ran), as quantiles (each the upper bound of
the bucket it falls in: the histogram holds no more) and the largest bucket reached.

    lag_between(before_text, after_text) -> Lag | None   (None: no such histogram)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

NAME = "floodway_event_loop_lag_seconds"


@dataclass(frozen=True)
class Lag:
    """`samples` taken between the two scrapes; `p50_s`, `p99_s`: the bucket bounds their
    quantiles fall under; `max_s`: the bound of the highest bucket any sample reached (inf:
    past the last bucket)."""

    samples: int
    p50_s: float
    p99_s: float
    max_s: float


def _buckets(text: str) -> dict[float, float] | None:
    for fam in text_string_to_metric_families(text):
        if fam.name == NAME:
            return {float(s.labels["le"]): s.value for s in fam.samples
                    if s.name == NAME + "_bucket"}
    return None


def lag_between(before: str, after: str) -> Lag | None:
    """The `Lag` of the samples taken between scrape `before` and scrape `after` (the
    Prometheus text of one router's /metrics); None when `after` has no lag histogram."""
    b, a = _buckets(before) or {}, _buckets(after)
    if not a:
        return None
    bounds = sorted(a)
    cum = [a[le] - b.get(le, 0.0) for le in bounds]     # cumulative counts in between
    total = cum[-1]
    if total <= 0:
        return Lag(0, math.nan, math.nan, math.nan)

    def quantile(q: float) -> float:
        return next(le for le, c in zip(bounds, cum, strict=True) if c >= q * total)

    below = [le for le, c, prev in zip(bounds, cum, [0.0, *cum], strict=False) if c > prev]
    return Lag(int(total), quantile(0.5), quantile(0.99), max(below))


__all__ = ["NAME", "Lag", "lag_between"]
