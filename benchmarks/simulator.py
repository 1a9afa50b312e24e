"""Simulator speed: simulated requests per second of wall time, the exact fast mode (bulk
segments, `floodway.sim.fastpath`) against `decide()` on every request, on two real traces:

    (1) the Azure LLM 2023 code trace (per-request timestamps), tiled end to end (each copy
        shifted by the trace's whole minutes) to at least --requests requests;
    (2) the per-minute counts of the busiest function of the Azure Functions 2019 sample
        (spread evenly within each minute), its day tiled the same way.

Both run the example endpoint's settings (modal_app.py's `embed`: 8 batches in flight per
container, of which the router keeps 2 in a container's pipe as the local runtime does, a
queue of 64, a 2 s deadline, spill to cold and async, batches of up to 32 rows after a 5 ms
wait, a warm floor of 1 with a buffer of 1, 120 s scaledown, at most 8 containers) without
its cron window (croniter then dominates the policy time, which is not the simulator's), a
30 s cold start and the service prior (`floodway.core.priors.SERVICE_PRIOR`: 20 ms + 5 ms
per row), with floodway's own warm-pool policy every simulated minute. The fast mode runs --repeats
times (best wall time counts), the reference once; their SimResults must be identical (every
count, latency and container-minute; wall and policy time aside). Target (from the issue):
>= 1,000,000 simulated requests per second of wall time for the fast mode. The fast mode's
segment kernel is compiled (numba) on the first call on a machine and cached: that first
call is timed on its own, before the runs, and printed.

    .venv/bin/python benchmarks/simulator.py [--trace ../shared/traces/azure_llm_2023_code.csv]
        [--counts-trace ../shared/traces/azure_functions_2019_200_inv.csv] [--function HASH]
        [--requests 1000000] [--repeats 3]
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:       # run as a script from a checkout: use this checkout
    sys.path.insert(0, str(ROOT))

from floodway.config import Batching, Route, WarmPool  # noqa: E402
from floodway.core.priors import SERVICE_PRIOR  # noqa: E402
from floodway.sim import (  # noqa: E402
    ColdStartModel,
    ServiceModel,
    SimConfig,
    SimResult,
    Trace,
    read_trace,
    simulate,
)
from floodway.sim.trace import read_counts_matrix  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
TARGET = 1_000_000
CONFIG = SimConfig(
    route=Route(max_inflight_per_container=8, max_queue=64, timeout_s=2.0,
                spill=("cold", "async")),
    warm=WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=120,
                  max_containers=8),
    batching=Batching(max_batch_rows=32, wait_ms=5),
    cold=ColdStartModel.of(30.0), service=ServiceModel(SERVICE_PRIOR))
console = Console(width=150)


def tile_times(trace: Trace, requests: int) -> Trace:
    """The trace repeated end to end until it holds at least `requests` arrivals."""
    copies = max(1, math.ceil(requests / trace.requests))
    span = len(trace.counts) * 60.0
    times = (trace.times_s[None, :] + span * np.arange(copies)[:, None]).ravel()
    return Trace.from_times(times, name=f"{trace.name} x{copies}",
                            minutes=len(trace.counts) * copies)


def busiest(path: Path, function: str | None) -> tuple[str, np.ndarray]:
    names, counts = read_counts_matrix(path)
    if function:
        hits = [i for i, n in enumerate(names) if n.startswith(function)]
        if len(hits) != 1:
            raise typer.BadParameter(f"no single function matches {function!r}")
        row = hits[0]
    else:
        row = int(np.argmax(counts.sum(axis=1)))
    return names[row], counts[row]


def differences(a: SimResult, b: SimResult) -> list[str]:
    """Fields that differ (floats bit for bit, arrays element for element)."""
    out = []
    for f in fields(SimResult):
        if f.name in ("wall_s", "policy_s"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            same = x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        else:
            same = x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
        if not same:
            out.append(f.name)
    return out


def timed(trace: Trace, config: SimConfig) -> tuple[SimResult, float]:
    t0 = time.perf_counter()
    res = simulate(trace, config)
    return res, time.perf_counter() - t0


def main(trace: Annotated[Path, typer.Option(help="per-request CSV (TIMESTAMP column)")] =
         SHARED / "azure_llm_2023_code.csv",
         counts_trace: Annotated[Path, typer.Option(help="per-minute counts CSV")] =
         SHARED / "azure_functions_2019_200_inv.csv",
         function: Annotated[str | None, typer.Option(
             help="HashFunction (prefix) of the counts trace (default: the busiest)")] = None,
         requests: Annotated[int, typer.Option(min=1, help="tile each trace to at least "
                                                           "this many requests")] = 1_000_000,
         repeats: Annotated[int, typer.Option(min=1, help="fast-mode runs (best counts)")] = 3,
         ) -> None:
    load = os.getloadavg()
    t0 = time.perf_counter()        # compiles the segment kernel, or loads it from the cache
    simulate(Trace.from_times([0.0, 1.0], minutes=1), CONFIG)
    first_call_s = time.perf_counter() - t0
    name, counts = busiest(counts_trace, function)
    days = max(1, math.ceil(requests / int(counts.sum())))
    day = Trace.from_counts(np.tile(counts, days), 0, "uniform", 0, f"{name[:12]} x{days}")
    traces = [(f"{trace.name} (per request)", tile_times(read_trace(trace), requests)),
              (f"{counts_trace.name} {name[:12]} (per minute)", day)]
    table = Table(title="Simulated requests per second of wall time (fast mode: best of "
                        f"{repeats}; decide() on every request: one run)")
    for col in ("trace", "requests", "minutes", "fast mode", "of which policy",
                "decide() every request", "ratio", f">= {TARGET:,}/s", "results"):
        table.add_column(col, justify="left" if col in ("trace", "results") else "right")
    for label, tr in traces:
        with console.status(f"{label}: fast mode"):
            runs = [timed(tr, CONFIG) for _ in range(repeats)]
            fast, fast_s = min(runs, key=lambda r: r[1])
        with console.status(f"{label}: decide() on every request"):
            slow, slow_s = timed(tr, replace(CONFIG, fast=False))
        diff = differences(fast, slow)
        rate, slow_rate = tr.requests / fast_s, tr.requests / slow_s
        table.add_row(label, f"{tr.requests:,}", f"{len(tr.counts):,}", f"{rate:,.0f}/s",
                      f"{fast.policy_s / fast_s:.0%}", f"{slow_rate:,.0f}/s",
                      f"x{rate / slow_rate:.1f}", "PASS" if rate >= TARGET else "FAIL",
                      "identical" if not diff else "DIFFER: " + ", ".join(diff))
    console.print(table)
    console.print(f"first call (compiles the segment kernel, or loads it from numba's cache; "
                  f"not in the rates above): {first_call_s:.2f} s")
    console.print(f"cpus: {os.cpu_count()}; load average at the start: "
                  f"{', '.join(f'{x:.2f}' for x in load)} (other work on the machine slows "
                  "both modes)")


if __name__ == "__main__":
    os.environ.setdefault("FLOODWAY_NO_MODAL", "1")
    typer.run(main)
