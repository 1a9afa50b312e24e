"""Streaming end to end: a real `floodway serve` and real worker processes running generator
endpoints (tests/e2e/stream_app.py). The first chunk arrives before the stream ends, the
streamed text equals the buffered one, a client that leaves mid-stream stops its sequence
in the container (the active-sequence count drops), and a sync generator streams too;
max_stream_s stops a stream (and a job's) as configured, a low-priority sequence shares a
busy container, and a buffered client that leaves is a clean 499."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e import stream_app
from tests.e2e.conftest import PATIENCE_S, running_server, wait_until

pytestmark = pytest.mark.e2e
STREAM_APP = Path(__file__).with_name("stream_app.py")
TEXT = "the quick brown fox jumps over the lazy dog again"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore
    from floodway.functions.discover import load_app

    root = tmp_path_factory.mktemp("stream-store")
    _, eps = load_app(str(STREAM_APP))
    for ep in eps:
        build_endpoint(ep, ArtifactStore(root))
    tmp = tmp_path_factory.mktemp("stream-serve")
    with running_server(STREAM_APP, root, log=tmp / "serve.log",
                        env={"FLOODWAY_JOBS_DB": str(tmp / "jobs.sqlite3")}) as srv:
        yield srv


def test_first_chunk_comes_before_the_end_and_the_stream_equals_the_buffered_text(server):
    events = server.sse("words", [TEXT])
    chunks = [(t, e["chunk"]) for t, e in events if isinstance(e, dict) and "chunk" in e]
    assert len(chunks) == len(TEXT.split())
    first_s, end_s = chunks[0][0], events[-1][0]
    assert events[-1][1] == "[DONE]"
    # Ten words, each at least GAP_S after the one before: the first one is read while the
    # other nine are still coming, at least a gap before the end (a buffered answer would
    # bring every event at once).
    assert end_s - first_s > stream_app.GAP_S
    streamed = "".join(c for _, c in chunks)
    assert {"index": 0, "output": streamed} in [e for _, e in events]
    buffered = server.client.post("/v1/words", json={"inputs": [TEXT]})
    assert buffered.status_code == 200 and buffered.json() == {"outputs": [streamed]}
    assert streamed.split() == TEXT.split()
    assert server.metric('floodway_time_to_first_chunk_seconds_count{endpoint="words"}') >= 2


def active(server, endpoint: str = "words") -> int:
    return server.sequences(endpoint).get("active", -1)


def test_a_client_that_leaves_mid_stream_stops_its_sequence(server):
    with httpx.Client(base_url=server.base, timeout=30) as c, \
            c.stream("POST", "/v1/words", json={"inputs": ["forever"]},
                     headers={"Accept": "application/x-ndjson"}) as r:
        lines = r.iter_lines()
        first = json.loads(next(lines))
        assert first == {"index": 0, "chunk": "tick "}
        wait_until(lambda: active(server) == 1, PATIENCE_S,
                   "the sequence running in its container")
    # The client closed its connection: the container's sequence is cancelled.
    wait_until(lambda: active(server) == 0, PATIENCE_S,
               "the sequence stopped after the disconnect")
    wait_until(lambda: server.metric(
        'floodway_cancelled_sequences_total{endpoint="words"}') >= 1, PATIENCE_S,
        "cancelled count")
    # Its slot is free again: the endpoint still answers.
    assert server.client.post("/v1/words", json={"inputs": ["still here"]}).json() == \
        {"outputs": ["still here "]}


def test_a_sync_generator_streams_too(server):
    with server.client.stream("POST", "/v1/counts", json={"inputs": [3, 2]},
                              headers={"Accept": "application/x-ndjson"}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    outputs = {e["index"]: e["output"] for e in lines if "output" in e}
    assert outputs == {0: {"text": "0 1 2 ", "tokens": 3}, 1: {"text": "0 1 ", "tokens": 2}}
    assert lines[-1] == {"done": True}
    assert sum(1 for e in lines if "chunk" in e) == 5


def test_max_stream_s_ends_a_stream_and_a_job_as_configured(server):
    max_stream_s = stream_app.app["endless"].generation.max_stream_s
    t0 = time.monotonic()
    events = server.sse("endless", ["x"])
    took = time.monotonic() - t0
    errors = [e["error"] for _, e in events if isinstance(e, dict) and "error" in e]
    assert errors and errors[0]["type"] == "deadline_exceeded"
    assert "max_stream_s (1 s)" in errors[0]["message"]
    # Ended by max_stream_s as configured (the error names it; the route's 10 s timeout
    # would say so instead), and not before it.
    assert took >= max_stream_s
    job = server.client.post("/v1/endless/jobs", json={"inputs": ["y"]})
    assert job.status_code == 202
    done = wait_until(lambda: (w := server.client.get(job.headers["location"]).json())
                      ["status"] in ("succeeded", "failed") and w, PATIENCE_S, "the job's end")
    assert "max_stream_s (1 s)" in json.dumps(done)
    wait_until(lambda: server.sequences("endless").get("active") == 0, PATIENCE_S,
               "a free slot")


def test_a_low_priority_sequence_takes_a_free_slot_beside_a_long_stream(server):
    with httpx.Client(base_url=server.base, timeout=30) as c, \
            c.stream("POST", "/v1/words", json={"inputs": ["forever"]},
                     headers={"Accept": "application/x-ndjson"}) as r:
        lines = r.iter_lines()
        next(lines)   # running in its container
        low = server.client.post("/v1/words", json={"inputs": ["low priority"]},
                                 headers={"X-Priority": "low"})
        # Answered while the endless stream still runs (it never ends): beside it, not
        # after it.
        assert json.loads(next(lines)) == {"index": 0, "chunk": "tick "}
    assert low.status_code == 200 and low.json() == {"outputs": ["low priority "]}


def test_a_buffered_client_that_leaves_is_a_clean_client_closed(server):
    before = server.metric('floodway_requests_total{endpoint="words",outcome="500"}')
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base}/v1/words", json={"inputs": ["forever"]}, timeout=1.0)
    wait_until(lambda: server.metric(
        'floodway_requests_total{endpoint="words",outcome="client_closed"}') >= 1,
        PATIENCE_S, "the request counted as client_closed")
    assert server.metric('floodway_requests_total{endpoint="words",outcome="500"}') == before
    wait_until(lambda: active(server) == 0, PATIENCE_S, "its sequence cancelled")
