"""Batch times measured during a bench run, read from the router's ``GET /metrics``, for
`floodway simulate` to use later.

The router exports histograms per endpoint: ``floodway_batch_rows`` (rows per batch),
``floodway_batch_seconds`` (the endpoint function's compute seconds per batch) and, where
the router exports them, ``floodway_batch_padded_tokens`` (rows x the longest item's
estimated tokens, as the batcher counts them) and ``floodway_batch_service_seconds`` (the
seconds the batch held its container as the router sees it: compute plus reading, encoding
and the pipe; what the router's own fit is made of). They give totals, not each batch.
Sampled every `INTERVAL_S` during the replay, the difference between two samples is one
interval's totals: its batches, rows, padded tokens and seconds (service seconds where
exported, else compute seconds). An interval with exactly one batch gives that batch
exactly. A router that does not export padded tokens leaves them to an estimate
(`estimate_tokens`): the interval's rows times the mean estimated tokens of the requests
answered 200 in it (the batcher groups similar lengths, so a batch's longest item is near
its mean), the run's mean where none was.

The service model is fitted as the router fits its own (`floodway.routers.service.
ServiceTime.fit_padded`, from `floodway.core.priors.TEXT_SERVICE_PRIOR`): on padded tokens,
rows and batches, each interval as its mean batch (totals / batches, counted once per batch:
the line is linear, so a mean batch lies on it as every batch does). Without tokens (items
that are not text) it is the least squares of ``seconds = per_batch_s * batches + per_row_s *
rows`` on the totals.

The JSON written (`batch_times`, format ``floodway.bench.batches/1``):

    {"format": "floodway.bench.batches/1", "endpoint": "embed",
     "source": "GET /metrics ... every 0.25 s", "seconds": "service" | "compute",
     "tokens": "measured" | "estimated" | null,
     "batches":   [{"rows": 12, "seconds": 0.081, "padded_tokens": 3072}, ...],  # lone ones
     "by_rows":   [{"rows": 12, "batches": 4, "mean_s": 0.08, "p50_s": 0.08,
                    "max_s": 0.09}, ...],                       # "batches" grouped by rows
     "intervals": [{"t_s": 1.25, "batches": 3, "rows": 40, "seconds": 0.31,
                    "padded_tokens": 9800, "busy": 1.5, "cpu_s": 0.09,
                    "foreign_cpu_s": 0.004}, ...],
     "fit": {"per_batch_s": 0.021, "per_row_s": 0.0049, "per_token_s": 0.00002,
             "intervals": 57, "batches": 130} | null,
     "contention": {"by_busy": [{"busy": 1, "factor": 0.7, ...}, ...], ...} | null,
     "load": {"window_s": 1.0, "cores": 2, "other_cores": 0.13,
              "other_per_request_s": 0.0022, "at_rest": 0.9, ...} | null,
     "foreign": {"over_cores": 0.25, "most_cores": 0.13, "mean_cores": 0.01,
                 "disturbed_s": [[15.7, 17.4]]} | null}

``busy`` (an interval's mean busy containers at its two ends), ``cpu_s`` (the CPU seconds
the router process and the bench client spent in it: ``process_cpu_seconds_total`` on
/metrics and the client's `time.process_time`), ``foreign_cpu_s`` (what other work on the
machine took: its busy seconds less the router's, the client's and the containers'; only
for a router on this machine), ``contention`` (batch time over the fit by
busy containers) and ``load`` (the cores the router and the client take from the
containers) and ``foreign`` (the intervals other work disturbed; all three
`floodway.bench.contention`) are absent from documents written before them; readers treat
them as optional.

A router that does not see its batches (on Modal the containers run them out of its
sight) shows no batches; then there is nothing to write (`batch_times` returns None).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import httpx
import numpy as np

INTERVAL_S = 0.25
FORMAT = "floodway.bench.batches/1"
_SUMS = {"floodway_batch_rows_count": "batches", "floodway_batch_rows_sum": "rows",
         "floodway_batch_seconds_sum": "compute_s",
         "floodway_batch_padded_tokens_sum": "tokens",
         "floodway_batch_service_seconds_sum": "service_s"}
# Container states that count as live (floodway_containers{state}).
LIVE_STATES = frozenset({"starting", "warming", "ready", "busy"})


class Totals(NamedTuple):
    """Totals so far of one endpoint's batches: count, rows, compute seconds, padded tokens
    and service seconds (None: the router does not export them)."""

    batches: float
    rows: float
    compute_s: float
    tokens: float | None = None
    service_s: float | None = None


class Interval(NamedTuple):
    """One sampling interval's batches: it ended `t_s` seconds into the replay and began at
    `since_s`; `seconds` are service seconds where exported, else compute seconds;
    `tokens` padded tokens (None: not exported); `busy` the mean of the busy containers
    seen at its two ends (None: no container gauge); `cpu_s` the CPU seconds the router
    process and the bench client spent in it (None: not both measured); `foreign_cpu_s`
    the CPU seconds other work on the machine took in it: the machine's busy seconds less
    the router's, the client's and the containers' (None: not all measured)."""

    t_s: float
    batches: int
    rows: int
    seconds: float
    tokens: float | None = None
    since_s: float = 0.0
    busy: float | None = None
    cpu_s: float | None = None
    foreign_cpu_s: float | None = None


class CpuNow(NamedTuple):
    """CPU seconds so far, read at a sample beside /metrics' router CPU: the bench
    client's own (`time.process_time`), the endpoint's containers' (``cpu_s`` in /readyz)
    and the whole machine's (`floodway.runtime.procstat.machine_cpu_s`; only where the
    router runs on this machine); None: not known."""

    client_s: float | None
    workers_s: float | None = None
    machine_s: float | None = None


class Seen(NamedTuple):
    """What one /metrics text shows of an endpoint: its batch `totals` (None: no batch
    histograms), its `live` containers (None: no container gauge) and each live
    container's cold start in seconds (``floodway_cold_start_seconds{phase="total"}``) and
    its `busy` containers (None: no container gauge); containers are summed over the
    endpoint's lanes (the gauge's ``lane`` label); `cpu_s` the router process's CPU seconds
    so far (``process_cpu_seconds_total``; None: not exported)."""

    totals: Totals | None
    live: int | None
    cold_s: dict[str, float]
    busy: int | None = None
    cpu_s: float | None = None


def read_metrics(metrics_text: str, endpoint: str) -> Seen:
    """What `metrics_text` (a Prometheus text exposition) shows of `endpoint` (`Seen`)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    live: int | None = None
    busy: int | None = None
    cold: dict[str, float] = {}
    cpu: float | None = None
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name == "process_cpu_seconds_total":
                cpu = float(s.value)
            if s.labels.get("endpoint") != endpoint:
                continue
            if s.name in _SUMS:
                found[_SUMS[s.name]] = found.get(_SUMS[s.name], 0.0) + s.value
            elif s.name == "floodway_containers":
                state = s.labels.get("state")
                live = (live or 0) + (int(s.value) if state in LIVE_STATES else 0)
                busy = (busy or 0) + (int(s.value) if state == "busy" else 0)
            elif s.name == "floodway_cold_start_seconds" and s.labels.get("phase") == "total":
                cold[s.labels.get("container", "")] = float(s.value)
    if not {"batches", "rows", "compute_s"} <= found.keys():
        return Seen(None, live, cold, busy, cpu)
    return Seen(Totals(found["batches"], found["rows"], found["compute_s"],
                       found.get("tokens"), found.get("service_s")), live, cold, busy, cpu)


def batch_totals(metrics_text: str, endpoint: str) -> Totals | None:
    """The batch `Totals` of `endpoint` so far; None without its batch histograms."""
    return read_metrics(metrics_text, endpoint).totals


@dataclass
class BatchSampler:
    """Successive /metrics totals of one endpoint -> `Interval`s (intervals with no batch
    left out, each with the busy containers seen at its ends), the most live containers seen
    (`most_live`) and the cold starts of the containers seen (`cold_s`, seconds by
    container id)."""

    endpoint: str
    intervals: list[Interval] = field(default_factory=list)
    _last: Totals | None = None
    _last_t: float = 0.0
    _last_busy: int | None = None
    _last_cpu: tuple[float | None, float | None] = (None, None)
    seen: bool = False
    most_live: int = 0
    cold_s: dict[str, float] = field(default_factory=dict)

    def add(self, t_s: float, metrics_text: str, busy_now: int | None = None,
            cpu: CpuNow | None = None) -> None:
        """One sample at `t_s`; `busy_now`: the containers running a batch then, where
        known apart from /metrics (`floodway.bench.contention.busy_of_readiness`), else
        the ``busy`` state of the container gauge; `cpu`: the CPU seconds read with it,
        for each interval's `cpu_s` and `foreign_cpu_s`."""
        now, live, cold, busy, router_cpu = read_metrics(metrics_text, self.endpoint)
        busy = busy if busy_now is None else busy_now
        cpu = cpu or CpuNow(None)
        own = None if router_cpu is None or cpu.client_s is None else router_cpu + cpu.client_s
        spare = None if own is None or cpu.workers_s is None or cpu.machine_s is None else \
            cpu.machine_s - own - cpu.workers_s      # what neither router, client nor workers used
        if live is not None:
            self.most_live = max(self.most_live, live)
        self.cold_s.update(cold)
        if now is None:
            return
        self.seen = True
        last = self._last
        if last is not None:
            n = round(now.batches - last.batches)
            if n >= 1:
                service = now.service_s is not None and last.service_s is not None
                sec = now.service_s - last.service_s if service else \
                    now.compute_s - last.compute_s
                tok = None if now.tokens is None or last.tokens is None else \
                    max(0.0, now.tokens - last.tokens)
                both = None if busy is None or self._last_busy is None else \
                    (busy + self._last_busy) / 2
                used, other = (None if x is None or x0 is None else max(0.0, x - x0)
                               for x, x0 in zip((own, spare), self._last_cpu, strict=True))
                self.intervals.append(Interval(t_s, n, round(now.rows - last.rows),
                                               max(0.0, sec), tok, self._last_t, both, used,
                                               other))
        self._last, self._last_t, self._last_busy = now, t_s, busy
        self._last_cpu = (own, spare)

    @property
    def service_seconds(self) -> bool:
        """Whether the seconds are service seconds (the router exports them)."""
        return self._last is not None and self._last.service_s is not None


async def watch(client: httpx.AsyncClient, sampler: BatchSampler, stop: asyncio.Event,
                clock: Callable[[], float], interval_s: float = INTERVAL_S,
                t0: float | None = None, local: bool = False,
                started: asyncio.Event | None = None) -> None:
    """Sample ``GET /metrics`` into `sampler` every `interval_s` until `stop` is set, and
    once more after (`started` is set once the first sample is in: what runs after it
    falls within the intervals); times are `clock() - t0` (`t0`: the replay's start,
    default the first call). Each sample also reads ``GET /readyz`` for the containers
    running a batch and their CPU seconds (`floodway.bench.contention`), this process's CPU
    seconds and, with `local` (the router runs on this machine), the machine's. Failed
    scrapes are skipped (the next one covers their interval)."""
    from floodway.bench.contention import busy_of_readiness, cpu_of_readiness
    from floodway.runtime.procstat import machine_cpu_s

    t0 = clock() if t0 is None else t0

    async def scrape() -> None:
        with contextlib.suppress(httpx.HTTPError):
            busy = workers = None
            with contextlib.suppress(ValueError):
                doc = (await client.get("/readyz")).json()
                busy = busy_of_readiness(doc, sampler.endpoint)
                workers = cpu_of_readiness(doc, sampler.endpoint)
            r = await client.get("/metrics")
            if r.status_code == 200:
                cpu = CpuNow(time.process_time(), workers, machine_cpu_s() if local else None)
                sampler.add(clock() - t0, r.text, busy, cpu)

    while not stop.is_set():
        await scrape()
        if started is not None:
            started.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    await scrape()


def estimate_tokens(intervals: Sequence[Interval], answered: Sequence[tuple[float, int]]
                    ) -> list[Interval]:
    """`intervals` with padded tokens estimated where not measured: rows x the mean tokens
    of the requests answered in (since_s, t_s] (`answered`: (answer time on the intervals'
    clock, estimated tokens) per answered request), the mean of all where none was;
    unchanged without any answer."""
    if not answered:
        return list(intervals)
    at = np.asarray([a for a, _ in answered], dtype=np.float64)
    tok = np.asarray([t for _, t in answered], dtype=np.float64)
    order = np.argsort(at, kind="stable")
    at, tok = at[order], tok[order]
    csum = np.concatenate([[0.0], np.cumsum(tok)])
    mean_all = float(tok.mean())
    out = []
    for iv in intervals:
        if iv.tokens is not None:
            out.append(iv)
            continue
        lo, hi = np.searchsorted(at, [iv.since_s, iv.t_s], side="right")
        mean = (csum[hi] - csum[lo]) / (hi - lo) if hi > lo else mean_all
        out.append(iv._replace(tokens=float(iv.rows * mean)))
    return out


def fit(intervals: Sequence[Interval]) -> dict[str, float | int] | None:
    """The service model of the intervals (module docstring): `ServiceTime.fit_padded` when
    every interval has padded tokens, else two terms on the totals (both >= 0: a negative
    one is dropped and the other refitted alone); None with no interval."""
    if not intervals:
        return None
    batches = sum(iv.batches for iv in intervals)
    if all(iv.tokens is not None for iv in intervals):
        from floodway.core.priors import TEXT_SERVICE_PRIOR
        from floodway.routers.service import ServiceTime

        mean = [(iv.rows / iv.batches, iv.tokens / iv.batches, iv.seconds / iv.batches)
                for iv in intervals]
        f = ServiceTime.fit_padded([m for m, iv in zip(mean, intervals, strict=True)
                                    for _ in range(iv.batches)], TEXT_SERVICE_PRIOR)
        return {"per_batch_s": f.per_batch_s, "per_row_s": f.per_row_s,
                "per_token_s": f.per_token_s, "intervals": len(intervals), "batches": batches}
    a = np.asarray([[iv.batches, iv.rows] for iv in intervals], dtype=np.float64)
    y = np.asarray([iv.seconds for iv in intervals], dtype=np.float64)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    if coef[0] < 0 or coef[1] < 0:
        col = 1 if coef[0] < 0 else 0
        only = float(a[:, col] @ y / max(a[:, col] @ a[:, col], 1e-12))
        coef = [0.0, max(0.0, only)] if col == 1 else [max(0.0, only), 0.0]
    return {"per_batch_s": float(coef[0]), "per_row_s": float(coef[1]),
            "intervals": len(intervals), "batches": batches}


def batch_times(sampler: BatchSampler, interval_s: float = INTERVAL_S,
                answered: Sequence[tuple[float, int]] = (),
                sends_s: Sequence[float] = (), cores: int | None = None) -> dict | None:
    """The JSON document of the module docstring; None when no batch was seen.
    `answered`: (answer time, estimated tokens) of the requests answered, for
    `estimate_tokens` where the router does not export padded tokens; `sends_s`: when
    each request went out (the replay's clock), and `cores`, those of the machine the router
    and its containers run on (None: not this one), for the load term
    (`floodway.bench.contention.load`)."""
    from floodway.bench.contention import contention, foreign, load

    if not sampler.intervals:
        return None
    measured = all(iv.tokens is not None for iv in sampler.intervals)
    ivs = estimate_tokens(sampler.intervals, answered)
    known = all(iv.tokens is not None for iv in ivs)
    model = fit(ivs)
    lone = [iv for iv in ivs if iv.batches == 1]
    by: dict[int, list[float]] = {}
    for iv in lone:
        by.setdefault(iv.rows, []).append(iv.seconds)

    def tokens(iv: Interval) -> dict:
        return {} if iv.tokens is None else {"padded_tokens": round(iv.tokens)}
    return {
        "format": FORMAT, "endpoint": sampler.endpoint,
        "source": f"GET /metrics floodway_batch_* histograms, sampled every {interval_s:g} s",
        "seconds": "service" if sampler.service_seconds else "compute",
        "tokens": "measured" if measured else "estimated" if known else None,
        "batches": [{"rows": iv.rows, "seconds": round(iv.seconds, 6), **tokens(iv)}
                    for iv in lone],
        "by_rows": [{"rows": r, "batches": len(v), "mean_s": round(statistics.fmean(v), 6),
                     "p50_s": round(statistics.median(v), 6), "max_s": round(max(v), 6)}
                    for r, v in sorted(by.items())],
        "intervals": [{"t_s": round(iv.t_s, 3), "batches": iv.batches, "rows": iv.rows,
                       "seconds": round(iv.seconds, 6), **tokens(iv),
                       **({} if iv.busy is None else {"busy": iv.busy}),
                       **({} if iv.cpu_s is None else {"cpu_s": round(iv.cpu_s, 4)}),
                       **({} if iv.foreign_cpu_s is None else
                          {"foreign_cpu_s": round(iv.foreign_cpu_s, 4)})} for iv in ivs],
        "fit": model,
        "contention": (con := contention(ivs, model, sampler.most_live)),
        "load": load(ivs, model, con, sends_s, cores),
        "foreign": foreign(ivs),
    }


__all__ = ["FORMAT", "INTERVAL_S", "BatchSampler", "CpuNow", "Interval", "Seen", "Totals",
           "batch_times", "batch_totals", "estimate_tokens", "fit", "read_metrics", "watch"]
