"""Fault harness: containers of a real `floodway serve` (tests/e2e/timed_app.py) killed with
SIGKILL or frozen with SIGSTOP at random moments under load, and idle keep-alive
connections by the thousand. Bounded loops on loopback; each test prints its figures.

(The other faults of the harness live beside what they break: the router killed with
SIGKILL again and again while jobs are submitted in test_jobs_crash_loop.py, slow-loris
headers and idle sockets in test_connections.py, a full disk under the job store in
tests/unit/jobs/test_quota.py.)"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PATIENCE_S, running_server, wait_until

pytestmark = pytest.mark.e2e
TIMED_APP = Path(__file__).with_name("timed_app.py")
FAULTS = 6                  # faults injected, one at a time, while the load runs
FAULT_EVERY_S = (1.0, 2.5)  # between one fault and the next, once a container is warm
SENDERS = 6


def env(tmp_path, **extra: str) -> dict[str, str]:
    return {"FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3"), "FLOODWAY_ORT_THREADS": "1",
            **extra}


def live_pids(srv) -> list[int]:
    return [c["pid"] for c in srv.containers() if c["state"] in ("ready", "busy")
            and c.get("pid")]


def sender(base: str, stop: threading.Event, seen: Counter, bad: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                r = client.post("/v1/embed", json={"inputs": [f"sleep:{40 + i % 5 * 20}"]})
            except httpx.HTTPError as e:
                bad.append(f"{type(e).__name__}: {e}")
                continue
            seen[r.status_code] += 1
            if r.status_code in (429, 503) and "retry-after" not in r.headers:
                bad.append(f"{r.status_code} without Retry-After")
            elif r.status_code == 200 and len(r.json()["outputs"]) != 1:
                bad.append(f"200 with {r.text[:80]}")
            elif r.status_code not in (200, 202, 429, 503, 504):
                bad.append(f"{r.status_code}: {r.text[:120]}")


def test_containers_killed_and_frozen_under_load(built_store, tmp_path):
    rng = random.Random(5)
    with running_server(TIMED_APP, built_store, "--containers", "2",
                        log=tmp_path / "serve.log", env=env(tmp_path)) as srv:
        stop, seen, bad = threading.Event(), Counter(), []
        faults: Counter[str] = Counter()
        frozen: list[int] = []
        t0 = time.monotonic()
        with ThreadPoolExecutor(SENDERS) as pool:
            for _ in range(SENDERS):
                pool.submit(sender, srv.base, stop, seen, bad)
            try:
                while sum(faults.values()) < FAULTS:
                    # Poll for the next fault time, so /readyz is read right before it.
                    at = time.monotonic() + rng.uniform(*FAULT_EVERY_S)
                    wait_until(lambda at=at: time.monotonic() >= at, 5, "next fault",
                               interval_s=0.05)
                    # A fault needs a warm container: after the last one, the pool may be
                    # replacing them (as long as its cold starts take on this machine).
                    pids = wait_until(lambda: live_pids(srv), PATIENCE_S, "a warm container")
                    pid, sig = rng.choice(pids), rng.choice((signal.SIGKILL, signal.SIGSTOP))
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                        faults[sig.name] += 1
                        if sig == signal.SIGSTOP:
                            frozen.append(pid)
            finally:
                stop.set()
        load_s = time.monotonic() - t0
        # Faults over: the pool is back at its floor of ready containers, none of them one
        # still frozen (found by its liveness ping, or stuck, and replaced).
        wait_until(lambda: len(pids := live_pids(srv)) == 2 and not set(pids) & set(frozen),
                   PATIENCE_S, "two ready containers again")
        after = httpx.post(f"{srv.base}/v1/embed", json={"inputs": ["abc"]}, timeout=30)
        events = srv.readiness()["container_events"]["embed"]
    for pid in frozen:   # a frozen worker the router killed is gone; any other, end it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(f"\nfaults {dict(faults)} over {load_s:.1f} s; answers {dict(sorted(seen.items()))}; "
          f"container events {events}; problems {len(bad)}")
    assert sum(faults.values()) == FAULTS and not bad, bad[:5]
    assert seen[200] > 0 and after.status_code == 200
    assert events.get("failed", 0) + events.get("stuck", 0) >= 1


def closed_within(s: socket.socket, end_s: float) -> bool:
    """Whether the router closed `s` before monotonic `end_s` (what is left of an answer
    is read past; a reset counts as closed)."""
    try:
        while True:
            s.settimeout(max(0.1, end_s - time.monotonic()))
            if not s.recv(4096):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_idle_keep_alive_connections_are_closed_and_do_not_stop_serving(built_store,
                                                                          tmp_path):
    n = 2000
    with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log",
                        env=env(tmp_path, FLOODWAY_KEEPALIVE_S="2")) as srv:
        port = int(srv.base.rsplit(":", 1)[1])
        socks, answered = [], 0
        request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
        for _ in range(n):   # each makes one request, then stays open and idle
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(request)
            answered += s.recv(4096).startswith(b"HTTP/1.1 200")
            socks.append(s)
        t0 = time.monotonic()
        try:
            r = httpx.post(f"{srv.base}/v1/embed", json={"inputs": ["abcd"]}, timeout=10)
            closed = 0
            for s in socks:   # the router closes each once its keep-alive timeout passes
                closed += closed_within(s, t0 + 30)
            took_s = time.monotonic() - t0
        finally:
            for s in socks:
                s.close()
    print(f"\n{n} keep-alive connections, {answered} answered once then idle; a request "
          f"among them {r.status_code}; {closed} closed by the router within {took_s:.1f} s")
    assert answered == n and r.status_code == 200 and closed == n
