"""What one simulation measured (`SimResult`) and per-minute series for the plot."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from floodway.routers.decide import Action

# A decision's code in `SimResult.decisions`: its position in `Action` (DISPATCH is 0).
ACTIONS: tuple[Action, ...] = tuple(Action)
CODES: dict[Action, int] = {a: i for i, a in enumerate(ACTIONS)}


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of simulating one endpoint over one trace.

    Counts: `requests` arrivals, of which `dispatched` / `queued` / `spill_cold` went to a
    container (directly, after waiting in the router's queue, after asking for a new one),
    `spill_async` became async jobs (run later on idle containers, `floodway.sim.pool`:
    their busy time counts, their latency is not a served one), `shed` were rejected, and
    `expired` waited past their deadline and were dropped before reaching a model.
    `handed_off`: requests the deadline hand-off made async jobs (`floodway.sim.pool`):
    still queued at their hand-off, or answered after it (their batch ran on); where the
    route spills to async they take the place of the expired.
    `cold_requests`: served requests that waited for a container to start (it became ready
    after they arrived); `containers_started`: every container start (on demand or ahead of
    time by the warm pool); `cold_start_rate` = cold_requests / requests; `served`: requests
    answered by a container (the rest were spilled to async, shed, expired or handed off);
    `async_jobs` = spill_async + handed_off (answered 202).
    Latency of served requests in seconds (queue + cold-start wait + batch service):
    `p50_s`, `p95_s`, `p99_s` (nan without any). Container time in minutes: `warm_min`
    (ready, idle or busy), `busy_min` (running a batch), `idle_min` = warm - busy,
    `starting_min` (cold starts, billed too); `gpu_s` = (warm + starting) seconds, `cost_usd`
    at `usd_per_gpu_s` per container-second. `span_min`: simulated minutes. `wall_s`: real
    seconds the run took; `policy_s`: of which in the warm-pool policy.
    Series (per simulated minute, from `series_start_minute`): `arrivals`, `warm_avg`,
    `busy_avg` (mean containers warm / busy in that minute). `decisions`: per request, the
    index of its `Action` in `ACTIONS` (its code, `CODES`; uint8).
    """

    requests: int
    dispatched: int
    queued: int
    spill_cold: int
    spill_async: int
    shed: int
    expired: int
    cold_requests: int
    containers_started: int
    p50_s: float
    p95_s: float
    p99_s: float
    warm_min: float
    busy_min: float
    starting_min: float
    span_min: float
    usd_per_gpu_s: float
    wall_s: float
    policy_s: float
    series_start_minute: int
    arrivals: np.ndarray
    warm_avg: np.ndarray
    busy_avg: np.ndarray
    decisions: np.ndarray
    latencies_s: np.ndarray
    handed_off: int = 0

    @property
    def served(self) -> int:
        return self.dispatched + self.queued + self.spill_cold - self.expired - self.handed_off

    @property
    def async_jobs(self) -> int:
        return self.spill_async + self.handed_off

    @property
    def cold_start_rate(self) -> float:
        return self.cold_requests / self.requests if self.requests else 0.0

    @property
    def idle_min(self) -> float:
        return self.warm_min - self.busy_min

    @property
    def gpu_s(self) -> float:
        return (self.warm_min + self.starting_min) * 60.0

    @property
    def cost_usd(self) -> float:
        return self.gpu_s * self.usd_per_gpu_s

    @property
    def requests_per_wall_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else math.inf

    def rows(self) -> list[tuple[str, str]]:
        """(name, formatted value) pairs for a printed table."""
        def ms(x: float) -> str:
            return "-" if math.isnan(x) else f"{x * 1e3:,.1f} ms"
        return [
            ("requests", f"{self.requests:,}"),
            ("dispatched / queued / spill cold", f"{self.dispatched:,} / {self.queued:,} / "
                                                 f"{self.spill_cold:,}"),
            ("spill async / shed / expired", f"{self.spill_async:,} / {self.shed:,} / "
                                             f"{self.expired:,}"),
            ("handed off near the deadline", f"{self.handed_off:,} (async jobs: "
                                             f"{self.async_jobs:,})"),
            ("served", f"{self.served:,} (async spills are counted above; their jobs ran "
                       "on idle containers)" if self.spill_async else f"{self.served:,}"),
            ("cold-start requests", f"{self.cold_requests:,} ({self.cold_start_rate:.2%} of "
                                    f"requests, {self.cold_requests / max(self.served, 1):.2%}"
                                    " of served)"),
            ("containers started", f"{self.containers_started:,}"),
            ("latency p50 / p95 / p99", f"{ms(self.p50_s)} / {ms(self.p95_s)} / "
                                        f"{ms(self.p99_s)}"),
            ("warm container-minutes", f"{self.warm_min:,.1f}"),
            ("busy container-minutes", f"{self.busy_min:,.1f}"),
            ("idle container-minutes", f"{self.idle_min:,.1f}"),
            ("starting container-minutes", f"{self.starting_min:,.1f}"),
            ("cost", f"${self.cost_usd:,.2f} at ${self.usd_per_gpu_s:g}/GPU-s "
                     f"({self.gpu_s:,.0f} GPU-s)"),
            ("simulated", f"{self.span_min:,.0f} min in {self.wall_s:.2f} s wall "
                          f"({self.requests_per_wall_s:,.0f} requests/s; policy "
                          f"{self.policy_s:.2f} s)"),
        ]


def coverage_per_minute(starts_s: np.ndarray, ends_s: np.ndarray, start_minute: int,
                        minutes: int) -> np.ndarray:
    """Seconds of [start, end) intervals inside each minute, shape (minutes,).

    O((n + minutes) log n): with G(T) = total covered seconds before T,
    G(T) = sum over starts < T of (T - start) - sum over ends < T of (T - end).
    """
    edges = (start_minute + np.arange(minutes + 1, dtype=np.float64)) * 60.0
    # A stable sort: busy intervals come nearly in order, which it exploits (several times
    # faster on a million); the sorted values, and so the sums, are the same.
    g = _ramp(np.sort(starts_s, kind="stable"), edges) - _ramp(np.sort(ends_s, kind="stable"),
                                                               edges)
    return np.diff(g)


def _ramp(sorted_x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    k = np.searchsorted(sorted_x, edges, side="left")
    csum = np.concatenate([[0.0], np.cumsum(sorted_x)])
    return k * edges - csum[k]


__all__ = ["ACTIONS", "CODES", "SimResult", "coverage_per_minute"]
