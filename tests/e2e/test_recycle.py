"""Recycling end to end: tests/e2e/leak_app.py (a handler that keeps 8 MiB of every call)
built and served by `floodway serve` with real worker processes, under steady requests.

Checked: every request is answered 200 (a recycle fails none), at least one container is
recycled (/metrics and /readyz count it, the log names it with its resident memory and the
limit), a warm container exists at every /readyz sample (the floor held: new before old),
and no container grows past the limit by more than one call's leak (recycled a cold start
ahead of its projected growth): without recycling the first container alone would reach
hundreds of MiB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import ROOT
from tests.e2e import leak_app
from tests.e2e.conftest import running_server, wait_until

pytestmark = pytest.mark.e2e
APP = ROOT / "tests" / "e2e" / "leak_app.py"
SENDERS = 2
CALLS_EACH = 40


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("recycle")
    env = {"FLOODWAY_STORE": str(root / "store"), "FLOODWAY_JOBS_DB": str(root / "jobs.db")}
    res = subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(APP)], cwd=ROOT,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with running_server(APP, env["FLOODWAY_STORE"], log=root / "serve.log", env=env) as server:
        yield server


class Watch:
    """/readyz sampled on a thread until `stop`: warm containers per sample, and the
    largest cold start of any container seen."""

    def __init__(self, base: str):
        self.base, self.warm, self.cold_s = base, [], 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10) as client:
            while not self.done.is_set():
                containers = client.get("/readyz").json()["endpoints"]["leak"]
                self.warm.append(sum(c["state"] in ("ready", "busy") for c in containers))
                self.cold_s = max([self.cold_s, *(c["cold_start_s"].get("total", 0.0)
                                                  for c in containers)])
                self.done.wait(0.05)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def send(base: str, sender: int) -> list[tuple[int, object]]:
    """`CALLS_EACH` requests one after another -> (status, outputs) each."""
    out = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for i in range(CALLS_EACH):
            r = client.post("/v1/leak", json={"inputs": [f"s{sender}-{i}"]})
            out.append((r.status_code, r.json().get("outputs") if r.status_code == 200
                        else r.text))
    return out


def test_a_leaking_container_is_recycled_with_every_request_answered_and_one_warm(srv):
    watch = Watch(srv.base)
    try:
        wait_until(lambda: watch.warm, 10, "a first /readyz sample")
        with ThreadPoolExecutor(SENDERS) as pool:
            answers = [a for part in pool.map(lambda s: send(srv.base, s), range(SENDERS))
                       for a in part]
    finally:
        watch.stop()

    failed = [a for a in answers if a[0] != 200]
    assert not failed, failed[:5]
    assert len(answers) == SENDERS * CALLS_EACH

    recycled = srv.metric('floodway_container_events_total{endpoint="leak",event="recycled"')
    assert recycled >= 1
    assert srv.readiness()["container_events"]["leak"]["recycled"] == recycled
    log = srv.log.read_text()
    assert "recycled: drained (resident" in log and \
        f"max_rss_mib {leak_app.MAX_RSS_MIB}" in log

    assert len(watch.warm) >= 20 and min(watch.warm) >= 1, watch.warm

    by_pid: dict[int, list[float]] = {}
    for _, outputs in answers:
        (pid, rss), = outputs
        by_pid.setdefault(int(pid), []).append(rss)
    assert len(by_pid) >= 2                                 # served by a replacement too
    sizes = [r for v in by_pid.values() for r in v]
    assert min(sizes) > 0                                   # each worker measured itself
    # A container is recycled once its growth would take it past the limit before a
    # replacement could be ready (its cold start and a tick), so it stays under the limit
    # while the replacement warms; one call's leak is the measuring grain (each output is
    # measured right after the call that grew it).
    bound = leak_app.MAX_RSS_MIB + leak_app.LEAK_MIB
    largest = max(max(v) for v in by_pid.values())
    assert largest <= bound, (largest, bound, {p: max(v) for p, v in by_pid.items()})
    print(f"\nlargest worker {largest:.1f} MiB, limit {leak_app.MAX_RSS_MIB} MiB; "
          f"{len(by_pid)} workers served {len(answers)} calls")
    unrecycled = min(sizes) + leak_app.LEAK_MIB * (len(answers) - 1)
    assert bound < unrecycled / 2                           # the bound means something
