"""Burst: open-loop replay of a real LLM trace against `floodway serve`, spill vs no spill.

What is replayed: a window of `azure_llm_2023_code.csv` (Microsoft Azure, Azure Public Dataset,
CC-BY-4.0) taken from a stretch of it, default the busiest (minutes 14-16, a 67 requests/s
spike). Send times come from the trace and never wait for answers (open loop: a slow server
cannot slow the client down, so queueing shows up as latency, not as fewer requests). Each
request embeds texts with the real all-MiniLM-L6-v2 model; its size follows the row's
ContextTokens, as a prompt's prefill would: 1 + ContextTokens // 2000 texts (1..4), each about
34 tokens (1.58 texts per request on average in the default stretch). The deadline of
served requests is `--deadline-s` (0.5 s, an embedding API's latency objective): a full
32-row batch, modal_app.py's batching, takes about 0.32 s on this machine's CPU (32 rows /
(63 requests/s x 1.58 rows)), so a request can wait for at most about one batch ahead of its
own. The ratio target depends on this choice: with a 1 s deadline floodway's served p99 sits
near 0.85 s (decide() plans within 85 % of the budget) and the same replay gave 4.4x.

How the load is sized: first an open-loop calibration measures what one warm container
*sustains* on this machine for this request mix, against a fresh no-spill server (one
container, unbounded queue, so a backlog shows as latency). Each step sends a constant rate
(evenly spaced, the replay's request sizes) for `--calib-s` (12) seconds without waiting for
answers, then drains. A step is sustained when the queue does not grow: the p95 latency of its
last third of sends is at most GROWTH_S (0.5 s) above that of its first third, stays under
2 s, and every request is answered. Over capacity the backlog, and so the latency,
grows linearly through the step ((rate - capacity) / capacity * 8 s between the thirds: 0.5 s
at ~6 % over). The rate ramps by RAMP (x1.25) from a closed-loop seed until a step is not
sustained (or down until one is), then bisects twice; the capacity is the highest sustained
rate. (A closed loop of 64 clients alone read low: it measures with the client in the way,
and the replay was then not really 3x the pool's capacity, so the no-spill pool never backed
up.) The trace stretch is then time-scaled so that its peak arrival rate (most sends in any
sliding `--peak-window-s`, default 2 s) is `--peak-x` (default 3) times that capacity (the
scale, and the peak over 1 s, are printed), and the replay takes the `--duration-s` of it that
puts the peak a quarter of the way in. Why 2 s and not 1 s: this trace's spikes are short
(67 requests in its busiest second, 41.5/s over its busiest 10 s), so a 1 s peak of 3x is a
blip that any queue absorbs in a few seconds; over 2 s the spike is an overload that lasts. The load
average is printed before the calibration, as each replay starts, and at the end: other work
on this 2-core machine changes the capacity between calibration and replay.

Two configurations, each against a fresh server on the same artifact store, one after the other:
    (A) floodway   warm pool of 1 (cold containers up to 3), deadline 0.5 s, bounded queue,
                   spill to cold containers, then to durable async jobs, else shed fast
    (B) no spill   one container, an unbounded FIFO queue (max_queue 1,000,000, no deadline):
                   the usual default of a plain model server
Both get the same client timeout (30 s) and 1 s of closed-loop warm-up requests before the
replay (a live endpoint has measured service times; a fresh router starts from its prior).

Outcomes per request: served (200), async (202, then the job's result), shed (429/503; the
answer latency is recorded), timeout (the client gave up) and error (anything else). A request
is lost if it timed out, errored, was shed slower than 20 ms, or is a job that failed or did
not finish within `--job-wait-s` after the replay. Job completion latency is its
`finished_at` (server clock, same machine) minus the client's send time; jobs are polled only
once the replay has sent everything, so polling adds no load to the burst. Cold starts and
container-seconds come from `/readyz`, polled every 0.25 s and integrated over the run (from
the first send until the last answer or job). Each answer's `Server-Timing` header gives the
router's own time beside the client's: the client shares this machine's two cores, and it
sends with aiohttp (see `Lanes`) so that it costs little.

    .venv/bin/python benchmarks/burst.py [--trace PATH] [--start-s 840] [--minutes 2]
        [--duration-s 60] [--peak-x 3] [--peak-window-s 2] [--deadline-s 0.5] [--calib-s 12]
        [--store DIR]
        [--out benchmarks/out/burst.png] [--no-goodput]

Then, unless `--no-goodput`, the goodput while overloaded (200s within the deadline per
second, over the seconds whose arrivals exceed the capacity) against the closed-loop
capacity for the same request mix, measured in the same run, with token-aware batching on
and off: benchmarks/goodput.py's measurement (its docstring says how), on the same trace
stretch and artifact store, about 2 minutes more.

Needs a build of modal_app.py (`make run`, or `floodway build modal_app.py`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import csv
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated

import aiohttp
import httpx
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from serving import served

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
# The served requests' deadline (X-Deadline-Ms default, Route.timeout_s): an embedding API's
# latency objective; --deadline-s changes it.
DEADLINE_S = 0.5
SHED_FAST_S = 0.020
TOKENS_PER_TEXT = 2000
MAX_TEXTS = 4
WORDS = ("spill the burst to cold containers or durable jobs and shed the rest fast so that "
         "served requests keep their deadline while the queue stays bounded ").split()
# Enough callers to keep full batches queued: the container's throughput, not the clients'.
CALIB_CLIENTS = 64
# Open-loop calibration: a step is sustained when its p95 latency rose by at most GROWTH_S
# from its first third to its last and stayed under STEADY_P95_S; rates ramp by RAMP.
GROWTH_S = 0.5
STEADY_P95_S = 2.0
RAMP = 1.25
KEEPALIVE_S = 2.0
OUTCOMES = ("served", "async", "shed", "timeout", "error")

APP_TEMPLATE = '''"""Generated by benchmarks/burst.py: modal_app.py's `embed`, {title} route."""
import floodway as fw
import modal_app

app = fw.App("burst-{key}")
embed = app.endpoint(
    model=fw.HFModel(modal_app.MODEL_REPO, revision=modal_app.MODEL_REVISION),
    build=modal_app.embed.build,
    warm=fw.WarmPool({warm}),
    route=fw.Route({route}),
    batching=modal_app.embed.batching,
)(modal_app.embed.fn)
'''

CONFIGS = {
    "floodway": dict(
        title="spill", warm="min_containers=1, max_containers=3, scaledown_window_s=10",
        route="max_inflight_per_container=8, max_queue=64, timeout_s={deadline_s}, "
              "spill=('cold', 'async')"),
    "no spill": dict(
        title="unbounded-queue", warm="min_containers=1, max_containers=1",
        route="max_inflight_per_container=8, max_queue=1_000_000, timeout_s=3600, spill=()"),
}


# ---------------------------------------------------------------- the trace and the load

def load_trace(path: Path) -> list[tuple[float, int]]:
    """(seconds since the first request, ContextTokens) per row, in time order."""
    with open(path, newline="") as f:
        rows = [(datetime.fromisoformat(r["TIMESTAMP"][:26]), int(r["ContextTokens"]))
                for r in csv.DictReader(f)]
    t0 = rows[0][0]
    return sorted(((t - t0).total_seconds(), ctx) for t, ctx in rows)


def peak_rate(times: list[float], window_s: float = 1.0) -> tuple[float, float]:
    """The most sends within any `window_s` (sliding) of sorted `times`, per second, and
    where that window starts: the burst's peak requests/s at that resolution."""
    best = (0, times[0] if times else 0.0)
    for i, t in enumerate(times):
        n = bisect.bisect_left(times, t + window_s) - i
        if n > best[0]:
            best = (n, t)
    return best[0] / window_s, best[1]


def solve_scale(times: list[float], target_peak: float, window_s: float) -> float:
    """The time scale (trace seconds per replay second) at which `times` peak closest to
    `target_peak` requests/s over `window_s`. A faster replay never lowers the peak (each
    window of replay covers more of the trace), so bisect on the scale, in log space."""
    lo, hi = 1e-3, 1e3

    def peak(scale: float) -> float:
        return peak_rate([t / scale for t in times], window_s)[0]

    for _ in range(50):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if peak(mid) < target_peak else (lo, mid)
    return min((lo, hi), key=lambda s: abs(peak(s) - target_peak))


def schedule(trace: list[tuple[float, int]], stretch: tuple[float, float], duration_s: float,
             target_peak: float, window_s: float) -> tuple[list[tuple[float, int]], float]:
    """The replay (send times in s, sizes) and its time scale.

    The scale makes the stretch's peak over `window_s` `target_peak` requests/s; the replay
    then takes the
    `duration_s` (replay seconds) of the stretch that put its peak a quarter of the way in, so
    the pool is seen before, during and after the burst."""
    rows = [(t, ctx) for t, ctx in trace if stretch[0] <= t < stretch[1]]
    if not rows:
        raise typer.BadParameter(f"no requests in the trace between {stretch[0]:g} and "
                                 f"{stretch[1]:g} s")
    scale = solve_scale([t for t, _ in rows], target_peak, window_s)
    _, at = peak_rate([t for t, _ in rows], window_s)
    span = duration_s * scale
    start = min(max(stretch[0], at - span / 4), max(stretch[0], stretch[1] - span))
    plan = [((t - start) / scale, ctx) for t, ctx in rows if start <= t < start + span]
    return plan, scale


def texts_for(ctx: int, tag: int) -> list[str]:
    """The request for a row of `ctx` context tokens: 1 + ctx // 2000 texts (at most 4) of
    about 34 tokens; `tag` makes each text unique (no cache can answer it)."""
    n = min(MAX_TEXTS, 1 + ctx // TOKENS_PER_TEXT)
    body = " ".join(WORDS)
    return [f"request {tag} text {i}: {body}" for i in range(n)]


# ---------------------------------------------------------------- servers

def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def settle(max_s: float = 120.0, poll_s: float = 2.0) -> float:
    """Wait until the 1-minute load average is at most half the cores (the servers of the
    run before have stopped; their load decays over about a minute), at most `max_s`
    seconds; returns the seconds waited. Measured: the goodput part right after the spill
    comparison, at load 2.2 on 2 cores, read 0.81x; alone a minute later, 0.97x."""
    t0 = time.monotonic()
    while os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1) and time.monotonic() - t0 < max_s:
        time.sleep(poll_s)
    return time.monotonic() - t0


def write_app(folder: Path, key: str) -> Path:
    cfg = CONFIGS[key]
    path = folder / f"burst_{key.replace(' ', '_')}.py"
    cfg = {k: v.format(deadline_s=DEADLINE_S) for k, v in cfg.items()}
    path.write_text(APP_TEMPLATE.format(key=key.replace(" ", "-"), **cfg))
    return path


def running_server(app_file: Path, store: Path | None, work: Path, log: Path
                   ) -> contextlib.AbstractContextManager[str]:
    """`floodway serve APP` until its whole pool is ready (`serving.served`); yields the
    base URL and always stops it. Output goes to `log`."""
    env = {**os.environ, "FLOODWAY_JOBS_DB": str(work / f"jobs-{time.monotonic_ns()}.sqlite3"),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           # The generated app imports modal_app from the repository root.
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    if store:
        env["FLOODWAY_STORE"] = str(store)
    return served(app_file, [], env, log)


# ---------------------------------------------------------------- clients

async def closed_loop(base: str, sizes: list[int], seconds: float, clients: int) -> float:
    """Requests/s that `clients` callers in a loop get through (each waits for its answer)."""
    done, stop = 0, time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        async def caller(k: int) -> None:
            nonlocal done
            i = k
            while time.perf_counter() < stop:
                r = await client.post("/v1/embed", json={
                    "inputs": texts_for(sizes[i % len(sizes)], -i)})
                r.raise_for_status()
                done += 1
                i += clients
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(clients)))
        return done / (time.perf_counter() - t0)


@dataclass
class Step:
    """One open-loop calibration step: `rate` requests/s for `seconds`, then drained.
    `lat` holds (send time from the step start, latency) per answered request."""

    rate: float
    seconds: float
    lat: list[tuple[float, float]]
    failed: int          # not answered 200 (errors, client timeouts)

    def p95(self, lo: float, hi: float) -> float:
        """p95 latency of the requests sent between `lo` and `hi` (fractions of the step)."""
        return pct([x for t, x in self.lat if lo * self.seconds <= t < hi * self.seconds], 95)

    @property
    def growth_s(self) -> float:
        """How much the p95 latency rose from the step's first third to its last third:
        about zero while completions keep up with arrivals, the backlog's age otherwise."""
        return self.p95(2 / 3, 1.0) - self.p95(0.0, 1 / 3)

    @property
    def sustained(self) -> bool:
        return self.failed == 0 and self.growth_s <= GROWTH_S and self.p95(2 / 3, 1.0) \
            <= STEADY_P95_S


async def open_loop_step(base: str, sizes: list[int], rate: float, seconds: float,
                         tag0: int) -> Step:
    """Send `rate` requests/s, evenly spaced, for `seconds` (open loop: the client never waits
    for an answer before the next send), the request mix of the replay; wait for every
    answer. Tags start at `tag0` so that no text repeats across steps."""
    n = max(1, round(rate * seconds))
    lanes, lat, failed = Lanes(base), [], 0
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        nonlocal failed
        res = Result(send_s=i / rate)
        delay = t0 + res.send_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send_one(lanes, t0, res, sizes[(tag0 + i) % len(sizes)], -(tag0 + i), 60.0)
        if res.outcome == "served":
            lat.append((res.send_s + res.lag_s, res.latency_s))
        else:
            failed += 1

    await asyncio.gather(*(one(i) for i in range(n)))
    await lanes.aclose()
    return Step(rate, seconds, sorted(lat), failed)


async def calibrate(base: str, sizes: list[int], start: float, step_s: float,
                    console: Console) -> tuple[float, list[Step]]:
    """The highest constant open-loop rate one warm container sustains (see the module
    docstring): ramp by RAMP until a step is not sustained, then bisect twice between the
    last sustained rate and the first that was not. Returns it and every step."""
    steps: list[Step] = []
    tag = 0

    async def run(rate: float) -> Step:
        nonlocal tag
        step = await open_loop_step(base, sizes, rate, step_s, tag)
        tag += len(step.lat) + step.failed
        steps.append(step)
        console.print(f"  calibration step {rate:5.1f} requests/s: p95 {ms(step.p95(0, 1/3))}"
                      f" -> {ms(step.p95(2/3, 1))} ms (first -> last third), "
                      f"{step.failed} failed: "
                      f"{'sustained' if step.sustained else 'queue grows'}")
        await asyncio.sleep(1.0)   # let the container settle between steps
        return step

    rate = start
    if (await run(rate)).sustained:
        good = rate
        while (await run(rate * RAMP)).sustained:
            rate *= RAMP
            good = rate
        bad = rate * RAMP
    else:
        bad = rate
        while not (await run(rate / RAMP)).sustained:
            rate /= RAMP
            bad = rate
            if rate < 1.0:
                raise RuntimeError("one warm container sustains under 1 request/s")
        good = rate / RAMP
    for _ in range(2):
        mid = (good + bad) / 2
        if (await run(mid)).sustained:
            good = mid
        else:
            bad = mid
    return good, steps


@dataclass
class Result:
    """One replayed request. Times are seconds from the replay's start (perf counter)."""

    send_s: float            # scheduled send time
    lag_s: float = 0.0       # how late the client actually sent it
    outcome: str = "error"
    latency_s: float = math.nan   # send -> answer (for async: -> the 202)
    status: int = 0
    decision: str = ""
    job: str | None = None
    job_status: str = ""
    job_latency_s: float = math.nan   # send -> the job's finished_at
    sent_wall: float = 0.0
    router_s: float = math.nan   # the router's own time (its Server-Timing header)


@dataclass
class PoolTrace:
    """/readyz samples: (time from replay start, live containers), and every id seen."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    first_ids: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)

    def container_seconds(self, until_s: float) -> float:
        pts = [(t, n) for t, n in self.samples if t <= until_s]
        return sum(n * (t2 - t1) for (t1, n), (t2, _) in zip(pts, pts[1:], strict=False))

    @property
    def cold_starts(self) -> int:
        return len(self.ids - self.first_ids)


LIVE = {"starting", "warming", "ready", "busy", "draining"}


async def watch_pool(client: httpx.AsyncClient, t0: float, pool: PoolTrace,
                     stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError, ValueError):
            r = await client.get("/readyz")
            cs = [c for c in r.json()["endpoints"]["embed"] if c["state"] in LIVE]
            ids = {str(c["id"]) for c in cs}
            if not pool.samples:
                pool.first_ids = set(ids)
            pool.ids |= ids
            pool.samples.append((time.perf_counter() - t0, len(cs)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)


class Lanes:
    """The replay's sending side: one aiohttp session over kept-alive loopback connections.

    The client shares this machine's cores with the router and its containers, so it must
    cost little per request: httpx took several times aiohttp's CPU per request here, and
    its pool rescans every connection per queued request (quadratic), which read as server
    latency and send lag once hundreds of requests were in flight."""

    def __init__(self, base: str):
        self.base = base
        self.session: aiohttp.ClientSession | None = None

    async def post(self, body: dict) -> tuple[int, dict[str, str]]:
        if self.session is None:
            # Idle connections are dropped before uvicorn's 5 s keep-alive closes them:
            # reusing one the server is closing reads as a reset (an error that is not one).
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                timeout=aiohttp.ClientTimeout())
        async with self.session.post(f"{self.base}/v1/embed", json=body) as r:
            await r.read()
            return r.status, dict(r.headers)

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


async def post_embed(lanes: Lanes, ctx: int, tag: int) -> tuple[int, dict[str, str]]:
    return await lanes.post({"inputs": texts_for(ctx, tag)})


async def send_one(lanes: Lanes, t0: float, res: Result, ctx: int, tag: int,
                   timeout_s: float) -> None:
    """Send at the scheduled time; classify the answer."""
    start = time.perf_counter()
    res.lag_s = start - t0 - res.send_s
    res.sent_wall = time.time()
    try:
        r = await asyncio.wait_for(post_embed(lanes, ctx, tag), timeout_s)
    except TimeoutError:
        res.outcome, res.latency_s = "timeout", time.perf_counter() - start
        return
    except aiohttp.ClientError as e:
        res.outcome, res.latency_s, res.decision = "error", time.perf_counter() - start, repr(e)
        return
    res.latency_s = time.perf_counter() - start
    status, headers = r
    headers = {k.lower(): v for k, v in headers.items()}
    res.status, res.decision = status, headers.get("x-floodway-decision", "")
    timing = headers.get("server-timing", "")
    if "dur=" in timing:
        res.router_s = float(timing.split("dur=")[1].split(",")[0].split(";")[0]) / 1000
    if status == 200:
        res.outcome = "served"
    elif status == 202:
        res.outcome, res.job = "async", headers["location"]
    elif status in (429, 503):
        res.outcome = "shed"


async def poll_jobs(client: httpx.AsyncClient, results: list[Result], wait_s: float) -> None:
    """Poll every pending job (1 s rounds) until done or `wait_s` has passed."""
    pending = [r for r in results if r.job]
    end = time.perf_counter() + wait_s
    while pending and time.perf_counter() < end:
        still = []
        for res in pending:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                wire = (await client.get(res.job)).json()
                res.job_status = wire.get("status", "")
                if wire.get("finished_at"):
                    done = datetime.fromisoformat(wire["finished_at"].replace("Z", "+00:00"))
                    res.job_latency_s = done.timestamp() - res.sent_wall
                    continue
            still.append(res)
        pending = still
        if pending:
            await asyncio.sleep(1.0)


async def replay(base: str, plan: list[tuple[float, int]], timeout_s: float, job_wait_s: float,
                 progress: Progress, label: str) -> tuple[list[Result], PoolTrace, float]:
    """Open-loop replay of `plan`; returns the results, the pool trace and the end of activity
    (seconds from the start: the last answer or finished job)."""
    results = [Result(send_s=t) for t, _ in plan]
    pool, stop = PoolTrace(), asyncio.Event()
    task = progress.add_task(f"{label}: replay", total=len(plan))
    lanes = Lanes(base)
    async with httpx.AsyncClient(base_url=base, timeout=10) as side:
        t0 = time.perf_counter()
        watcher = asyncio.create_task(watch_pool(side, t0, pool, stop))
        inflight = set()
        for i, (res, (_, ctx)) in enumerate(zip(results, plan, strict=True)):
            delay = t0 + res.send_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = asyncio.create_task(send_one(lanes, t0, res, ctx, i, timeout_s))
            t.add_done_callback(lambda _: progress.advance(task))
            inflight.add(t)
            t.add_done_callback(inflight.discard)
        await asyncio.gather(*inflight)
        last = time.perf_counter() - t0
        await lanes.aclose()
        await poll_jobs(side, results, job_wait_s)
        t0_wall = time.time() - (time.perf_counter() - t0)
        done_jobs = [r.sent_wall + r.job_latency_s - t0_wall for r in results
                     if not math.isnan(r.job_latency_s)]
        end = max([last, *done_jobs])
        # Keep sampling until the end of activity has been covered.
        while pool.samples and pool.samples[-1][0] < end:
            await asyncio.sleep(0.25)
        stop.set()
        await watcher
    return results, pool, end


# ---------------------------------------------------------------- figures

def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def lost(r: Result) -> bool:
    if r.outcome in ("timeout", "error"):
        return True
    if r.outcome == "shed":
        return r.latency_s >= SHED_FAST_S
    if r.outcome == "async":
        return r.job_status != "succeeded"
    return False


@dataclass
class Run:
    name: str
    results: list[Result]
    pool: PoolTrace
    end_s: float
    load: str = ""   # load average (1, 5, 15 min) as the replay started

    def of(self, outcome: str) -> list[Result]:
        return [r for r in self.results if r.outcome == outcome]

    def p(self, outcome: str, q: float) -> float:
        return pct([r.latency_s for r in self.of(outcome)], q)


def ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:,.0f}" if x >= 0.1 else f"{x * 1000:.1f}"


def print_tables(console: Console, runs: list[Run], capacity: float, scale: float,
                 peaks: tuple[float, float, float], timeout_s: float) -> None:
    t = Table(title="latency per outcome (ms, from the actual send; router: its Server-Timing)")
    for col in ("config", "outcome", "count", "p50", "p95", "p99", "max", "router p50",
                "router p99"):
        t.add_column(col, justify="left" if col in ("config", "outcome") else "right")
    for run in runs:
        for o in OUTCOMES:
            rs = run.of(o)
            if not rs:
                continue
            lat = [r.latency_s for r in rs]
            inside = [r.router_s for r in rs if not math.isnan(r.router_s)]
            t.add_row(run.name, o if o != "async" else "async (202)", str(len(rs)),
                      *(ms(pct(lat, q)) for q in (50, 95, 99)), ms(max(lat)),
                      *(ms(pct(inside, q)) for q in (50, 99)))
            if o == "error":
                kinds: dict[str, int] = {}
                for r in rs:
                    k = str(r.status or r.decision)
                    kinds[k] = kinds.get(k, 0) + 1
                t.add_row(run.name, "  by status", ", ".join(f"{k}: {v}" for k, v in
                                                            sorted(kinds.items())))
            if o == "async":
                jl = [r.job_latency_s for r in rs if not math.isnan(r.job_latency_s)]
                t.add_row(run.name, "  job done", f"{len(jl)}/{len(rs)}",
                          *(ms(pct(jl, q)) for q in (50, 95, 99)), ms(max(jl, default=math.nan)))
        t.add_section()
    console.print(t)
    d = Table(title="per decision (X-Floodway-Decision; ms, from the actual send)")
    for col in ("config", "decision", "count", "outcomes", "p50", "p95", "p99", "max"):
        d.add_column(col, justify="left" if col in ("config", "decision", "outcomes")
                     else "right")
    for run in runs:
        by: dict[str, list[Result]] = {}
        for r in run.results:
            key = r.decision if r.decision and r.status else "(no answer)"
            by.setdefault(key, []).append(r)
        for key, rs in sorted(by.items()):
            outs: dict[str, int] = {}
            for r in rs:
                outs[r.outcome] = outs.get(r.outcome, 0) + 1
            lat = [r.latency_s for r in rs]
            d.add_row(run.name, key, str(len(rs)),
                      ", ".join(f"{k} {v}" for k, v in sorted(outs.items())),
                      *(ms(pct(lat, q)) for q in (50, 95, 99)), ms(max(lat)))
        d.add_section()
    console.print(d)
    s = Table(title="per configuration")
    for col in ("config", "requests", "lost", "cold starts", "container-s", "window s",
                "decisions", "client lag p99", "load at start"):
        s.add_column(col, justify="left" if col in ("config", "decisions") else "right")
    for run in runs:
        decisions: dict[str, int] = {}
        for r in run.results:
            if r.decision and not r.decision.startswith("Connect"):
                decisions[r.decision] = decisions.get(r.decision, 0) + 1
        s.add_row(run.name, str(len(run.results)), str(sum(map(lost, run.results))),
                  str(run.pool.cold_starts), f"{run.pool.container_seconds(run.end_s):.1f}",
                  f"{run.end_s:.1f}",
                  ", ".join(f"{k} {v}" for k, v in sorted(decisions.items())),
                  ms(pct([r.lag_s for r in run.results], 99)), run.load)
    console.print(s)
    peak, window_s, peak_1s = peaks
    console.print(f"one warm container sustains {capacity:.1f} requests/s (open loop); replay peak "
                  f"over {window_s:g} s {peak:.1f} requests/s = {peak / capacity:.2f}x (over 1 s: "
                  f"{peak_1s:.0f} = {peak_1s / capacity:.2f}x); trace replayed at {scale:.3f}x "
                  f"its speed; deadline "
                  f"{DEADLINE_S:g} s; client timeout {timeout_s:g} s")


def print_targets(console: Console, fw: Run, base: Run) -> None:
    served_p99 = fw.p("served", 99)
    timeouts = len(fw.of("timeout"))
    lost_n = sum(map(lost, fw.results))
    slow_sheds = sum(1 for r in fw.of("shed") if r.latency_s >= SHED_FAST_S)
    base_p99 = pct([r.latency_s for r in base.results if r.outcome in ("served", "timeout")], 99)
    ratio = base_p99 / served_p99 if served_p99 else math.nan

    def word(ok: bool) -> str:
        return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"

    late = sum(1 for r in fw.of("served") if r.latency_s > DEADLINE_S)
    console.print(f"{word(served_p99 <= DEADLINE_S and timeouts == 0)}  floodway served p99 "
                  f"{ms(served_p99)} ms <= deadline {DEADLINE_S * 1000:.0f} ms ({late} of "
                  f"{len(fw.of('served'))} served later), client timeouts {timeouts} (target 0)")
    console.print(f"{word(lost_n == 0)}  floodway lost requests {lost_n} (target 0: timeouts "
                  f"{timeouts}, errors {len(fw.of('error'))}, sheds >= 20 ms {slow_sheds}, "
                  f"jobs not succeeded {sum(1 for r in fw.of('async') if lost(r))})")
    console.print(f"{word(ratio >= 5)}  p99 ratio no-spill / floodway served = "
                  f"{ms(base_p99)} / {ms(served_p99)} ms = {ratio:.1f}x (target >= 5x; no-spill "
                  f"p99 over served and timed-out requests, {len(base.of('timeout'))} timeouts)")


def plot(runs: list[Run], plan: list[tuple[float, int]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"served": "tab:green", "async": "tab:blue", "shed": "tab:orange",
              "timeout": "tab:red", "error": "black"}
    secs = math.ceil(max(t for t, _ in plan)) + 1
    rate = [0] * secs
    for t, _ in plan:
        rate[int(t)] += 1
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 4 * len(runs)), sharex=True)
    for ax, run in zip(axes, runs, strict=True):
        for o in OUTCOMES:
            rs = run.of(o)
            if rs:
                ax.scatter([r.send_s for r in rs], [r.latency_s * 1000 for r in rs], s=6,
                           c=colors[o], label=f"{o} ({len(rs)})", alpha=0.7)
        ax.axhline(DEADLINE_S * 1000, color="gray", ls="--", lw=0.8, label="deadline")
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{run.name}: {run.pool.cold_starts} cold starts, "
                     f"{run.pool.container_seconds(run.end_s):.0f} container-s")
        twin = ax.twinx()
        twin.step(range(secs), rate, where="post", color="gray", alpha=0.5)
        twin.set_ylabel("arrivals (requests/s)")
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("send time (s from replay start)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


# ---------------------------------------------------------------- main

def main(trace: Annotated[Path, typer.Option(help="the Azure LLM code trace (CSV)")]
         = DEFAULT_TRACE,
         start_s: Annotated[float, typer.Option(help="stretch start, trace seconds")] = 840.0,
         minutes: Annotated[float, typer.Option(min=0.1, help="stretch length")] = 2.0,
         duration_s: Annotated[float, typer.Option(min=5, help="replay seconds")] = 60.0,
         peak_x: Annotated[float, typer.Option(min=0.1, help="peak / warm capacity")] = 3.0,
         peak_window_s: Annotated[float, typer.Option(
             min=1, help="the peak's resolution: a sliding window, seconds")] = 2.0,
         deadline_s: Annotated[float, typer.Option(
             min=0.1, help="floodway's deadline for served requests")] = DEADLINE_S,
         calib_s: Annotated[float, typer.Option(min=6, help="seconds per calibration step")]
         = 12.0,
         client_timeout_s: Annotated[float, typer.Option(min=1)] = 30.0,
         job_wait_s: Annotated[float, typer.Option(min=1)] = 120.0,
         store: Annotated[Path | None, typer.Option(help="artifact store root")] = None,
         out: Annotated[Path, typer.Option()] = ROOT / "benchmarks" / "out" / "burst.png",
         goodput: Annotated[bool, typer.Option(
             help="then goodput while overloaded vs the closed-loop capacity, token-aware "
                  "batching on and off (benchmarks/goodput.py)")] = True,
         ) -> None:
    from floodway.build.store import ArtifactStore

    global DEADLINE_S
    DEADLINE_S = deadline_s

    ArtifactStore(store).latest("embed")   # fails early, naming the build command
    console = Console(width=130)
    rows = load_trace(trace)
    stretch = (start_s, start_s + minutes * 60)
    sizes = [ctx for t, ctx in rows if stretch[0] <= t < stretch[1]]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="floodway-burst-") as tmp, \
            Progress(console=Console(stderr=True)) as progress:
        work = Path(tmp)
        # The servers' output is kept beside the plot: it names each decision's cause.
        log = out.with_suffix(".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        apps = {k: write_app(work, k) for k in CONFIGS}
        task = progress.add_task("calibrating one warm container", total=None)
        console.print(f"load average before calibration: {load_average()}")
        with running_server(apps["no spill"], store, work, log) as base:
            asyncio.run(closed_loop(base, sizes, 2.0, 4))   # warm-up, not counted
            # A closed-loop figure only seeds the ramp (it reads low: see the docstring).
            closed = asyncio.run(closed_loop(base, sizes, 5.0, CALIB_CLIENTS))
            capacity, steps = asyncio.run(calibrate(base, sizes, closed, calib_s, console))
        progress.remove_task(task)
        plan, scale = schedule(rows, stretch, duration_s, peak_x * capacity, peak_window_s)
        peak, _ = peak_rate([t for t, _ in plan], peak_window_s)
        peak_1s, _ = peak_rate([t for t, _ in plan], 1.0)
        for name, app_file in apps.items():
            with running_server(app_file, store, work, log) as base:
                asyncio.run(closed_loop(base, sizes, 1.0, 4))   # measured service times
                load = load_average()
                results, pool, end = asyncio.run(replay(
                    base, plan, client_timeout_s, job_wait_s, progress, name))
            runs.append(Run(name, results, pool, end, load))
    print_tables(console, runs, capacity, scale, (peak, peak_window_s, peak_1s),
                 client_timeout_s)
    console.print(f"calibration: closed loop ({CALIB_CLIENTS} clients) {closed:.1f} requests/s;"
                  " open-loop steps (requests/s): " + ", ".join(
                      f"{st.rate:.1f} {'ok' if st.sustained else 'grows'}" for st in steps))
    console.print(f"load average after the runs: {load_average()}")
    print_targets(console, runs[0], runs[1])
    plot(runs, plan, out)
    console.print(f"plot: {out}")
    console.print(f"servers' log: {log}")
    lag = statistics.median(r.lag_s for r in runs[0].results)
    console.print(f"median client send lag {ms(lag)} ms (floodway run)")
    if goodput:
        import goodput as measure_goodput  # benchmarks/goodput.py, beside this file

        waited = settle()
        console.print("\nGoodput while overloaded against the closed-loop capacity of the same "
                      "mix, measured in this run, token-aware batching on and off "
                      "(benchmarks/goodput.py: one text per request, 1.5 s deadline; after "
                      f"{waited:.0f} s for the load to settle, now {load_average()}):")
        measure_goodput.main(trace=trace, start_s=start_s, minutes=minutes, store=store)


if __name__ == "__main__":
    typer.run(main)
