"""Cancellation reaches the worker, end to end: a real `floodway serve` and its worker
process. Callers who give up while a slow batch runs leave work already in the container's
pipe; the worker skips it when its batch would start, and the router counts it as dropped."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PATIENCE_S, running_server, wait_until
from tests.e2e.test_router import TIMED_APP, env
from tests.e2e.timed_app import RUN_LOG_ENV

pytestmark = pytest.mark.e2e
# The batch that runs while the flood arrives and leaves (below timed_app's stuck_after_s,
# 3 s: the container is not taken for stuck meanwhile).
HOLD_MS = 2000
GIVE_UP_S = 0.5    # each flooding caller's client-side timeout: far shorter than HOLD_MS
CALLERS = 6        # 4 rows each: more than the queue's next batch and the pipe's one
# The router hears a hang-up and writes the Cancel at once; the pipe's batch would start
# about HOLD_MS - GIVE_UP_S after its callers left if cancellation stopped at the router.
# An item that starts half that long after its caller left was run for no one: the Cancel
# had time to arrive however busy the machine (a loaded router answers a hang-up late).
SLACK_S = (HOLD_MS / 1000 - GIVE_UP_S) / 2


def ran(log: Path) -> dict[str, float]:
    """Item tag -> the monotonic time it started in the worker (timed_app's "log:" items)."""
    if not log.exists():
        return {}
    return {tag: float(t) for tag, t in (line.split() for line in log.read_text().splitlines())}


def dropped(srv, reason: str) -> float:
    """floodway_dropped_total for `reason`, summed over the endpoint's lanes."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in srv.client.get("/metrics").text
               .splitlines() if line.startswith("floodway_dropped_total{")
               and f'reason="{reason}"' in line)


def test_items_handed_to_a_worker_are_not_run_for_callers_who_left(built_store, tmp_path):
    log = tmp_path / "ran.txt"
    with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log",
                        env={**env(tmp_path), RUN_LOG_ENV: str(log)}) as srv:
        hold = ThreadPoolExecutor(1).submit(httpx.post, f"{srv.base}/v1/embed", timeout=30,
                                            json={"inputs": [f"log:hold:{HOLD_MS}"]})
        wait_until(lambda: "hold" in ran(log), PATIENCE_S, "the long batch to start")

        def caller(i: int) -> float | None:
            """Post 4 rows and give up after GIVE_UP_S -> when it left (None: answered)."""
            try:
                httpx.post(f"{srv.base}/v1/embed", timeout=GIVE_UP_S,
                           json={"inputs": [f"log:c{i}.{j}:50" for j in range(4)]})
            except httpx.TimeoutException:
                return time.monotonic()
            return None

        with ThreadPoolExecutor(CALLERS) as pool:
            left = dict(enumerate(pool.map(caller, range(CALLERS))))
        assert hold.result().status_code == 200
        assert sum(t is not None for t in left.values()) >= 2   # the flood did leave
        wait_until(lambda: all(c["inflight"] == 0 for c in srv.containers()), PATIENCE_S,
                   "every container idle")
        started = ran(log)
        late = {}
        for tag, t in started.items():
            gone = left.get(int(tag[1:].split(".")[0])) if tag != "hold" else None
            if gone is not None and t > gone + SLACK_S:
                late[tag] = round(t - gone, 3)
        assert late == {}, f"items run for callers who had left (seconds after): {late}"
        # The batch in the pipe behind "hold" (a whole caller's 4 rows) was skipped, and
        # counted as dropped at the worker.
        wait_until(lambda: dropped(srv, "cancelled_at_worker") >= 4, PATIENCE_S,
                   "the pipe's batch counted as dropped at the worker")
