"""What a bench run reports: the summary table (rich) and the files it writes (per-request
CSV, batch-times JSON).

    summarize(results, deadline_s, capacity_rps=None, span_s=None, lag=None) -> Summary
    summary_table(summary, title) -> rich.table.Table
    failures(results) -> list[Failure]    the answers other than 200/202, by status
    write_requests_csv(summary, path); write_json(doc, path)

The CSV has one row per request: index, send_s (planned, from the replay's start), lag_s
(how late it went out), status (0: no answer), outcome (`floodway.bench.outcomes`),
latency_s (send -> answer), decision (the router's X-Floodway-Decision), error, router_s
(the router's Server-Timing for it; empty when not sent), job (a 202's Location),
job_status and job_done_s (its end and when, once followed: `floodway.bench.jobs`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from floodway.bench.jobs import Drain, drain
from floodway.bench.outcomes import (
    HONEST_SLACK_S,
    LABELS,
    OUTCOMES,
    Goodput,
    arrivals_per_second,
    counts,
    goodput,
    honest,
    outcome,
    percentile,
)
from floodway.bench.replay import Result
from floodway.bench.routerlag import Lag

PERCENTILES = (50, 90, 95, 99)
CSV_COLUMNS = ("index", "send_s", "lag_s", "status", "outcome", "latency_s", "decision",
               "error", "router_s", "job", "job_status", "job_done_s")


@dataclass(frozen=True)
class Summary:
    """A replay's results with each one's outcome, the counts per outcome (they add up to
    the requests), the latency percentiles of 200s (seconds, by q), the goodput, how many
    were answered honestly in time (`floodway.bench.outcomes.honest`), the router's loop
    lag over the run (`floodway.bench.routerlag.Lag`; None: not known) and how its jobs
    drained (`floodway.bench.jobs.Drain`; None: not followed)."""

    results: Sequence[Result]
    outcomes: tuple[str, ...]
    counts: dict[str, int]
    latency_200_s: dict[int, float]
    goodput: Goodput
    deadline_s: float
    honest: int = 0
    lag: Lag | None = None
    drain: Drain | None = None

    @property
    def requests(self) -> int:
        return len(self.results)

    @property
    def reconnected(self) -> int:
        """Requests sent again on a fresh connection (`floodway.bench.replay`)."""
        return sum(1 for r in self.results if r.reconnected)


@dataclass(frozen=True)
class Failure:
    """The requests answered `status` >= 400 (0: no answer, then `kind` names the error's
    type): how many, and the first one's error message."""

    status: int
    kind: str
    count: int
    first_error: str

    def describe(self) -> str:
        return f"{self.kind} x {self.count:,}: {self.first_error or '(no message)'}"


def failures(results: Sequence[Result]) -> list[Failure]:
    """The requests not answered 200 or 202, by status (no answers by their error's type),
    most first, each kind with its first request's error message."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.status in (200, 202):
            continue
        kind = str(r.status) if r.status else \
            f"no answer ({r.error.split(':', 1)[0] or 'unknown'})"
        groups.setdefault(kind, []).append(r)
    out = [Failure(rs[0].status, k, len(rs), rs[0].error) for k, rs in groups.items()]
    return sorted(out, key=lambda f: (-f.count, f.kind))


def all_refused(results: Sequence[Result]) -> bool:
    """Whether every request was answered with a 4xx (the endpoint refused what was
    sent: a wrong item, endpoint or key, not a load it could not bear)."""
    return bool(results) and all(400 <= r.status < 500 for r in results)


def summarize(results: Sequence[Result], deadline_s: float, capacity_rps: float | None = None,
              span_s: float | None = None, lag: Lag | None = None) -> Summary:
    """The `Summary` of `results` for a deadline of `deadline_s` seconds; with jobs
    followed, how they drained after the last second whose arrivals exceeded
    `capacity_rps` (else after the last send)."""
    outs = tuple(outcome(r.status, r.latency_s, deadline_s) for r in results)
    lat = [r.latency_s for r in results if r.status == 200]
    good = goodput([r.send_s for r in results], [o == "ok" for o in outs], capacity_rps,
                   span_s)
    fair = sum(1 for r in results if honest(r.status, r.latency_s, deadline_s))
    followed = any(r.job_status for r in results)
    return Summary(results, outs, counts(outs), {q: percentile(lat, q) for q in PERCENTILES},
                   good, deadline_s, fair, lag,
                   drain(results, capacity_rps, burst_end_s(results, capacity_rps, span_s))
                   if followed else None)


def burst_end_s(results: Sequence[Result], capacity_rps: float | None,
                span_s: float | None = None) -> float:
    """Seconds into the replay at which its last overloaded second (arrivals above
    `capacity_rps`) ended; the last send without a capacity or with no such second."""
    sends = [r.send_s for r in results]
    if capacity_rps:
        over = [k for k, n in enumerate(arrivals_per_second(sends, span_s)) if n > capacity_rps]
        if over:
            return over[-1] + 1.0
    return max(sends, default=0.0)


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:,.1f}"


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """(measure, value) rows: each outcome's count and share, the 200s' percentiles, the
    goodput and the send lag."""
    rows = [(LABELS[o], f"{s.counts[o]:,} ({s.counts[o] / max(1, s.requests):.1%})")
            for o in OUTCOMES]
    rows.append(("requests", f"{s.requests:,}"))
    rows += [(f"200 latency p{q} (ms)", _ms(v)) for q, v in s.latency_200_s.items()]
    rows.append(("goodput", s.goodput.describe()))
    share = s.honest / max(1, s.requests)
    rows.insert(0, ("answered honestly in time", f"{s.honest:,} ({share:.1%}) (200 within the "
                    f"deadline; 202/429/503 within it + {HONEST_SLACK_S * 1000:.0f} ms)"))
    lag = percentile([r.lag_s for r in s.results], 99)
    rows.append(("client send lag p99 (ms)", _ms(lag)))
    if s.reconnected:
        rows.append(("reconnected (an idle connection the server closed; sent again)",
                     f"{s.reconnected:,}"))
    if s.lag is not None:
        rows.append(("router event-loop lag p50 / p99 / max (ms, bucket bounds)",
                     f"{_ms(s.lag.p50_s)} / {_ms(s.lag.p99_s)} / {_ms(s.lag.max_s)} "
                     f"({s.lag.samples:,} samples)"))
    if s.drain is not None:
        d = s.drain
        rows.append(("jobs succeeded / accepted", f"{d.succeeded:,} / {d.jobs:,}"))
        rows.append(("job done after its 202, p99 (s)", _s(d.p99_done_s)))
        rate = "-" if math.isnan(d.per_s) else f"{d.per_s:.1f}/s"
        if not math.isnan(d.ratio):
            rate += f" = {d.ratio:.2f}x capacity"
        rows.append(("backlog drain after the burst", f"{rate} over {_s(d.after_s)} s "
                     "(jobs done + 200s, from the burst's end to the last job)"))
    return rows


def _s(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.2f}"


def summary_table(s: Summary, title: str):
    """The rows of `summary_rows` as a rich Table."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in summary_rows(s):
        table.add_row(name, value)
    return table


def write_requests_csv(s: Summary, path: Path) -> Path:
    """The per-request CSV of the module docstring, at `path`."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r, o in zip(s.results, s.outcomes, strict=True):
            w.writerow([r.index, f"{r.send_s:.6f}", f"{r.lag_s:.6f}", r.status, o,
                        "" if math.isnan(r.latency_s) else f"{r.latency_s:.6f}", r.decision,
                        r.error, "" if math.isnan(r.router_s) else f"{r.router_s:.6f}",
                        r.job, r.job_status,
                        "" if math.isnan(r.job_done_s) else f"{r.job_done_s:.3f}"])
    return path


def write_json(doc: dict, path: Path) -> Path:
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


__all__ = ["CSV_COLUMNS", "PERCENTILES", "Failure", "Summary", "all_refused", "failures",
           "summarize", "summary_rows", "summary_table", "write_json", "write_requests_csv"]
