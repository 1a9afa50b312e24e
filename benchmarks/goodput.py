"""Goodput while overloaded against the closed-loop capacity, token-aware batching on and off.

The request mix (the "Ray Serve comparison replay"): the Azure LLM code trace
(`azure_llm_2023_code.csv`, Microsoft Azure, Azure Public Dataset, CC-BY-4.0), one text per
request, the text's length taken from the row's ContextTokens: clamp(ContextTokens // 37, 1,
200) words, so the trace's largest context (7,437 tokens) is a 200-word text; in the
default stretch the median is 43 words, the 90th percentile 119 and the mean 54. The words
are plain short English words (a fixed pool, rotated per request): all-MiniLM-L6-v2's
tokenizer makes 46 tokens of 43 words and 209 of 200 (within the build's max_seq_len of
256), the router's estimate 56 and 260 (capped at 256). Every request carries
the deadline `--deadline-s` (1.5 s, ``X-Deadline-Ms``; also the route's `timeout_s`).

Each configuration gets a fresh `floodway serve` of modal_app.py's `embed` (a generated app
file): a warm pool of 2 containers (min = max = 2: this machine has two cores), the default
`fw.Route` but for ``timeout_s=--deadline-s`` and ``spill=("cold", "async")``, ``cache=False``
(a repeated text must not be answered from a cache), and

    (on)   modal_app.embed's own `fw.Batching` (token-aware: batches cut by padded tokens as
           well as rows, similar lengths grouped, service time and decide() in tokens);
    (off)  the same rows and wait with ``token_aware=False`` (batches cut by rows only, no
           grouping, service time and decide() in rows).

On each server, first the closed-loop capacity: `--clients` (16) callers in a loop, each
waiting for its answer before sending its next request, for `--calib-s` (8) seconds, with the
same mix (the stretch's rows in turn); capacity = answers 200 per second. Its requests carry a
30 s deadline: with the replay's 1.5 s the router spills some to async jobs, a 202 answers at
once, the callers spin, and the job backlog they leave fills the containers through the
replay (a first run measured 221 answers 200 and 185 jobs in 8 s, and the replay then
spilled 553 of 579 requests, quiet seconds included, while that backlog drained). Then
the replay: the trace stretch from `--start-s` (840 s, minutes 14-16, the trace's busiest)
time-scaled so that its peak over 2 s (`burst.schedule`) is `--peak-x` (3) times that
capacity, and the `--duration-s` (40 s) of it that puts the peak a quarter of the way in sent
open loop (send times from the trace, never waiting for answers; aiohttp, as burst.py).

Printed per configuration:
- capacity (requests/s) and the closed loop's answers by status;
- the overloaded seconds: the 1 s bins of the replay (by send time) whose arrivals exceed the
  capacity; arrivals/s over them; goodput = 200s answered within the deadline + 50 ms (client
  latency, from the actual send) among the requests sent in those seconds, per second; the
  ratio goodput / capacity, PASS at >= 0.9 (the issue's target);
- outcomes of all replayed requests: 200 within the deadline, 200 late, 202, 429/503, other
  (another status, a connection error, a client timeout of 30 s);
- violations of "every request is answered within its deadline + 50 ms with 200, 202, or
  429/503 carrying Retry-After": answers later than that (any status), 429/503 without
  Retry-After, other outcomes;
- p50/p99 of the in-deadline 200s, the most the client sent late (send lag);
- the router's side (/metrics deltas) over the closed loop and over the replay: decisions by
  action, batches with their mean rows and compute seconds (summed over the containers, sync
  and job batches alike), the jobs at the end; the ``X-Floodway-Decision`` header counts by
  status; the requests answered 202 in the seconds that were not overloaded;
- the containers from /readyz, sampled every 0.1 s through the replay: the share of the time
  both, one or neither had a batch in flight, and for each spill to async the state of the
  sample before its send (does the router spill while a container idles?);
- with `--per-second`, each replay second: requests sent (* overloaded) and their outcomes,
  the batches that ended in it (count, mean rows, compute seconds) and the jobs claimed
  ("running": held by the router's job feed, waiting for or on a container) and queued;
- the load average before the configuration and after its replay (other work on the machine
  moves the capacity: compare runs only at similar loads).

Each replay is scaled to its own configuration's capacity (the ratio is the target); with
`--same-replay` every configuration gets the first one's schedule, so that their goodput
compares at the same offered load.

    .venv/bin/python benchmarks/goodput.py [--deadline-s 1.5] [--peak-x 3] [--duration-s 40]
        [--calib-s 8] [--clients 16] [--start-s 840] [--minutes 2] [--configs on,off]
        [--per-second] [--same-replay] [--trace PATH] [--store DIR]

Needs a build of modal_app.py (`make run`, or `floodway build modal_app.py`).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import math
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import aiohttp
import typer
from burst import load_average, load_trace, peak_rate, schedule
from serving import served

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
CONTEXT_TOKENS_PER_WORD = 37      # the trace's largest context (7,437) -> 200 words
MAX_WORDS = 200
LATE_OK_S = 0.050                 # the allowance over the deadline
PEAK_WINDOW_S = 2.0
TARGET_RATIO = 0.9
CLIENT_TIMEOUT_S = 30.0
# The closed loop's deadline: long enough that every request is served (200), none spilled
# to a job (a 202 answers at once, so a caller would spin and leave a job backlog behind).
CLOSED_LOOP_DEADLINE_S = 30.0
READYZ_S = 0.1                    # how often the replay samples the containers' batches
KEEPALIVE_S = 2.0                 # under uvicorn's 5 s, as burst.Lanes
POOL = ("the router estimates each text before it is batched so that a long input does not "
        "pad every short one in its batch while the queue stays bounded and each request "
        "gets a fast honest answer within its deadline or a job to poll later when the warm "
        "containers are busy and the burst lasts longer than one batch can absorb").split()

APP = '''"""Generated by benchmarks/goodput.py: modal_app.py's `embed`, {title}."""
import dataclasses

import floodway as fw
import modal_app

app = fw.App("goodput-{key}")
embed = app.endpoint(
    model=fw.HFModel(modal_app.MODEL_REPO, revision=modal_app.MODEL_REVISION),
    build=modal_app.embed.build,
    warm=fw.WarmPool(min_containers=2, max_containers=2),
    route=fw.Route(timeout_s={deadline_s}, spill=("cold", "async")),
    batching={batching},
    cache=False,
)(modal_app.embed.fn)
'''
CONFIGS = {
    "on": ("token-aware batching on", "modal_app.embed.batching"),
    "off": ("token-aware batching off",
            "dataclasses.replace(modal_app.embed.batching, token_aware=False)"),
}


def words_for(ctx: int) -> int:
    """A row's text length in words: clamp(ContextTokens // 37, 1, 200)."""
    return max(1, min(MAX_WORDS, ctx // CONTEXT_TOKENS_PER_WORD))


def text(words: int, tag: int) -> str:
    return " ".join(POOL[(tag + i) % len(POOL)] for i in range(words))


@dataclass
class Answer:
    send_s: float = 0.0        # actual send time from the start, s
    lag_s: float = 0.0         # actual - scheduled send
    status: int = 0            # -1: connection error or client timeout
    latency_s: float = math.nan
    retry_after: bool = False
    decision: str = ""


async def post(session: aiohttp.ClientSession, base: str, words: int, tag: int,
               deadline_s: float, out: Answer) -> None:
    t = time.perf_counter()
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT_S), session.post(
                f"{base}/v1/embed", json={"inputs": [text(words, tag)]},
                headers={"X-Deadline-Ms": str(round(deadline_s * 1000))}) as r:
            await r.read()
            out.status, out.retry_after = r.status, "Retry-After" in r.headers
            out.decision = r.headers.get("X-Floodway-Decision", "")
    except (TimeoutError, aiohttp.ClientError):
        out.status = -1
    out.latency_s = time.perf_counter() - t


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
        timeout=aiohttp.ClientTimeout())


async def closed_loop(base: str, sizes: list[int], clients: int, seconds: float
                      ) -> tuple[float, collections.Counter]:
    """Answers 200 per second that `clients` callers in a loop get (each sends its next
    request once it has its answer; deadline CLOSED_LOOP_DEADLINE_S), and the answers by
    status."""
    statuses: collections.Counter = collections.Counter()
    async with session() as s:
        stop = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            i = k
            while time.perf_counter() < stop:
                a = Answer()
                await post(s, base, sizes[i % len(sizes)], -1 - i, CLOSED_LOOP_DEADLINE_S, a)
                statuses[a.status] += 1
                i += clients
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(clients)))
        return statuses[200] / (time.perf_counter() - t0), statuses


async def replay(base: str, plan: list[tuple[float, int]], deadline_s: float
                 ) -> tuple[list[Answer], list[dict], list[tuple[float, list[int]]]]:
    """Send each (time, ContextTokens) of `plan` at its time, open loop. Returns every
    answer; /metrics scraped every second from the start (index k: at k s) until the last
    answer; and (time, batches in flight per container) from /readyz every READYZ_S."""
    out, samples, pool = [Answer() for _ in plan], [], []
    async with session() as s:
        t0, tasks = time.perf_counter(), []

        async def sample() -> None:
            while True:
                samples.append(await scrape(base))
                await asyncio.sleep(max(0.0, t0 + len(samples) - time.perf_counter()))

        async def watch() -> None:
            while True:
                t = time.perf_counter() - t0
                with contextlib.suppress(aiohttp.ClientError, ValueError, KeyError):
                    async with s.get(f"{base}/readyz") as r:
                        body = await r.json()
                    pool.append((t, [c.get("inflight", 0) for c in body["endpoints"]["embed"]
                                     if c["state"] in ("ready", "busy")]))
                await asyncio.sleep(READYZ_S)
        sampler, watcher = asyncio.create_task(sample()), asyncio.create_task(watch())
        for i, (a, (at, ctx)) in enumerate(zip(out, plan, strict=True)):
            if (delay := t0 + at - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            a.send_s = time.perf_counter() - t0
            a.lag_s = a.send_s - at
            tasks.append(asyncio.create_task(post(s, base, words_for(ctx), i, deadline_s, a)))
        await asyncio.gather(*tasks)
        sampler.cancel()
        watcher.cancel()
        samples.append(await scrape(base))
    return out, samples, pool


SAMPLE = re.compile(r'^(floodway_\w+?)(?:\{(.*)\})? ([-+0-9.eE]+|NaN|[+-]Inf)$')


async def scrape(base: str) -> dict[tuple[str, str], float]:
    """/metrics as {(name, labels), value} for the families read here."""
    keep = ("floodway_decisions_total", "floodway_batch_rows_sum", "floodway_batch_rows_count",
            "floodway_batch_seconds_sum", "floodway_batch_seconds_count", "floodway_jobs",
            "floodway_spills_total", "floodway_sheds_total")
    async with aiohttp.ClientSession() as s, s.get(f"{base}/metrics") as r:
        body = await r.text()
    out = {}
    for line in body.splitlines():
        if (m := SAMPLE.match(line)) and m.group(1) in keep:
            labels = ",".join(x for x in (m.group(2) or "").split(",")
                              if x and not x.startswith("endpoint="))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) >= 2 else \
        (xs[0] if xs else math.nan)


@dataclass
class Summary:
    capacity: float
    overloaded_s: int
    arrivals_per_s: float
    goodput: float

    @property
    def ratio(self) -> float:
        return self.goodput / self.capacity if self.capacity else math.nan


def summarize(out: list[Answer], capacity: float, deadline_s: float) -> Summary:
    """The overloaded seconds (1 s bins by send time with more arrivals than `capacity`) and
    the in-deadline 200s among the requests sent in them, per second."""
    over = [b for b in by_second(out).values() if len(b) > capacity]
    good = sum(a.status == 200 and a.latency_s <= deadline_s + LATE_OK_S for b in over for a in b)
    n = len(over)
    return Summary(capacity, n, sum(map(len, over)) / n if n else math.nan,
                   good / n if n else math.nan)


def router_line(before: dict, after: dict) -> str:
    """What the router did between two scrapes: decisions, batches, their rows and compute
    seconds, and the jobs left queued or running."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    decisions = {lbl.split('"')[1]: round(v) for (n, lbl), v in delta.items()
                 if n == "floodway_decisions_total" and v}
    batches = delta.get(("floodway_batch_rows_count", ""), 0.0)
    rows = delta.get(("floodway_batch_rows_sum", ""), 0.0)
    secs = delta.get(("floodway_batch_seconds_sum", ""), 0.0)
    jobs = {lbl.split('"')[1]: round(v) for (n, lbl), v in after.items()
            if n == "floodway_jobs" and v}
    return (f"decisions {decisions}; {batches:.0f} batches, "
            f"{rows / batches if batches else math.nan:.2f} rows and "
            f"{secs / batches * 1000 if batches else math.nan:.0f} ms each ({secs:.1f} "
            f"compute-s, {rows / secs if secs else math.nan:.1f} rows per compute-s); "
            f"jobs at the end {jobs}")


def report(key: str, s: Summary, out: list[Answer], deadline_s: float,
           before: dict, after: dict, samples: list[dict], per_second: bool) -> None:
    limit = deadline_s + LATE_OK_S
    on_time = [a.latency_s for a in out if a.status == 200 and a.latency_s <= limit]
    late = [a for a in out if not a.latency_s <= limit]
    shed = [a for a in out if a.status in (429, 503)]
    other = [a for a in out if a.status not in (200, 202, 429, 503)]
    verdict = "PASS" if s.ratio >= TARGET_RATIO else "FAIL"
    print(f"[{key}] overloaded seconds {s.overloaded_s}: arrivals {s.arrivals_per_s:.1f}/s, "
          f"goodput {s.goodput:.1f}/s, capacity {s.capacity:.1f}/s, ratio {s.ratio:.2f} "
          f"({verdict} vs {TARGET_RATIO})")
    print(f"[{key}] outcomes of {len(out)}: 200 within {limit:g} s {len(on_time)}, "
          f"200 late {sum(a.status == 200 for a in late)}, 202 {sum(a.status == 202 for a in out)}"
          f", 429/503 {len(shed)}, other {len(other)}")
    print(f"[{key}] violations: late answers (> {limit:g} s) {len(late)} "
          f"(by status {dict(collections.Counter(a.status for a in late))}), 429/503 without "
          f"Retry-After {sum(not a.retry_after for a in shed)}, other {len(other)}")
    print(f"[{key}] in-deadline 200s p50 {pct(on_time, 50) * 1000:.0f} ms, p99 "
          f"{pct(on_time, 99) * 1000:.0f} ms; latest send {max(a.lag_s for a in out) * 1000:.0f}"
          f" ms behind schedule")
    print(f"[{key}] router over the replay: {router_line(before, after)}")
    headers = collections.Counter((a.status, a.decision) for a in out)
    print(f"[{key}] X-Floodway-Decision by status: "
          + ", ".join(f"{st} {d or '-'}: {n}" for (st, d), n in sorted(headers.items())))
    quiet = [a for b in by_second(out).values() if len(b) <= s.capacity for a in b]
    print(f"[{key}] in the seconds not overloaded: {len(quiet)} sent, "
          f"{sum(a.status == 202 for a in quiet)} answered 202")
    if per_second:
        print_seconds(out, samples, s.capacity, limit)


def pool_line(out: list[Answer], pool: list[tuple[float, list[int]]]) -> str:
    """How busy the containers were (/readyz samples) and what they were doing when the
    router spilled a request to a job: the sample just before each spill's send."""
    if not pool:
        return "no /readyz samples"
    times = [t for t, _ in pool]
    idle = [sum(n == 0 for n in ns) for _, ns in pool]
    spills = [a for a in out if a.decision == "spill_async"]
    at = [idle[max(0, bisect.bisect_right(times, a.send_s) - 1)] for a in spills]
    return (f"/readyz every {READYZ_S:g} s ({len(pool)} samples): both containers with a "
            f"batch in flight {sum(i == 0 for i in idle) / len(pool):.0%} of the time, one "
            f"idle {sum(i == 1 for i in idle) / len(pool):.0%}, both idle "
            f"{sum(i >= 2 for i in idle) / len(pool):.0%}; spills to async "
            f"{len(spills)}, sent with both busy {sum(i == 0 for i in at)}, one idle "
            f"{sum(i == 1 for i in at)}, both idle {sum(i >= 2 for i in at)}")


def by_second(out: list[Answer]) -> dict[int, list[Answer]]:
    bins: dict[int, list[Answer]] = collections.defaultdict(list)
    for a in out:
        bins[int(a.send_s)].append(a)
    return bins


def print_seconds(out: list[Answer], samples: list[dict], capacity: float, limit: float
                  ) -> None:
    """Each replay second: requests sent (* overloaded) and their outcomes; batches that
    ended in that second (/metrics deltas: count, mean rows, compute-s summed over the
    containers), and the jobs queued and running at its end."""
    bins = by_second(out)
    for sec in range(max(len(samples) - 1, max(bins) + 1)):
        b = bins.get(sec, [])
        c = collections.Counter("ok" if a.status == 200 and a.latency_s <= limit
                                else str(a.status) for a in b)
        line = f"  {'*' if len(b) > capacity else ' '} s {sec:3d}: sent {len(b):3d} " + \
            " ".join(f"{k} {v}" for k, v in sorted(c.items()))
        if sec + 1 < len(samples):
            d = {k: samples[sec + 1].get(k, 0.0) - samples[sec].get(k, 0.0)
                 for k in samples[sec + 1]}
            n = d.get(("floodway_batch_rows_count", ""), 0.0)
            jobs = {lbl.split('"')[1]: round(v) for (m, lbl), v in samples[sec + 1].items()
                    if m == "floodway_jobs"}
            line = f"{line:<40} | batches {n:2.0f}, rows " \
                f"{d.get(('floodway_batch_rows_sum', ''), 0.0) / n if n else 0:5.1f}, " \
                f"compute {d.get(('floodway_batch_seconds_sum', ''), 0.0):4.2f} s | jobs " \
                f"queued {jobs.get('queued', 0)} running {jobs.get('running', 0)}"
        print(line)


def main(
        deadline_s: Annotated[float, typer.Option(help="each request's deadline, s")] = 1.5,
        peak_x: Annotated[float, typer.Option(help="the replay's 2 s peak / capacity")] = 3.0,
        duration_s: Annotated[float, typer.Option(help="replay length, s")] = 40.0,
        calib_s: Annotated[float, typer.Option(help="closed-loop capacity run, s")] = 8.0,
        clients: Annotated[int, typer.Option(help="closed-loop callers")] = 16,
        start_s: Annotated[float, typer.Option(help="trace stretch start, s")] = 840.0,
        minutes: Annotated[float, typer.Option(help="trace stretch length")] = 2.0,
        configs: Annotated[str, typer.Option(help="which, in order: on,off")] = "on,off",
        per_second: Annotated[bool, typer.Option(help="print each replay second")] = False,
        same_replay: Annotated[bool, typer.Option(
            help="replay the first configuration's schedule to every one (default: each its "
                 "own, scaled to its own capacity)")] = False,
        trace: Annotated[Path, typer.Option(help="the Azure LLM code trace (CSV)")]
        = DEFAULT_TRACE,
        store: Annotated[Path | None, typer.Option(help="artifact store (default: "
                                                        "floodway build's)")] = None) -> None:
    keys = [k.strip() for k in configs.split(",") if k.strip()]
    if bad := [k for k in keys if k not in CONFIGS]:
        raise typer.BadParameter(f"--configs: {bad} not in {sorted(CONFIGS)}")
    rows = load_trace(trace)
    stretch = (start_s, start_s + minutes * 60)
    sizes = [words_for(ctx) for t, ctx in rows if stretch[0] <= t < stretch[1]]
    if not sizes:
        raise typer.BadParameter(f"no requests in the trace between {stretch[0]:g} and "
                                 f"{stretch[1]:g} s")
    work = Path(tempfile.mkdtemp(prefix="fw-goodput-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    if store:
        env["FLOODWAY_STORE"] = str(store)
    print(f"mix: {len(sizes)} requests in the stretch, words per text p50 "
          f"{pct(sizes, 50):.0f}, p90 {pct(sizes, 90):.0f}, mean {statistics.mean(sizes):.1f};"
          f" deadline {deadline_s:g} s; logs in {work}")
    plans: list[tuple[list[tuple[float, int]], float]] = []
    for key in keys:
        title, batching = CONFIGS[key]
        app_file = work / f"goodput_{key}.py"
        app_file.write_text(APP.format(key=key, title=title, batching=batching,
                                       deadline_s=deadline_s))
        env["FLOODWAY_JOBS_DB"] = str(work / f"jobs-{key}.sqlite3")
        load_before = load_average()
        with served(app_file, [], env, work / f"serve-{key}.log") as base:
            start = asyncio.run(scrape(base))
            capacity, statuses = asyncio.run(closed_loop(base, sizes, clients, calib_s))
            if not (same_replay and plans):
                plans.append(schedule(rows, stretch, duration_s, peak_x * capacity,
                                      PEAK_WINDOW_S))
            plan, scale = plans[-1]
            times = [t for t, _ in plan]
            print(f"[{key}] {title}: capacity {capacity:.1f} requests/s ({clients} clients, "
                  f"{calib_s:g} s, answers {dict(statuses)}); replay {len(plan)} requests "
                  f"over {duration_s:g} s at {scale:.2f}x trace speed, peak "
                  f"{peak_rate(times, PEAK_WINDOW_S)[0]:.1f}/s over 2 s, "
                  f"{peak_rate(times, 1.0)[0]:.0f}/s over 1 s")
            before = asyncio.run(scrape(base))
            print(f"[{key}] router over the closed loop: {router_line(start, before)}")
            out, samples, pool = asyncio.run(replay(base, plan, deadline_s))
        report(key, summarize(out, capacity, deadline_s), out, deadline_s, before,
               samples[-1], samples, per_second)
        print(f"[{key}] {pool_line(out, pool)}")
        print(f"[{key}] load average {load_before} before, {load_average()} after")


if __name__ == "__main__":
    typer.run(main)
