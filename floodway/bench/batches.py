"""Batch times measured during a bench run, read from the router's ``GET /metrics``, for
`floodway simulate` to use later.

The router exports two histograms per endpoint, ``floodway_batch_rows`` (rows per batch)
and ``floodway_batch_seconds`` (compute seconds per batch); they give totals, not each
batch. Sampled every `INTERVAL_S` during the replay, the difference between two samples
is one interval's totals: its batches, rows and seconds. An interval with exactly one
batch gives that batch's rows and seconds exactly; every interval's totals fit
``seconds = per_batch_s * batches + per_row_s * rows`` (least squares, unbiased on
totals because batch time is taken to be linear in rows).

The JSON written (`batch_times`, format ``floodway.bench.batches/1``):

    {"format": "floodway.bench.batches/1", "endpoint": "embed",
     "source": "GET /metrics ... every 0.25 s",
     "batches":   [{"rows": 12, "seconds": 0.081}, ...],      # exact, one per lone batch
     "by_rows":   [{"rows": 12, "batches": 4, "mean_s": 0.08, "p50_s": 0.08,
                    "max_s": 0.09}, ...],                       # "batches" grouped by rows
     "intervals": [{"t_s": 1.25, "batches": 3, "rows": 40, "seconds": 0.31}, ...],
     "fit": {"per_batch_s": 0.021, "per_row_s": 0.0049, "intervals": 57} | null}

A router that does not see its batches (on Modal the containers run them out of its
sight) shows no batches; then there is nothing to write (`batch_times` returns None).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np

INTERVAL_S = 0.25
FORMAT = "floodway.bench.batches/1"
_NAMES = ("floodway_batch_rows", "floodway_batch_seconds")


def batch_totals(metrics_text: str, endpoint: str) -> tuple[float, float, float] | None:
    """(batches, rows, seconds) so far for `endpoint` from a Prometheus text exposition;
    None when it has no batch histograms for that endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name not in _NAMES:
            continue
        for s in fam.samples:
            if s.labels.get("endpoint") == endpoint and s.name.endswith(("_count", "_sum")):
                found[s.name] = s.value
    keys = ("floodway_batch_rows_count", "floodway_batch_rows_sum",
            "floodway_batch_seconds_sum")
    if not all(k in found for k in keys):
        return None
    return found[keys[0]], found[keys[1]], found[keys[2]]


@dataclass
class BatchSampler:
    """Successive /metrics totals of one endpoint -> per-interval (t_s, batches, rows,
    seconds), intervals with no batch left out."""

    endpoint: str
    intervals: list[tuple[float, int, int, float]] = field(default_factory=list)
    _last: tuple[float, float, float] | None = None
    seen: bool = False

    def add(self, t_s: float, metrics_text: str) -> None:
        now = batch_totals(metrics_text, self.endpoint)
        if now is None:
            return
        self.seen = True
        if self._last is not None:
            n, rows, sec = (a - b for a, b in zip(now, self._last, strict=True))
            if n >= 1:
                self.intervals.append((t_s, round(n), round(rows), max(0.0, sec)))
        self._last = now


async def watch(client: httpx.AsyncClient, sampler: BatchSampler, stop: asyncio.Event,
                clock: Callable[[], float], interval_s: float = INTERVAL_S) -> None:
    """Sample ``GET /metrics`` into `sampler` every `interval_s` until `stop` is set, and
    once more after. Failed scrapes are skipped (the next one covers their interval)."""
    t0 = clock()

    async def scrape() -> None:
        with contextlib.suppress(httpx.HTTPError):
            r = await client.get("/metrics")
            if r.status_code == 200:
                sampler.add(clock() - t0, r.text)

    while not stop.is_set():
        await scrape()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    await scrape()


def fit(intervals: list[tuple[float, int, int, float]]) -> dict[str, float | int] | None:
    """Least squares of ``seconds = per_batch_s * batches + per_row_s * rows`` over the
    intervals' totals, both coefficients >= 0 (a negative one is dropped and the other
    refitted alone); None with no interval."""
    if not intervals:
        return None
    a = np.asarray([[n, r] for _, n, r, _ in intervals], dtype=np.float64)
    y = np.asarray([s for *_, s in intervals], dtype=np.float64)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    if coef[0] < 0 or coef[1] < 0:
        col = 1 if coef[0] < 0 else 0
        only = float(a[:, col] @ y / max(a[:, col] @ a[:, col], 1e-12))
        coef = [0.0, max(0.0, only)] if col == 1 else [max(0.0, only), 0.0]
    return {"per_batch_s": float(coef[0]), "per_row_s": float(coef[1]),
            "intervals": len(intervals)}


def batch_times(sampler: BatchSampler, interval_s: float = INTERVAL_S) -> dict | None:
    """The JSON document of the module docstring; None when no batch was seen."""
    if not sampler.intervals:
        return None
    lone = [(r, s) for _, n, r, s in sampler.intervals if n == 1]
    by: dict[int, list[float]] = {}
    for r, s in lone:
        by.setdefault(r, []).append(s)
    return {
        "format": FORMAT, "endpoint": sampler.endpoint,
        "source": f"GET /metrics floodway_batch_rows and floodway_batch_seconds, sampled "
                  f"every {interval_s:g} s",
        "batches": [{"rows": r, "seconds": round(s, 6)} for r, s in lone],
        "by_rows": [{"rows": r, "batches": len(v), "mean_s": round(statistics.fmean(v), 6),
                     "p50_s": round(statistics.median(v), 6), "max_s": round(max(v), 6)}
                    for r, v in sorted(by.items())],
        "intervals": [{"t_s": round(t, 3), "batches": n, "rows": r, "seconds": round(s, 6)}
                      for t, n, r, s in sampler.intervals],
        "fit": fit(sampler.intervals),
    }


__all__ = ["FORMAT", "INTERVAL_S", "BatchSampler", "batch_times", "batch_totals", "fit",
           "watch"]
