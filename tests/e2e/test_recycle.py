"""Recycling end to end: tests/e2e/leak_app.py (a handler that keeps `LEAK_MIB` of every
call) built and served by `floodway serve` with real worker processes, under steady
requests.

What recycling promises (`floodway.runtime.recycle`): a container is marked at the first
pool tick at which its resident memory, or that memory projected at its measured growth
rate over the endpoint's cold-start estimate and one more tick, is past `max_rss_mib`; its
replacement starts in that tick, and it is drained the moment the replacement is ready (the
calls already sent to it still run). So a steady leak, measured before it nears the limit,
is marked while the container is still under `max_rss_mib`, and the container never grows
past `max_rss_mib` by more than its growth during its replacement's cold start plus the
calls already sent to it. (Under `max_rss_mib` itself only while the replacement starts
within the estimate, the slowest start measured: a replacement warming beside a busy
container can start slower than any before it.)

Checked, with every bound from this run's measurements: every request is answered 200 (a
recycle fails none); containers are recycled (/metrics and /readyz count it, the log names
each with its resident memory and the limit); /readyz shows a warm container at every
sample, also while a replacement warmed (new before old); every recycle was marked by the
projection, the container still under the limit; and no container's largest resident size
(measured by the worker itself after each call) passed the limit by more than the app's
fastest leak (`LEAK_MIB` a call, one call per `WORK_S`) over its replacement's measured
cold start (the pool's record, in /readyz and the log), plus the calls in flight when it
was drained and the worker's own measured drift. Without recycling the first container
would serve every call and grow by `LEAK_MIB` with each.
"""

from __future__ import annotations

import math
import os
import re
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
CALLS_EACH = 60
INFLIGHT = leak_app.app["leak"].route.max_inflight_per_container
WARM = ("ready", "busy")
MARKED = re.compile(r"container (\d+) of leak: resident ([\d.]+) MiB(, growing: ([\d.]+) MiB)?"
                    r" > max_rss_mib")
DRAINED = re.compile(r"container (\d+) of leak recycled: drained")
READY = re.compile(r"container (\d+) of leak ready: cold start ([\d.]+) s")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("recycle")
    env = {"FLOODWAY_STORE": str(root / "store"), "FLOODWAY_JOBS_DB": str(root / "jobs.db")}
    res = subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(APP)], cwd=ROOT,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with running_server(APP, env["FLOODWAY_STORE"], log=root / "serve.log", env=env) as server:
        yield server


class Watch:
    """/readyz sampled on a thread until `stop`: warm containers per sample, whether a
    sample caught a replacement warming beside a warm container, and each container's pid
    and measured cold start (seconds, the pool's record) by id."""

    def __init__(self, base: str):
        self.base, self.warm, self.warming_beside = base, [], 0
        self.pid: dict[str, int] = {}
        self.cold_s: dict[str, float] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            while not self.done.is_set():
                try:
                    containers = client.get("/readyz").json()["endpoints"]["leak"]
                except httpx.HTTPError:
                    continue
                warm = sum(c["state"] in WARM for c in containers)
                self.warm.append(warm)
                self.warming_beside += warm >= 1 and any(c["state"] in ("starting", "warming")
                                                         for c in containers)
                for c in containers:
                    if c.get("pid"):
                        self.pid[str(c["id"])] = int(c["pid"])
                    if "total" in c["cold_start_s"]:
                        self.cold_s[str(c["id"])] = c["cold_start_s"]["total"]
                self.done.wait(0.05)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)


def send(base: str, sender: int) -> list[tuple[int, object]]:
    """`CALLS_EACH` requests one after another -> (status, outputs) each."""
    out = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for i in range(CALLS_EACH):
            r = client.post("/v1/leak", json={"inputs": [f"s{sender}-{i}"]})
            out.append((r.status_code, r.json().get("outputs") if r.status_code == 200
                        else r.text))
    return out


def recycles(log: str) -> list[dict]:
    """Each recycle the serve log tells of, in order: the container, its resident MiB when
    marked, whether the projection marked it, and its replacement (the container ready
    next after the mark: one container serves at a time) with the cold start it logged."""
    events = [(m.start(), kind, m) for kind, rx in (("marked", MARKED), ("drained", DRAINED),
                                                    ("ready", READY))
              for m in rx.finditer(log)]
    events.sort(key=lambda e: e[0])
    out: list[dict] = []
    for n, (_, kind, m) in enumerate(events):
        if kind != "marked":
            continue
        rec = {"id": m.group(1), "marked_mib": float(m.group(2)),
               "projected": m.group(3) is not None, "drained": False, "by": None}
        for _, later, m2 in events[n + 1:]:
            if later == "drained" and m2.group(1) == rec["id"]:
                rec["drained"] = True
            elif later == "ready" and rec["by"] is None:
                # logged to two decimals: the most it can have been
                rec["by"], rec["by_cold_s"] = m2.group(1), float(m2.group(2)) + 0.005
            if rec["drained"] and rec["by"] is not None:
                break
        out.append(rec)
    return out


def drift_mib(sizes: list[float]) -> float:
    """The most a worker grew beyond its leak: its sizes after each call, sorted (one call
    at a time, each `LEAK_MIB` more), against the first plus `LEAK_MIB` per call since."""
    s = sorted(sizes)
    return max(0.0, *(x - s[0] - leak_app.LEAK_MIB * k for k, x in enumerate(s)))


def test_a_leaking_container_is_recycled_with_every_request_answered_and_one_warm(srv):
    watch = Watch(srv.base)
    try:
        wait_until(lambda: watch.warm, 30, "a first /readyz sample")
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

    by_pid: dict[int, list[float]] = {}
    for _, outputs in answers:
        (pid, rss), = outputs
        by_pid.setdefault(int(pid), []).append(rss)
    assert len(by_pid) >= 2                                 # served by a replacement too
    sizes = [r for v in by_pid.values() for r in v]
    assert min(sizes) > 0                                   # each worker measured itself
    # The floor held: a warm container at every sample, also while a replacement warmed.
    assert watch.warm and min(watch.warm) >= 1, watch.warm
    assert watch.warming_beside >= 1
    assert set(by_pid) <= set(watch.pid.values()), (by_pid.keys(), watch.pid)

    done = [r for r in recycles(log) if r["drained"]]
    assert len(done) == recycled, (done, recycled)
    # Marked ahead: by the projection, still under the limit (a steady leak, measured).
    assert all(r["projected"] and r["marked_mib"] <= leak_app.MAX_RSS_MIB for r in done), done
    rows = []
    for r in done:
        pid, by = watch.pid[r["id"]], r["by"]
        assert by is not None, r                            # it waited for a replacement
        cold_s = max(watch.cold_s.get(by, 0.0), r["by_cold_s"])
        # The fastest the app leaks, over the replacement's cold start: calls start at
        # least WORK_S apart; then the calls already sent to it when it was drained.
        calls = math.ceil(cold_s / leak_app.WORK_S) + INFLIGHT
        bound = leak_app.MAX_RSS_MIB + leak_app.LEAK_MIB * calls + drift_mib(by_pid[pid])
        largest = max(by_pid[pid])
        rows.append((r["id"], r["marked_mib"], round(cold_s, 3), round(largest, 1),
                     round(bound, 1)))
        assert largest <= bound, (r, largest, bound)
    print(f"\n{len(by_pid)} workers served {len(answers)} calls; limit "
          f"{leak_app.MAX_RSS_MIB} MiB; per recycle (container, MiB when marked, "
          f"replacement's cold start s, largest MiB, bound MiB): {rows}")
    unrecycled = min(sizes) + leak_app.LEAK_MIB * (len(answers) - 1)
    assert max(sizes) < unrecycled                          # recycling kept it smaller
