"""Text generation: open-loop replay of a real LLM trace against `floodway serve`,
continuous batching vs one sequence at a time, side by side in one run.

What is replayed: `--requests` consecutive rows of `azure_llm_2023_code.csv` (Microsoft
Azure, Azure Public Dataset, CC-BY-4.0) from `--start-s` seconds into it. Send times keep the
trace's gaps, all multiplied by one factor (below), and never wait for answers (open loop).
Each row's ContextTokens and GeneratedTokens become the request's prompt length and
max_new_tokens, scaled to what a small model on a CPU runs (`generate_parts`: prompts 8..200
tokens at 1/37 of the context, max_new_tokens 4..128 at the trace's own length). Every
request streams (SSE, temperature 0) with ``X-Deadline-Ms`` on its first token.

The model: a GPT-2 architecture with untrained seeded weights, `--layers` x `--width`
(default 6 x 384, 6 heads, about 11 M parameters; examples/tiny_gpt2.py's recipe and
tokenizer, made into the work folder). Its end-of-sequence embedding is zero, so greedy
decoding never stops early and each answer has the trace's length (the tokens asked and
received are both printed). The toy size of the example (2 x 64) decodes a step in about a
millisecond, where the router's per-chunk work, not the model, sets the pace.

Two endpoints, the same model, build settings, route (deadline, queue of 64, no spill: a
request that cannot get its first token in time is shed, 503) and one container each:

    (a) batched         fw.Generation(max_sequences=8): the engine's continuous batching
    (b) one at a time   fw.Generation(max_sequences=1): the naive server, one sequence runs
                        while the rest wait in the router's queue

Each is an app file of its own (so that each build and store stays apart), served by its
own `floodway serve APP --containers 1`, one after the other, (b) first. The load: against
(b), `--calib` rows of the slice run one at a time and a line seconds = a + b x tokens is
fitted; the slice then arrives at `--load-x`
(1.5) times the rate that line says one at a time serves for the slice's mix (its bursts go
well above that). Both servers get the same warm-up (those rows one at a time, then all at
once) so that the router has measured the container before the replay. Per request: outcome
(finished, shed, spilled, timeout, error), TTFT (send to first chunk), tokens, end.
Printed: the table per endpoint with the ratios (a)/(b), and the load average before each
replay (other work on the machine changes the figures); each request's outcome is written
to WORK/outcomes-ENDPOINT.json (with `--workdir`).

    .venv/bin/python benchmarks/generate.py [--requests 400] [--load-x 1.5]
        [--deadline-ms 2000] [--layers 6 --width 384 --heads 6] [--trace PATH] [--smoke]

Needs the build extra (torch, transformers, to make and export the model) and aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Annotated

import aiohttp
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from generate_parts import (  # noqa: E402
    OUTCOMES,
    Outcome,
    Row,
    Summary,
    fit_service,
    load_trace,
    make_model,
    prompt_texts,
    slice_trace,
    summarize,
    write_app,
)
from serving import served  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
CORPUS = ROOT / "examples" / "data" / "tiny_gpt2_corpus.txt"
ENDPOINTS = {"(a) batched": "batched", "(b) one at a time": "one_at_a_time"}
CLIENT_TIMEOUT_S = 300.0
console = Console()


# ---------------------------------------------------------------- servers

def env_for(work: Path) -> dict[str, str]:
    return {**os.environ, "FLOODWAY_STORE": str(work / "store"), "HF_HUB_OFFLINE": "1",
            "FLOODWAY_JOBS_DB": str(work / "jobs.sqlite3"), "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p)}


def build(app: Path, work: Path) -> None:
    """`floodway build APP`. Raises RuntimeError with its last lines."""
    proc = subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(app)], cwd=ROOT,
                          env=env_for(work), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
        raise RuntimeError("floodway build failed: " + " | ".join(tail))


def serving(app: Path, work: Path) -> contextlib.AbstractContextManager[str]:
    """`floodway serve APP --containers 1` until its container is ready (`serving.served`);
    yields the base URL and always stops it. Its output goes to WORK/serve-APP.log."""
    return served(app, ["--containers", "1"], env_for(work), work / f"serve-{app.stem}.log",
                  ready_timeout_s=180)


# ---------------------------------------------------------------- the client

async def send(session: aiohttp.ClientSession, url: str, row: Row, text: str,
               deadline_ms: int, t0: float) -> Outcome:
    """Send one request at t0 + row.at_s (loop clock), read its SSE stream -> its Outcome."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, t0 + row.at_s - loop.time()))
    out = Outcome(row, loop.time() - t0)
    body = {"inputs": [{"prompt": text, "max_new_tokens": row.max_new_tokens,
                        "temperature": 0}]}
    headers = {"Accept": "text/event-stream", "X-Deadline-Ms": str(deadline_ms)}
    try:
        async with session.post(url, json=body, headers=headers) as r:
            if r.status != 200:
                out.kind = {503: "shed", 429: "shed", 202: "spilled", 504: "timeout"}.get(
                    r.status, "error")
                out.detail = f"{r.status} {(await r.text())[:200]}"
                out.end_s = loop.time() - t0
                return out
            await read_stream(r, out, loop, t0)
    except (TimeoutError, aiohttp.ClientError) as e:
        out.kind = "timeout" if out.first_s is None and isinstance(e, TimeoutError) \
            else "error"
        out.detail = repr(e)[:200]
    return out


async def read_stream(r: aiohttp.ClientResponse, out: Outcome, loop, t0: float) -> None:
    """Fill `out` from the SSE events of a 200 answer."""
    async for raw in r.content:
        if not raw.startswith(b"data: "):
            continue
        data = raw[6:].strip()
        now = loop.time() - t0
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if "chunk" in ev:
            if out.first_s is None:
                out.first_s = now
            out.tokens += int(ev["chunk"].get("tokens", 0))
        elif "output" in ev:
            out.kind = "finished"
            out.prompt_tokens = (ev["output"].get("usage") or {}).get("prompt_tokens")
        elif "error" in ev:
            out.kind, out.detail = "error", json.dumps(ev["error"])[:200]
    out.end_s = loop.time() - t0


async def replay(base: str, endpoint: str, rows: list[Row], texts: list[str],
                 deadline_ms: int, label: str) -> list[Outcome]:
    """Send every row at its time (open loop) -> the outcomes, in row order."""
    url = f"{base}/v1/{endpoint}"
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.2
        tasks = [asyncio.create_task(send(session, url, r, t, deadline_ms, t0))
                 for r, t in zip(rows, texts, strict=True)]
        with Progress(console=console, transient=True) as bar:
            job = bar.add_task(label, total=len(tasks))
            for f in asyncio.as_completed(tasks):
                await f
                bar.advance(job)
        return [t.result() for t in tasks]


async def warm_up(base: str, endpoint: str, rows: list[Row], texts: list[str]
                  ) -> list[Outcome]:
    """`rows` one at a time, then all at once (no deadline) -> the one-at-a-time outcomes."""
    at0 = [dataclasses.replace(r, at_s=0.0) for r in rows]
    one = [(await replay(base, endpoint, [r], [t], 60_000, "warm-up"))[0]
           for r, t in zip(at0, texts, strict=True)]
    burst = at0
    await replay(base, endpoint, burst, texts, 60_000, "warm-up")
    return one


# ---------------------------------------------------------------- the report

def fmt_s(x: float) -> str:
    return "-" if x != x else f"{x * 1000:.0f} ms"


def ratio(a: float, b: float) -> str:
    return "-" if not (b and a == a and b == b) else f"{a / b:.2f}x"


def print_table(runs: dict[str, Summary], deadline_s: float) -> None:
    (la, a), (lb, b) = runs.items()
    t = Table(title=f"open-loop replay, deadline on the first token {deadline_s:g} s")
    for col in ("", la, lb, "(a)/(b)"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row("requests", str(a.requests), str(b.requests), "")
    for k in OUTCOMES:
        t.add_row(k, str(a.counts[k]), str(b.counts[k]), ratio(a.counts[k], b.counts[k])
                  if k == "finished" else "")
    t.add_row("finished within deadline", str(a.within_deadline), str(b.within_deadline),
              ratio(a.within_deadline, b.within_deadline))
    t.add_row("TTFT p50", fmt_s(a.ttft_p50_s), fmt_s(b.ttft_p50_s),
              ratio(a.ttft_p50_s, b.ttft_p50_s))
    t.add_row("TTFT p99", fmt_s(a.ttft_p99_s), fmt_s(b.ttft_p99_s),
              ratio(a.ttft_p99_s, b.ttft_p99_s))
    t.add_row("time per output token p50", fmt_s(a.tpot_p50_s), fmt_s(b.tpot_p50_s),
              ratio(a.tpot_p50_s, b.tpot_p50_s))
    t.add_row("tokens generated (asked, finished)", f"{a.tokens} ({a.asked_tokens})",
              f"{b.tokens} ({b.asked_tokens})", "")
    t.add_row("wall span", f"{a.span_s:.1f} s", f"{b.span_s:.1f} s", "")
    t.add_row("tokens/s", f"{a.tokens_per_s:.1f}", f"{b.tokens_per_s:.1f}",
              ratio(a.tokens_per_s, b.tokens_per_s))
    console.print(t)
    ok = a.tokens_per_s > b.tokens_per_s and a.ttft_p99_s <= b.ttft_p99_s
    console.print(f"acceptance (more tokens/s at equal or better TTFT p99): "
                  f"{'PASS' if ok else 'FAIL'}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(rows: list[Row], factor: float) -> str:
    span = rows[-1].at_s - rows[0].at_s
    per_s = [0] * (int(span) + 1)
    for r in rows:
        per_s[int(r.at_s - rows[0].at_s)] += 1
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return (f"{len(rows)} requests over {span:.1f} s (trace time x {factor:.3f}): "
            f"{len(rows) / span if span else 0:.2f}/s on average, {max(per_s)} in the busiest "
            f"second; prompt {mean([r.prompt_tokens for r in rows]):.0f} tokens, "
            f"max_new_tokens {mean([r.max_new_tokens for r in rows]):.1f} on average "
            f"(trace: {mean([r.context_tokens for r in rows]):.0f} and "
            f"{mean([r.generated_tokens for r in rows]):.1f})")


def report_failures(label: str, outs: list[Outcome]) -> None:
    bad = [o for o in outs if o.kind in ("error", "timeout")]
    for o in bad[:3]:
        console.print(f"  {label}: {o.kind} at {o.sent_s:.2f} s: {o.detail}")


def main(trace: Annotated[Path, typer.Option(help="the Azure LLM code trace (CSV)")]
         = DEFAULT_TRACE,
         start_s: Annotated[float, typer.Option(help="where the slice starts, seconds into "
                                                     "the trace")] = 180.0,
         requests: Annotated[int, typer.Option(min=2)] = 400,
         load_x: Annotated[float, typer.Option(help="mean arrival rate / what one at a "
                                                    "time serves", min=0.01)] = 1.5,
         deadline_ms: Annotated[int, typer.Option(help="X-Deadline-Ms: the first token's "
                                                       "deadline", min=1)] = 2000,
         max_sequences: Annotated[int, typer.Option(help="(a)'s Generation.max_sequences",
                                                    min=2)] = 8,
         layers: int = 6, width: int = 384, heads: int = 6,
         calib: Annotated[int, typer.Option(help="rows run one at a time to size the load",
                                            min=2)] = 8,
         prompt_scale: float = 1 / 37, gen_scale: float = 1.0,
         workdir: Annotated[Path | None, typer.Option(help="keep the model, build and logs "
                                                           "here (default: a temporary "
                                                           "folder, removed)")] = None,
         smoke: Annotated[bool, typer.Option(help="a quick check that it runs: the toy "
                                                  "model (2 x 64), 8 requests")] = False
         ) -> None:
    if smoke:
        layers, width, heads, requests, calib = 2, 64, 4, min(requests, 8), min(calib, 3)
    work = workdir or Path(tempfile.mkdtemp(prefix="floodway-generate-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(trace, start_s, requests, load_x, deadline_ms, max_sequences, (layers, width, heads),
            calib, (prompt_scale, gen_scale), work)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def run(trace: Path, start_s: float, requests: int, load_x: float, deadline_ms: int,
        max_sequences: int, shape: tuple[int, int, int], calib: int,
        scales: tuple[float, float], work: Path) -> dict[str, Summary]:
    layers, width, heads = shape
    console.print(f"{date.today()}, {os.cpu_count()} cores, load average {load_average()}; "
                  f"model: GPT-2 architecture, {layers} layers x {width} wide, {heads} heads, "
                  "untrained (seed 0)")
    table = load_trace(trace)
    rows, _ = slice_trace(table, start_s, requests, None, *scales)
    model = make_model(work / f"model-{layers}x{width}x{heads}", layers, width, heads)
    texts = prompt_texts(model / "tokenizer.json", [r.prompt_tokens for r in rows], CORPUS)
    apps = {ep: write_app(work, ep, model, max_sequences=n, deadline_s=deadline_ms / 1000)
            for ep, n in (("batched", max_sequences), ("one_at_a_time", 1))}
    t = time.perf_counter()
    for app in apps.values():
        build(app, work)
    console.print(f"built both endpoints in {time.perf_counter() - t:.1f} s")
    pick = sorted({round(i * (len(rows) - 1) / (calib - 1)) for i in range(calib)})
    warm_rows, warm_texts = [rows[i] for i in pick], [texts[i] for i in pick]
    outs: dict[str, list[Outcome]] = {}
    for label in reversed(ENDPOINTS):           # (b) first: it sizes the load
        endpoint = ENDPOINTS[label]
        with serving(apps[endpoint], work) as base:
            one = asyncio.run(warm_up(base, endpoint, warm_rows, warm_texts))
            if endpoint == "one_at_a_time":
                a, b = fit_service([o.tokens for o in one],
                                   [(o.end_s or 0) - o.sent_s for o in one])
                mean_s = a + b * sum(r.max_new_tokens for r in rows) / len(rows)
                console.print(f"one at a time: {a * 1000:.0f} ms + {b * 1000:.1f} ms/token, "
                              f"{mean_s * 1000:.0f} ms per request of the slice; replay at "
                              f"{load_x:g} x {1 / mean_s:.2f}/s")
                rows, factor = slice_trace(table, start_s, requests, load_x / mean_s, *scales)
                console.print(describe(rows, factor))
            console.print(f"{label}: replay starts, load average {load_average()}")
            outs[label] = asyncio.run(replay(base, endpoint, rows, texts, deadline_ms, label))
            report_failures(label, outs[label])
            (work / f"outcomes-{endpoint}.json").write_text(json.dumps(
                [dataclasses.asdict(o) for o in outs[label]]))
    runs = {label: summarize(outs[label], deadline_ms / 1000) for label in ENDPOINTS}
    print_table(runs, deadline_ms / 1000)
    console.print(f"load average at the end {load_average()}")
    return runs


if __name__ == "__main__":
    typer.run(main)
