"""Drain: how fast a backlog of async jobs drains after a burst, against the closed-loop
capacity measured in the same run, and whether a sync request still gets a 200 meanwhile.

The target (issue "the rest of the burst toolkit", deliverable 0): after the burst the
backlog drains at >= 0.8x the closed-loop capacity, i.e. the last job finishes within
(jobs / capacity) / 0.8 seconds of the burst's end.

Against one `floodway serve modal_app.py` (the example endpoint, all-MiniLM-L6-v2; a fresh
job queue), one after the other:

1. capacity: `--clients` callers in a closed loop for `--capacity-s` seconds, one text per
   request (burst.py's text of about 34 tokens, each unique): requests (= rows) per second.
2. burst: `--jobs` jobs of one such text each, submitted by `--submitters` concurrent
   clients (``POST /v1/embed/jobs``) as fast as the router takes them. The burst ends when
   the last 202 came back.
3. while the backlog drains: `make run`'s example request (two short texts, numbered so
   that no response cache answers it) `--probes` times, one after the other: each should
   be a 200 (sync requests go ahead of job work not yet running), with its latency.
4. every job is polled until it finished; the drain time is the last ``finished_at``
   (the server's clock, on this machine) minus the burst's end.

Printed: capacity, burst length, drain time, the drain ratio (jobs / capacity) / drain time
(target >= 0.8) and the drain rate over the whole run from the first submit (jobs / (last
finish - first submit), / capacity), the probes' statuses and latencies.

    .venv/bin/python benchmarks/drain.py [--jobs 600] [--clients 16] [--capacity-s 10]
        [--submitters 32] [--probes 4] [--store DIR]

Needs a build of modal_app.py (`make run`, or `floodway build modal_app.py`).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import httpx
import typer
from burst import closed_loop, texts_for
from serving import ROOT, served

EXAMPLE = ["floodway turns a burst into answers", "or into jobs that finish later"]


async def submit_burst(base: str, jobs: int, submitters: int) -> tuple[list[str], float, float]:
    """Submit `jobs` one-text jobs with `submitters` concurrent clients -> (ids, first submit,
    last 202), times in unix seconds."""
    ids: list[str] = []
    todo = iter(range(jobs))
    t_first = time.time()
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        async def submitter() -> None:
            for i in todo:
                r = await client.post("/v1/embed/jobs",
                                      json={"inputs": texts_for(0, 1_000_000 + i)})
                if r.status_code != 202:
                    raise RuntimeError(f"submit: {r.status_code} {r.text[:200]}")
                ids.append(r.json()["id"])
        await asyncio.gather(*(submitter() for _ in range(submitters)))
    return ids, t_first, time.time()


async def probe(base: str, n: int) -> list[tuple[int, float]]:
    """The example request `n` times in a row -> (status, seconds) each; each time with
    its own words (no response cache can answer it)."""
    out = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        for i in range(n):
            t0 = time.perf_counter()
            r = await client.post("/v1/embed", json={"inputs": [f"{t} ({i})" for t in EXAMPLE]})
            out.append((r.status_code, time.perf_counter() - t0))
    return out


async def last_finish(base: str, ids: list[str], timeout_s: float) -> tuple[float, int]:
    """Poll the jobs until each finished -> (latest finished_at in unix seconds, failed)."""
    left, latest, failed = list(ids), 0.0, 0
    end = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        while left:
            if time.monotonic() > end:
                raise RuntimeError(f"{len(left)} jobs unfinished after {timeout_s:g} s")
            still = []
            for job_id in left:
                j = (await client.get(f"/v1/jobs/{job_id}")).json()
                if j["status"] in ("succeeded", "failed"):
                    failed += j["status"] == "failed"
                    latest = max(latest, datetime.fromisoformat(
                        j["finished_at"].replace("Z", "+00:00")).timestamp())
                else:
                    still.append(job_id)
            left = still
            if left:
                await asyncio.sleep(0.5)
    return latest, failed


async def measure(base: str, jobs: int, clients: int, capacity_s: float, submitters: int,
                  probes: int) -> dict:
    capacity = await closed_loop(base, [0], capacity_s, clients)
    ids, t_first, t_end = await submit_burst(base, jobs, submitters)
    probed = await probe(base, probes)
    latest, failed = await last_finish(base, ids, timeout_s=max(120.0, 20 * jobs / capacity))
    return {"capacity": capacity, "jobs": jobs, "burst_s": t_end - t_first,
            "drain_s": latest - t_end, "total_s": latest - t_first, "failed": failed,
            "probes": probed}


def report(m: dict) -> None:
    ideal_s = m["jobs"] / m["capacity"]
    print(f"closed-loop capacity: {m['capacity']:.1f} requests/s (1 text each)")
    print(f"burst: {m['jobs']} jobs submitted in {m['burst_s']:.2f} s; failed: {m['failed']}")
    print(f"drain after the burst: {m['drain_s']:.2f} s; jobs / capacity = {ideal_s:.2f} s; "
          f"limit (jobs / capacity) / 0.8 = {ideal_s / 0.8:.2f} s")
    ratio = ideal_s / max(m["drain_s"], 1e-9)
    print(f"drain ratio (jobs / capacity) / drain time = {ratio:.2f}x (target >= 0.8) "
          f"{'MET' if m['drain_s'] <= ideal_s / 0.8 else 'NOT MET'}")
    print(f"whole run from the first submit: {m['jobs'] / m['total_s']:.1f} jobs/s = "
          f"{m['jobs'] / m['total_s'] / m['capacity']:.2f}x capacity")
    print("example request during the drain: " + ", ".join(
        f"{s} in {t * 1000:.0f} ms" for s, t in m["probes"]))


def main(jobs: Annotated[int, typer.Option(help="jobs in the burst")] = 600,
         clients: Annotated[int, typer.Option(help="closed-loop callers")] = 16,
         capacity_s: Annotated[float, typer.Option(help="closed-loop seconds")] = 10.0,
         submitters: Annotated[int, typer.Option(help="concurrent job submitters")] = 32,
         probes: Annotated[int, typer.Option(help="example requests during the drain")] = 4,
         store: Annotated[Path | None, typer.Option(help="artifact store root")] = None
         ) -> None:
    from floodway.build.store import ArtifactStore

    ArtifactStore(store).latest("embed")   # fails early, naming the build command
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "FLOODWAY_JOBS_DB": str(Path(work) / "jobs.sqlite3"),
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if store:
            env["FLOODWAY_STORE"] = str(store)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        with served(ROOT / "modal_app.py", [], env, Path(work) / "serve.log") as base:
            report(asyncio.run(measure(base, jobs, clients, capacity_s, submitters, probes)))


if __name__ == "__main__":
    typer.run(main)
