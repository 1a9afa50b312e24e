"""The spike guarantee on a family of scenarios no one tuned to: `floodway bench` replays of
8 stretches of the Azure LLM code trace, each at two peaks, on a quiet machine and beside a
CPU hog, with the worst case of every column.

    .venv/bin/python benchmarks/scenarios.py                  # 32 scenarios, ~45 min on 2 cores
    .venv/bin/python benchmarks/scenarios.py --offsets 2 --peaks 4 --conditions quiet   # a taste

Scenarios: stretches of `--span-s` (300) trace seconds starting at 0, 1/8 ... 7/8 of the
trace's span, each time-scaled so that its busiest 10 trace seconds arrive at `--peaks`
(4 and 8) times the closed-loop capacity measured for that stretch's own mix in the same run
and condition; conditions `quiet` and `hog` (one process spinning on one core from before
the capacity is measured to the end). Every request: one text of the stretch (`floodway
bench`'s mix: ceil(ContextTokens / 1.3) words, 1-200), ``X-Deadline-Ms: --deadline-ms``
(1500), `--app`'s endpoint with its defaults (modal_app.py: `make run`'s), a fresh server per
scenario (`floodway bench APP` serves it), and every 202's job followed to its end.

Capacity: `CLIENTS` callers in a closed loop (each sends its next text when it has its
answer; deadline 30 s) for `--capacity-s` seconds on a server of its own, texts cycled
from the stretch in trace order; 200s per second.

Per scenario: the share answered honestly within the deadline + 50 ms (a 200 in time, or a
202 / 429 / 503 within the deadline + 50 ms: `floodway.bench.outcomes.honest`), the 200s
in time, 202s, 429/503s, the late answers (every other one), goodput in the overloaded
seconds (200s in time per second over the seconds whose arrivals exceed the capacity) /
capacity, the jobs that succeeded, the backlog's drain after the burst (jobs done and 200s
per second from the end of the last overloaded second to the last job's end) / capacity,
and the router's event-loop lag p99 (its /metrics histogram over the replay: a bucket's
upper bound). Then the worst case of each column over all scenarios, and over the quiet 4x
ones (the targets: README "Scenarios"). Written to `--out`: scenarios.json and one
`floodway bench` folder per scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import aiohttp
import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from floodway.bench import command
from floodway.bench.plan import Inputs, plan_requests
from floodway.bench.server import serving
from floodway.bench.target import target_of
from floodway.sim.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
PEAK_WINDOW_S = 10.0
CLIENTS = 16
CLOSED_LOOP_DEADLINE_MS = 30_000
console = Console()


# ---------------------------------------------------------------------------- the hog
def _spin(core: int | None) -> None:
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    while True:
        pass


@contextlib.contextmanager
def hog(on: bool) -> Iterator[None]:
    """While the block runs, one process spinning on one core (the last this process may
    run on), when `on`."""
    if not on:
        yield
        return
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    proc = multiprocessing.get_context("spawn").Process(target=_spin, args=(cores[-1],),
                                                         daemon=True)
    proc.start()
    try:
        yield
    finally:
        proc.kill()
        proc.join()


# ---------------------------------------------------------------------------- planning
def busiest(send_s: np.ndarray, window_s: float) -> int:
    """The most sends in any `window_s` seconds."""
    ends = np.searchsorted(send_s, send_s + window_s, side="left")
    return int((ends - np.arange(send_s.size)).max()) if send_s.size else 0


def scale_for(send_s: np.ndarray, rate: float, window_s: float = PEAK_WINDOW_S) -> float:
    """The time scale at which the busiest `window_s` trace seconds of `send_s` (seconds,
    sorted, at scale 1) arrive at `rate` per second."""
    return rate * window_s / max(1, busiest(send_s, window_s))


# ---------------------------------------------------------------------------- capacity
async def closed_loop(base: str, endpoint: str, texts: list[str], seconds: float) -> float:
    """200s per second that CLIENTS callers in a closed loop get from `texts`, cycled."""
    ok = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(base_url=base + "/", connector=conn) as s:
        headers = {"X-Deadline-Ms": str(CLOSED_LOOP_DEADLINE_MS), "Cache-Control": "no-cache"}
        for t in texts[:CLIENTS]:   # warm: the first batches of a fresh router
            async with s.post(f"v1/{endpoint}", json={"inputs": [t]}, headers=headers) as r:
                await r.read()
        stop = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            nonlocal ok
            i = k
            while time.perf_counter() < stop:
                async with s.post(f"v1/{endpoint}", json={"inputs": [texts[i % len(texts)]]},
                                  headers=headers) as r:
                    await r.read()
                    ok += r.status == 200
                i += CLIENTS

        t0 = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(CLIENTS)))
        return ok / (time.perf_counter() - t0)


# ---------------------------------------------------------------------------- a scenario
@dataclass
class Row:
    condition: str
    offset: int
    start_s: float
    peak_x: float
    capacity_rps: float
    time_scale: float
    requests: int
    honest: float        # share answered honestly in time
    late: int            # requests not answered honestly in time
    ok: int
    accepted: int        # 202s
    shed: int            # 429 + 503
    goodput_x: float     # goodput in overloaded seconds / capacity
    jobs_succeeded: float   # share of accepted jobs that succeeded (1 with none)
    drain_x: float       # drain rate after the burst / capacity (NaN: no backlog to drain)
    lag_p99_ms: float


def run_scenario(app: str, trace: Path, cond: str, k: int, start_s: float, peak: float,
                 capacity: float, send_s: np.ndarray, span_s: float, deadline_ms: float,
                 out: Path) -> Row:
    ts = scale_for(send_s, peak * capacity)
    s = command.run(app, trace, None, ts, span_s / ts, deadline_ms, out, None, None, capacity,
                    200, None, start_s, None, follow_jobs=True, quiet=True)
    c = s.counts
    d = s.drain
    good_x = s.goodput.per_s / capacity if s.goodput.basis == "overloaded" else math.nan
    return Row(cond, k, start_s, peak, capacity, ts, s.requests, s.honest / s.requests,
               s.requests - s.honest, c["ok"], c["async"], c["429"] + c["503"], good_x,
               (d.succeeded / d.jobs) if d is not None and d.jobs else 1.0,
               d.ratio if d is not None else math.nan,
               s.lag.p99_s * 1000 if s.lag is not None else math.nan)


# ---------------------------------------------------------------------------- report
COLUMNS = (("honest", "honest in time", "{:.2%}", min), ("late", "late", "{:d}", max),
           ("ok", "200 in time", "{:d}", None), ("accepted", "202", "{:d}", None),
           ("shed", "429/503", "{:d}", None), ("goodput_x", "goodput/cap", "{:.2f}x", min),
           ("jobs_succeeded", "jobs ok", "{:.1%}", min),
           ("drain_x", "drain/cap", "{:.2f}x", min), ("lag_p99_ms", "loop lag p99", "{:.0f} ms",
                                                      max))


def _fmt(fmt: str, v: float) -> str:
    return "-" if isinstance(v, float) and math.isnan(v) else fmt.format(v)


def worst(rows: list[Row]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, _, _, pick in COLUMNS:
        vals = [getattr(r, key) for r in rows if not (isinstance(getattr(r, key), float)
                                                     and math.isnan(getattr(r, key)))]
        if pick is not None and vals:
            out[key] = pick(vals)
    return out


def table(rows: list[Row]) -> Table:
    t = Table(title="scenarios (worst cases last)")
    for name in ("condition", "offset", "peak", "capacity", "requests",
                 *(c[1] for c in COLUMNS)):
        t.add_column(name, justify="right")
    for r in rows:
        t.add_row(r.condition, f"{r.offset}/8", f"{r.peak_x:g}x", f"{r.capacity_rps:.1f}/s",
                  f"{r.requests}", *(_fmt(f, getattr(r, key)) for key, _, f, _ in COLUMNS))
    for label, sel in (("worst", rows),
                       ("worst quiet 4x", [r for r in rows if r.condition == "quiet"
                                           and r.peak_x == 4])):
        if not sel:
            continue
        w = worst(sel)
        t.add_row(label, "", "", "", f"{sum(r.requests for r in sel)}",
                  *(_fmt(f, w[key]) if key in w else "" for key, _, f, _ in COLUMNS),
                  style="bold")
    return t


def main(trace: Annotated[Path, typer.Option(help="the per-request trace")] = DEFAULT_TRACE,
         app: Annotated[str, typer.Option(help="the app served")] = str(ROOT / "modal_app.py"),
         offsets: Annotated[int, typer.Option(min=1, max=8, help="how many of the 8 stretch "
                                              "starts (k/8 of the span, k < offsets)")] = 8,
         peaks: Annotated[str, typer.Option(help="busiest 10 s / capacity, comma-separated")]
         = "4,8",
         conditions: Annotated[str, typer.Option(help="quiet, hog, or both")] = "quiet,hog",
         span_s: Annotated[float, typer.Option(help="trace seconds per stretch")] = 300.0,
         deadline_ms: Annotated[float, typer.Option(help="X-Deadline-Ms")] = 1500.0,
         capacity_s: Annotated[float, typer.Option(help="closed-loop seconds per stretch")]
         = 12.0,
         out: Annotated[Path, typer.Option(help="folder for what is written")]
         = Path("bench-scenarios")) -> None:
    """Run the scenarios and print them with their worst cases (module docstring)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tr = read_trace(trace)
    t = tr.times_s
    whole = float(t[-1] - t[0])
    inputs = Inputs("text")
    peak_list = [float(x) for x in peaks.split(",") if x.strip()]
    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    bad = set(conds) - {"quiet", "hog"}
    if bad:
        raise typer.BadParameter(f"--conditions: unknown {sorted(bad)}; give quiet, hog")
    stretches = []
    for k in range(offsets):
        start = whole * k / 8
        plan = plan_requests(tr, inputs, 1.0, span_s, start)
        stretches.append((k, start, np.array([p.send_s for p in plan]),
                          [p.inputs[0] for p in plan]))
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    endpoint = target_of(app, None, None, deadline_ms, 200).endpoint
    for cond in conds:
        with hog(cond == "hog"):
            with tempfile.TemporaryDirectory(prefix="floodway-scenarios-") as work, \
                    serving(app, None, Path(work), out / f"capacity-{cond}.log") as base:
                caps = {k: asyncio.run(closed_loop(base, endpoint, texts, capacity_s))
                        for k, _, _, texts in stretches}
            console.print(f"{cond}: closed-loop capacity per stretch: " +
                          ", ".join(f"{k}/8 {c:.1f}/s" for k, c in caps.items()))
            for k, start, send_s, _ in stretches:
                for peak in peak_list:
                    folder = out / f"{cond}-{k}of8-{peak:g}x"
                    t0 = time.monotonic()
                    row = run_scenario(app, trace, cond, k, start, peak, caps[k], send_s,
                                       span_s, deadline_ms, folder)
                    rows.append(row)
                    console.print(f"{cond} {k}/8 {peak:g}x: {row.requests} requests, honest "
                                  f"{row.honest:.2%} ({row.late} late), goodput "
                                  f"{_fmt('{:.2f}x', row.goodput_x)}, drain "
                                  f"{_fmt('{:.2f}x', row.drain_x)}, lag p99 "
                                  f"{_fmt('{:.0f} ms', row.lag_p99_ms)} "
                                  f"({time.monotonic() - t0:.0f} s)")
                    (out / "scenarios.json").write_text(json.dumps(
                        {"rows": [asdict(r) for r in rows], "worst": worst(rows)}, indent=1))
    console.print(table(rows))
    console.print(f"written: {out / 'scenarios.json'}")


if __name__ == "__main__":
    typer.run(main)
