"""Async jobs survive a crash-looping router: real `floodway serve` processes on one job store,
each SIGKILLed a random 0-300 ms after it accepted its first job, then one left to run. Every job
accepted (202) ends succeeded with its own result, and none ran to completion twice.

The app is tests/e2e/timed_app.py: an output is [len(text), pid]; "sleep:<ms>" items keep a
batch on its container for that long, so that kills land while batches run."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PATIENCE_S, running_server, wait_until

pytestmark = pytest.mark.e2e
TIMED_APP = Path(__file__).with_name("timed_app.py")
CYCLES = 10
JOBS_PER_CYCLE = 20
MAX_KILL_DELAY_S = 0.3      # after the cycle's first 202: kills land while jobs come in


def _text(rng: random.Random) -> str:
    """A job's one item: a batch-lengthening sleep, or a text whose length is its output."""
    if rng.random() < 0.4:
        return f"sleep:{rng.randint(20, 80)}"
    return "t" * rng.randint(1, 300)


def _submit_until_killed(base: str, texts: list[str], accepted: dict[str, str],
                         outcomes: dict[str, int]) -> None:
    """POST one job per text (alternating /jobs and Prefer: respond-async) until the router
    is gone; a 202's job id -> its text into `accepted`."""
    with httpx.Client(base_url=base, timeout=5) as c:
        for i, text in enumerate(texts):
            try:
                if i % 2:
                    r = c.post("/v1/embed", json={"inputs": [text]},
                               headers={"Prefer": "respond-async"})
                else:
                    r = c.post("/v1/embed/jobs", json={"inputs": [text]})
            except httpx.HTTPError:
                outcomes["no answer"] = outcomes.get("no answer", 0) + 1
                return
            outcomes[str(r.status_code)] = outcomes.get(str(r.status_code), 0) + 1
            if r.status_code == 202:
                accepted[r.json()["id"]] = text


def test_accepted_jobs_survive_a_crash_looping_router(built_store, tmp_path):
    db = tmp_path / "jobs.sqlite3"
    env = {"FLOODWAY_JOBS_DB": str(db), "FLOODWAY_ORT_THREADS": "1"}
    rng = random.Random(20240611)
    accepted: dict[str, str] = {}
    outcomes: dict[str, int] = {}
    kills = 0
    t0 = time.monotonic()
    for _ in range(CYCLES):
        with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log",
                            env=env) as srv:
            texts = [_text(rng) for _ in range(JOBS_PER_CYCLE)]
            sender = threading.Thread(target=_submit_until_killed,
                                      args=(srv.base, texts, accepted, outcomes))
            killer = threading.Timer(rng.uniform(0, MAX_KILL_DELAY_S), os.kill,
                                     (srv.proc.pid, signal.SIGKILL))
            before = len(accepted)
            sender.start()
            # However long this machine takes to answer a submit: the kill comes after one.
            wait_until(lambda before=before, sender=sender: len(accepted) > before
                       or not sender.is_alive(), PATIENCE_S, "the cycle's first accepted job",
                       interval_s=0.01)
            killer.start()
            killer.join()
            srv.proc.wait(PATIENCE_S)
            sender.join(PATIENCE_S)
            assert srv.proc.returncode == -signal.SIGKILL
            kills += 1
    loop_s = time.monotonic() - t0
    # Then a router runs in peace: the jobs the killed ones held come back as their
    # leases expire (10 s), and everything drains.
    with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log", env=env) as srv:
        def unfinished() -> float:
            return srv.metric('floodway_jobs{state="queued"}') + \
                srv.metric('floodway_jobs{state="running"}')
        wait_until(lambda: unfinished() == 0, PATIENCE_S, "every job finished")
        answers = {job_id: srv.client.get(f"/v1/jobs/{job_id}").json() for job_id in accepted}
    total_s = time.monotonic() - t0
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, state, attempts, claims, lost, completions, error "
                            "FROM jobs").fetchall()
    by_state: dict[str, int] = {}
    for _, state, *_rest in rows:
        by_state[state] = by_state.get(state, 0) + 1
    print(f"\ncrash loop: {kills} kills in {loop_s:.1f} s, {sum(outcomes.values())} submits "
          f"answered or cut {outcomes}, {len(accepted)} accepted, {len(rows)} stored "
          f"{by_state}; attempts max {max(r[2] for r in rows)}, claims "
          f"{sum(r[3] for r in rows)}, lost attempts {sum(r[4] for r in rows)}, "
          f"completions {sum(r[5] for r in rows)}; drained in {total_s - loop_s:.1f} s")
    assert kills == CYCLES and len(accepted) >= CYCLES
    # Every job the store holds (each 202, and any whose answer the kill cut off) succeeded.
    assert by_state == {"succeeded": len(rows)}, [r for r in rows if r[1] != "succeeded"]
    for job_id, text in accepted.items():
        job = answers[job_id]
        assert job["status"] == "succeeded" and job["outputs"][0][0] == len(text), job
    # Ran to completion once: one result delivered per job (a second run finishing after a
    # lease was taken over would count a second completion).
    assert all(r[5] == 1 for r in rows), [r for r in rows if r[5] != 1]
