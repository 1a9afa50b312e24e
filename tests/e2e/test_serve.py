"""End to end: `floodway serve modal_app.py` with real worker processes and the real model;
and `floodway serve` stopped by a SIGTERM to its process group, and its log of an endpoint
function that raises (tests/e2e/plain_app.py)."""

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import ROOT, free_port
from tests.e2e import plain_app
from tests.e2e.conftest import PATIENCE_S, wait_until

pytestmark = pytest.mark.e2e
# Requests that must reach a model although an earlier one had the same text.
NO_CACHE = {"Cache-Control": "no-cache"}

LONG_TEXT = " ".join(
    ["Traffic to a model endpoint rarely arrives evenly; it comes in bursts that can be many "
     "times the average rate, and a serving system must decide within milliseconds whether "
     "to run each request on a warm container, start a cold one, queue it, or refuse it."] * 5)


def test_ready_detail_shows_two_torch_free_containers(server):
    # modal_app keeps min 1 + buffer 1: the buffer container comes once the first one is
    # busy serving (Modal's buffer: idle containers on top of the busy ones).
    stop = threading.Event()

    def keep_busy() -> None:
        while not stop.is_set():
            server.client.post("/v1/embed", json={"inputs": [LONG_TEXT] * 2},
                               headers=NO_CACHE)

    with ThreadPoolExecutor(2) as pool:
        for _ in range(2):
            pool.submit(keep_busy)
        try:
            wait_until(lambda: len(server.containers()) >= 2, PATIENCE_S,
                       "a buffer container start")
        finally:
            stop.set()
    wait_until(lambda: sum(c["state"] == "ready" for c in server.containers()) >= 2,
               PATIENCE_S, "the buffer container ready")
    detail = server.readiness()
    (containers,) = detail["endpoints"].values()
    assert detail["ready"] is True and len(containers) >= 2
    for c in containers:
        assert c["state"] == "ready" and c["backend"] == "onnxruntime-cpu"
        assert c["torch_imported"] is False
        assert {"process_start", "imports", "artifact_load", "warmup"} <= set(c["cold_start_s"])
        assert c["cpu_s"] > 0        # its worker's CPU seconds (loading, warming up)


def test_embeddings_match_sentence_transformers(server, model_dir):
    from sentence_transformers import SentenceTransformer

    texts = ["serendipity", LONG_TEXT]
    assert 180 <= len(LONG_TEXT.split()) <= 240
    r = server.client.post("/v1/embed", json={"inputs": texts})
    assert r.status_code == 200
    got = np.asarray(r.json()["outputs"], dtype=np.float64)
    assert got.shape == (2, 384)
    ref = SentenceTransformer(str(model_dir), device="cpu").encode(
        texts, normalize_embeddings=True)
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    assert np.all(cos >= 0.999), cos
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_outputs_in_input_order(server):
    texts = [f"text number {i}" for i in range(40)]     # > max_batch_rows: split across batches
    batch = np.asarray(server.client.post("/v1/embed", json={"inputs": texts}).json()["outputs"])
    for i in (0, 17, 39):
        one = server.client.post("/v1/embed", json={"inputs": [texts[i]]},
                                 headers=NO_CACHE).json()["outputs"][0]
        assert np.allclose(batch[i], one, atol=1e-5)


@pytest.mark.parametrize("body,status,needle", [
    (b'{"inputs": ["a",', 400, "not valid JSON"),
    (b'{"texts": ["a"]}', 422, "missing required field 'inputs'"),
    (b'{"inputs": ["a", 7]}', 422, "inputs[1]: Input should be a valid string"),
    (b'{"inputs": []}', 422, "'inputs' is empty"),
])
def test_bad_input_is_4xx_and_server_keeps_serving(server, body, status, needle):
    r = server.client.post("/v1/embed", content=body,
                           headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert needle in r.json()["error"]["message"]
    ok = server.client.post("/v1/embed", json={"inputs": ["still here"]})
    assert ok.status_code == 200 and len(ok.json()["outputs"][0]) == 384


def test_killed_container_is_replaced(server):
    # Kill them all: the pool is then under its floor (min_containers 1) and must refill it.
    # (One killed beside an idle buffer container leaves the floor met: no replacement.)
    before = server.readiness()["endpoints"]["embed"]
    for victim in before:
        os.kill(victim["pid"], signal.SIGKILL)

    def replaced():
        cs = server.readiness()["endpoints"]["embed"]
        live = [c for c in cs if c["state"] == "ready"]
        return len(live) >= 1 and not {c["id"] for c in before} & {c["id"] for c in cs}

    wait_until(replaced, PATIENCE_S, "a replacement container")
    r = server.client.post("/v1/embed", json={"inputs": ["after the crash"]})
    assert r.status_code == 200


def test_metrics_show_the_pool_and_its_cold_starts(server):
    server.client.post("/v1/embed", json={"inputs": ["counted"]})
    text = server.client.get("/metrics").text
    assert 'floodway_containers{endpoint="embed",lane="",state="ready"}' in text
    assert 'phase="artifact_load"' in text and 'phase="warmup"' in text
    line = next(x for x in text.splitlines()
                if x.startswith('floodway_requests_total{endpoint="embed",outcome="ok"}'))
    assert float(line.split()[-1]) >= 1


def test_a_sigterm_to_the_process_group_stops_the_containers_without_a_failure(tmp_path):
    # As a service manager stops a service: the signal reaches the router and its workers.
    env = {**os.environ, "FLOODWAY_STORE": str(plain_app.build(tmp_path / "store")),
           "FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3")}
    port, log = free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.cli", "serve", str(Path(plain_app.__file__)),
             "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is None and httpx.get(f"{base}/readyz").status_code == 200,
                   PATIENCE_S, "a ready container")
        answer = httpx.post(f"{base}/v1/upper", json={"inputs": ["a"]}, timeout=30).json()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(PATIENCE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert answer == {"outputs": ["A"]}
    assert "container 1 of upper stopped with the server" in text and "failed" not in text, text


def test_the_functions_traceback_is_in_the_server_log_once_not_in_the_answer(tmp_path):
    env = {**os.environ, "FLOODWAY_STORE": str(plain_app.build(tmp_path / "store")),
           "FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3")}
    port, log = free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.cli", "serve", str(Path(plain_app.__file__)),
             "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is None and httpx.get(f"{base}/readyz").status_code == 200,
                   PATIENCE_S, "a ready container")
        answers = [httpx.post(f"{base}/v1/upper", json={"inputs": ["boom"]}, timeout=30)
                   for _ in range(3)]
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(PATIENCE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert [a.status_code for a in answers] == [500] * 3
    assert "ValueError: boom is no word" in answers[0].text
    assert "Traceback" not in answers[0].text   # the client gets the message alone
    # The log: the traceback once (the repeats are counted), with endpoint and container.
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "endpoint 'upper', container 1: the function raised:" in text
    assert 'plain_app.py", line' in text and "in upper" in text
    assert "serving on http" not in text   # --log-level warning: no INFO lines
