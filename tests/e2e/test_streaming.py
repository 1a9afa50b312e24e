"""Streaming end to end: a real `floodway serve` and real worker processes running generator
endpoints (tests/e2e/stream_app.py). The first chunk arrives before the stream ends, the
streamed text equals the buffered one, a client that leaves mid-stream stops its sequence
in the container (the active-sequence count drops), and a sync generator streams too."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import running_server, wait_until

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


def sse_events(srv, endpoint: str, inputs: list) -> list[tuple[float, object]]:
    """(arrival seconds, event) per SSE event, [DONE] last."""
    out = []
    with srv.client.stream("POST", f"/v1/{endpoint}", json={"inputs": inputs},
                           headers={"Accept": "text/event-stream"}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                out.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return out


def test_first_chunk_comes_before_the_end_and_the_stream_equals_the_buffered_text(server):
    events = sse_events(server, "words", [TEXT])
    chunks = [(t, e["chunk"]) for t, e in events if isinstance(e, dict) and "chunk" in e]
    assert len(chunks) == len(TEXT.split())
    first_s, end_s = chunks[0][0], events[-1][0]
    assert events[-1][1] == "[DONE]"
    # Ten words, 50 ms apart: the first one is read while the other nine are still coming.
    assert end_s - first_s > 0.2
    streamed = "".join(c for _, c in chunks)
    assert {"index": 0, "output": streamed} in [e for _, e in events]
    buffered = server.client.post("/v1/words", json={"inputs": [TEXT]})
    assert buffered.status_code == 200 and buffered.json() == {"outputs": [streamed]}
    assert streamed.split() == TEXT.split()
    assert server.metric('floodway_time_to_first_chunk_seconds_count{endpoint="words"}') >= 2


def active(server, endpoint: str = "words") -> int:
    return server.readiness().get("sequences", {}).get(endpoint, {}).get("active", -1)


def test_a_client_that_leaves_mid_stream_stops_its_sequence(server):
    with httpx.Client(base_url=server.base, timeout=30) as c, \
            c.stream("POST", "/v1/words", json={"inputs": ["forever"]},
                     headers={"Accept": "application/x-ndjson"}) as r:
        lines = r.iter_lines()
        first = json.loads(next(lines))
        assert first == {"index": 0, "chunk": "tick "}
        wait_until(lambda: active(server) == 1, 10, "the sequence running in its container")
    # The client closed its connection: the container's sequence is cancelled.
    wait_until(lambda: active(server) == 0, 10, "the sequence stopped after the disconnect")
    wait_until(lambda: server.metric(
        'floodway_cancelled_sequences_total{endpoint="words"}') >= 1, 10, "cancelled count")
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
