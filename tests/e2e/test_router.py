"""The router end to end: real `floodway serve` processes, real worker containers loading the
built artifacts, and a scripted endpoint function (tests/e2e/timed_app.py) for timing."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from floodway.runtime.pool import TICK_S
from tests.e2e import timed_app
from tests.e2e.conftest import PATIENCE_S, running_server, wait_until

pytestmark = pytest.mark.e2e
TIMED_APP = Path(__file__).with_name("timed_app.py")
ROUTE = timed_app.app["embed"].route
# A batch that keeps one of the only container's two slots busy. The worker runs one batch
# at a time, so two of them hold both slots for 2 x HOLD_MS; the first ends well before
# `stuck_after_s` (3 s), so the container is never taken for stuck.
HOLD_MS = 1500


@pytest.fixture
def serve(built_store, tmp_path):
    def start(*args: str, **kw):
        return running_server(TIMED_APP, built_store, *args, log=tmp_path / "serve.log",
                              env=env(tmp_path), **kw)
    return start


def env(tmp_path) -> dict[str, str]:
    # One ONNX Runtime thread per container, so that this 2-core machine has cores for the
    # two containers these tests scale to (the pool never runs more than it has cores for).
    return {"FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3"), "FLOODWAY_ORT_THREADS": "1"}


def post_many(base: str, bodies: list[dict], headers: dict | None = None,
              timeout_s: float = 30) -> list[httpx.Response]:
    """POST every body at once (one thread each), as a burst of independent clients."""
    def one(body):
        with httpx.Client(base_url=base, timeout=timeout_s) as c:
            return c.post("/v1/embed", json=body, headers=headers or {})
    with ThreadPoolExecutor(len(bodies)) as ex:
        return list(ex.map(one, bodies))


def queued_rows(srv) -> int:
    return srv.readiness()["queues"]["embed"]["queued_rows"]


def hold_both_slots(srv, pool: ThreadPoolExecutor) -> list:
    """Fill both slots of the only container, one HOLD_MS batch each (polled, never slept
    for) -> their futures."""
    futs = []
    for n in (1, 2):
        futs.append(pool.submit(httpx.post, f"{srv.base}/v1/embed",
                                json={"inputs": [f"sleep:{HOLD_MS}"]}, timeout=60))
        wait_until(lambda n=n: srv.containers()[0]["inflight"] >= n, PATIENCE_S,
                   f"{n} batches")
    return futs


def test_batches_by_rows_and_maps_each_output_to_its_request(serve):
    # Requests that wait together share batches of up to max_batch_rows: the twelve are all
    # queued (seen on /readyz) while both slots of the only container are held, however
    # long this machine took to send them, and are cut into batches once a slot frees.
    with serve() as srv, ThreadPoolExecutor(2) as holders:
        held = hold_both_slots(srv, holders)
        bodies = [{"inputs": ["x" * n]} for n in range(1, 13)]
        with ThreadPoolExecutor(1) as burst:
            sent = burst.submit(post_many, srv.base, bodies)
            seen: list[int] = []
            wait_until(lambda: (seen.append(queued_rows(srv)) or seen[-1] == 12)
                       or all(f.done() for f in held), PATIENCE_S, "the twelve queued")
            rs = sent.result()
        assert 12 in seen, f"the held slots freed before the twelve were queued: {seen}"
        assert all(f.result().status_code == 200 for f in held)
        assert [r.status_code for r in rs] == [200] * 12
        assert [r.json()["outputs"][0][0] for r in rs] == list(range(1, 13))
        batches = srv.metric('floodway_batch_rows_count{endpoint="embed"}') - len(held)
        rows = srv.metric('floodway_batch_rows_sum{endpoint="embed"}') - len(held)
        assert rows == 12 and batches < 12   # several requests shared a batch


def test_a_bad_item_fails_alone_while_its_batch_mates_succeed(serve):
    with serve() as srv:
        mixed, other = post_many(srv.base, [{"inputs": ["a", "bad", "ccc"]},
                                            {"inputs": ["dd"]}])
        assert mixed.status_code == 500
        body = mixed.json()
        assert [o and o[0] for o in body["outputs"]] == [1, None, 3]
        assert body["item_errors"][0]["index"] == 1
        assert "ValueError: bad item" in body["item_errors"][0]["message"]
        assert other.status_code == 200 and other.json()["outputs"][0][0] == 2
        # The container survived the bad item.
        assert srv.client.post("/v1/embed", json={"inputs": ["e"]}).status_code == 200


def test_burst_spills_to_a_cold_container_then_scales_down(serve, built_store):
    from floodway.build.starts import known_starts
    from floodway.build.store import ArtifactStore

    row_s = 0.6
    with serve() as srv:
        # Teach the service-time fit that a row takes about 0.6 s.
        assert srv.client.post("/v1/embed", json={"inputs": [f"sleep:{row_s * 1000:.0f}"]}
                               ).status_code == 200
        # The deadline leaves a container cold-started for the burst (as slow to start as
        # the pool's cold-start estimate: the slowest of the starts the store keeps, this
        # run's first one among them) time to answer a few rows, and the burst holds more
        # rows than the first container finishes in it.
        first_s = srv.containers()[0]["cold_start_s"]["total"]
        cold_s = max(first_s, *known_starts(ArtifactStore(built_store), "embed").samples)
        deadline_s = max(4.0, cold_s + 4 * row_s)
        burst = post_many(srv.base,
                          [{"inputs": [f"sleep:{row_s * 1000:.0f}"]}] *
                          (math.ceil(deadline_s / row_s) + 4),
                          headers={"X-Deadline-Ms": f"{deadline_s * 1000:.0f}"})
        codes = [r.status_code for r in burst]
        assert set(codes) <= {200, 202, 503}, [r.text for r in burst]
        assert codes.count(200) >= 3
        assert srv.metric('floodway_spills_total{endpoint="embed",to="cold"}') >= 1
        # A second container was started for the burst (it serves whatever is still queued
        # when it is warm; on a fast machine the first may have drained the queue by then).
        assert srv.metric('floodway_container_events_total{endpoint="embed",event="start",'
                          'lane=""}') \
            == 2
        for r in burst:
            if r.status_code == 503:
                assert int(r.headers["retry-after"]) >= 1
        # Idle past the 2 s scale-down window: back to the floor of one container.
        wait_until(lambda: len(srv.containers()) == 1 and srv.containers()[0]["state"]
                   == "ready", PATIENCE_S, "scale-down to the floor")
        assert srv.metric('floodway_container_events_total{endpoint="embed",'
                          'event="scale_down",lane=""}') == 1


def test_async_jobs_idempotency_and_prefer_respond_async(serve):
    with serve() as srv:
        c = srv.client
        a = c.post("/v1/embed/jobs", json={"inputs": ["abc"]}, headers={"Idempotency-Key": "k1"})
        assert a.status_code == 202 and a.headers["location"] == f"/v1/jobs/{a.json()['id']}"
        again = c.post("/v1/embed/jobs", json={"inputs": ["abc"]},
                       headers={"Idempotency-Key": "k1"})
        assert again.status_code == 200 and again.json()["id"] == a.json()["id"]
        clash = c.post("/v1/embed/jobs", json={"inputs": ["xyz"]},
                       headers={"Idempotency-Key": "k1"})
        assert clash.status_code == 409 and clash.json()["error"]["field"] == "Idempotency-Key"
        done = wait_until(lambda: (j := c.get(a.headers["location"]).json())["status"]
                          == "succeeded" and j, PATIENCE_S, "job done")
        assert done["outputs"][0][0] == 3
        pref = c.post("/v1/embed", json={"inputs": ["hello"]},
                      headers={"Prefer": "respond-async"})
        assert pref.status_code == 202 and pref.headers["preference-applied"] == "respond-async"
        assert c.get("/v1/jobs/" + "0" * 32).status_code == 404


def dropped_cancelled(srv) -> float:
    """Rows dropped because their caller left: from the queue, or skipped at the worker."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in srv.client.get("/metrics").text
               .splitlines() if line.startswith('floodway_dropped_total{endpoint="embed"')
               and ('reason="cancelled"' in line or 'reason="cancelled_at_worker"' in line))


def test_work_of_a_client_that_left_never_reaches_a_model(serve):
    with serve() as srv, ThreadPoolExecutor(2) as holders:
        # Fill both slots of the only container (one batch each), then queue one request and
        # hang up on it once /readyz shows it queued.
        futs = hold_both_slots(srv, holders)
        body = json.dumps({"inputs": [f"sleep:{HOLD_MS}"] * 4}).encode()
        with socket.create_connection(("127.0.0.1", int(srv.base.rsplit(":", 1)[1]))) as s:
            s.sendall(b"POST /v1/embed HTTP/1.1\r\nhost: x\r\ncontent-type: "
                      b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            wait_until(lambda: queued_rows(srv) == 4 or all(f.done() for f in futs),
                       PATIENCE_S, "the request queued")
            assert not all(f.done() for f in futs), "the held slots freed before it queued"
        assert all(f.result().status_code == 200 for f in futs)
        wait_until(lambda: dropped_cancelled(srv) >= 4, PATIENCE_S, "dropped rows")
        assert srv.metric('floodway_batch_rows_sum{endpoint="embed"}') <= 2


def test_stuck_container_is_replaced(serve):
    with serve() as srv:
        (first,) = srv.containers()
        pid = first["pid"]
        # stuck_after_s is 3: the container is killed and another one takes its place; the
        # batch is retried once there, hangs it too, and the request fails (503) long before
        # its deadline would hand it to the async queue: two stuck waits and a cold start,
        # the deadline four times that (as slow a start as the first one measured here).
        deadline_s = max(20.0, 4 * (2 * ROUTE.stuck_after_s + first["cold_start_s"]["total"]))
        r = srv.client.post("/v1/embed", json={"inputs": ["hang"]},
                            headers={"X-Deadline-Ms": f"{deadline_s * 1000:.0f}"},
                            timeout=deadline_s + 60)
        assert r.status_code == 503 and "died" in r.json()["error"]["message"]
        assert srv.readiness()["container_events"]["embed"]["stuck"] == 2
        wait_until(lambda: any(c["pid"] != pid and c["state"] == "ready"
                               for c in srv.containers()), PATIENCE_S, "replacement container")
        ok = srv.client.post("/v1/embed", json={"inputs": ["fine"]})
        assert ok.status_code == 200 and ok.json()["outputs"][0][1] != pid


def test_a_hung_idle_container_is_found_by_its_liveness_ping_and_replaced(serve):
    with serve() as srv:
        pid = srv.containers()[0]["pid"]
        os.kill(pid, signal.SIGSTOP)          # idle, alive, and silent
        try:
            wait_until(lambda: any(c["pid"] != pid and c["state"] == "ready"
                                   for c in srv.containers()), PATIENCE_S,
                          "replacement container")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert srv.readiness()["container_events"]["embed"]["stuck"] >= 1
        ok = srv.client.post("/v1/embed", json={"inputs": ["fine"]})
        assert ok.status_code == 200 and ok.json()["outputs"][0][1] != pid


def test_jobs_survive_a_router_kill(serve):
    with serve() as srv:
        r = srv.client.post("/v1/embed/jobs", json={"inputs": ["sleep:2000", "x"]})
        assert r.status_code == 202
        os.kill(srv.proc.pid, signal.SIGKILL)   # containers die with it (PDEATHSIG)
        srv.proc.wait(10)
    with serve() as again:
        job = wait_until(lambda: (j := again.client.get(r.headers["location"]).json())[
            "status"] == "succeeded" and j, PATIENCE_S, "job re-run after the kill")
        assert [o[0] for o in job["outputs"]] == [10, 1] and job["attempts"] >= 1


def test_buffer_container_only_while_active_and_probes_do_not_count(built_store, tmp_path):
    app_file = Path(__file__).with_name("buffer_app.py")
    with running_server(app_file, built_store, log=tmp_path / "serve.log",
                        env=env(tmp_path)) as srv:
        assert len(srv.containers()) == 1                    # idle: min_containers only
        for _ in range(20):                                   # probes are not traffic
            srv.client.get("/readyz"), srv.client.get("/metrics")
        target = srv.readiness()["warm_targets"]["embed"]
        assert target["buffer_containers"] == 0
        # The first request finds the endpoint idle: no buffer yet. Then it is active, for
        # the scale-down window after it: the buffer target, recomputed at each tick, must
        # still hold when the next request comes (sent again on a machine slow to show it).
        end = time.monotonic() + PATIENCE_S
        while True:
            sent_s = time.monotonic()
            assert srv.client.post("/v1/embed", json={"inputs": ["a"]}).status_code == 200
            wait_until(lambda: srv.readiness()["warm_targets"]["embed"]
                       ["buffer_containers"] == 1, PATIENCE_S, "the buffer target while active")
            if time.monotonic() - sent_s < target["scaledown_window_s"] - TICK_S:
                break
            assert time.monotonic() < end, "the buffer target never showed within the window"
        # The next batch makes the container busy, for milliseconds only: one idle container
        # starts on top of it at once (max(min 1, busy 1 + buffer 1)), not at a later tick.
        assert srv.client.post("/v1/embed", json={"inputs": ["b"]}).status_code == 200
        wait_until(lambda: sum(c["state"] == "ready" for c in srv.containers()) == 2,
                   PATIENCE_S, "a buffer container started by a busy one")
        # No traffic for the 2 s window: the buffer is released and the extra one stops.
        wait_until(lambda: len(srv.containers()) == 1, PATIENCE_S, "back to min_containers")


def test_a_new_build_rolls_out_without_dropping_below_the_floor(built_store, tmp_path):
    import shutil

    from floodway.build.store import ArtifactStore

    store = tmp_path / "store"
    shutil.copytree(built_store, store, copy_function=os.link)   # hardlinks: cheap
    with running_server(TIMED_APP, store, log=tmp_path / "serve.log",
                        env=env(tmp_path)) as srv:
        (old,) = srv.containers()
        st = ArtifactStore(store)
        current = st.latest("embed")
        staging = st.staging_dir("embed")
        shutil.copytree(current, staging, copy_function=os.link, dirs_exist_ok=True)
        new_key = "f" * len(current.name)
        st.publish("embed", new_key, staging)
        warm_counts = []

        def rolled():
            cs = srv.containers()
            warm_counts.append(sum(c["state"] in ("ready", "busy") for c in cs))
            return any(c["build"] == new_key and c["state"] == "ready" for c in cs) and \
                all(c["pid"] != old["pid"] for c in cs)

        wait_until(rolled, PATIENCE_S, "the rollout", interval_s=0.05)
        assert min(warm_counts) >= 1     # the floor held throughout
        assert srv.client.post("/v1/embed", json={"inputs": ["x"]}).status_code == 200
        assert srv.metric('floodway_container_events_total{endpoint="embed",'
                          'event="rolled",lane=""}') == 1
