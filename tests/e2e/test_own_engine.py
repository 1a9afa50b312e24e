"""Bring-your-own engine end to end: examples/own_engine_app.py (a `load=` hook building a
toy engine that batches internally, as vLLM does) built by `floodway build` and served by
`floodway serve`, one container.

Checked here: SSE streams the first chunk long before the end, and the streamed text equals
the buffered one; concurrent requests share the engine's steps (N requests of k tokens run
in about k steps, not N * k: the engine's own step numbers, not wall time); a client that
leaves mid-stream aborts its request in the engine (the container's active sequences and KV
tokens drop to 0, the cancelled count rises); the engine's `generation_load()` reaches
/readyz; the `openai` client streams chat completions from it; /metrics counts its time to
first chunk and its generated tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from examples.own_engine_app import STEP_S
from tests.conftest import ROOT
from tests.e2e.conftest import PATIENCE_S, openai_chat_stream, running_server, wait_until

pytestmark = pytest.mark.e2e
APP = ROOT / "examples" / "own_engine_app.py"
NAME = "own_engine"
PROMPT = "warm pools absorb bursts of traffic"


def expected(prompt: str, k: int) -> str:
    """The toy engine's greedy text: the prompt's words reversed, cycled, k of them."""
    rev = prompt.split()[::-1]
    return " ".join(rev[i % len(rev)] for i in range(k))


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("own-engine")
    env = {"FLOODWAY_STORE": str(root / "store"), "FLOODWAY_JOBS_DB": str(root / "jobs.sqlite3"),
           "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(APP)], cwd=ROOT,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{NAME}: built" in res.stdout + res.stderr
    with running_server(APP, env["FLOODWAY_STORE"], "--containers", "1",
                        log=root / "serve.log", env=env) as server:
        yield server


def sequences(srv) -> dict:
    return srv.sequences(NAME)


def test_first_chunk_before_the_end_and_streamed_equals_buffered(srv):
    k = 20
    events = srv.sse(NAME, [{"prompt": PROMPT, "max_new_tokens": k}])
    assert events[-1][1] == "[DONE]"
    chunks = [(t, e["chunk"]) for t, e in events if isinstance(e, dict) and "chunk" in e]
    # One chunk per engine step, one token each; each step takes at least STEP_S: the first
    # chunk is read while the other 19 are still to be made, at least a step before the
    # last (a buffered answer would bring every chunk at once).
    assert [c["tokens"] for _, c in chunks] == [1] * k
    assert chunks[-1][0] - chunks[0][0] > STEP_S
    streamed = "".join(c["text"] for _, c in chunks)
    assert streamed == expected(PROMPT, k)
    (end,) = [e["output"] for _, e in events if isinstance(e, dict) and "output" in e]
    assert end["text"] == streamed and end["finish_reason"] == "length"
    assert end["usage"] == {"prompt_tokens": len(PROMPT.split()), "completion_tokens": k}
    buffered = srv.client.post(f"/v1/{NAME}", json={"inputs": [{"prompt": PROMPT,
                                                                "max_new_tokens": k}]})
    assert buffered.status_code == 200, buffered.text
    (out,) = buffered.json()["outputs"]
    assert out["text"] == streamed and out["tokens"] == k


def test_sampled_text_with_a_seed_and_stop_strings_stream_as_they_buffer(srv):
    items = [{"prompt": PROMPT, "max_new_tokens": 30, "temperature": 0.8, "seed": 5},
             {"prompt": PROMPT, "max_new_tokens": 30, "stop": ["of traffic"]}]
    events = srv.sse(NAME, items)
    buffered = srv.client.post(f"/v1/{NAME}", json={"inputs": items}).json()["outputs"]
    for i, out in enumerate(buffered):
        text = "".join(e["chunk"]["text"] for _, e in events
                       if isinstance(e, dict) and e.get("index") == i and "chunk" in e)
        assert text == out["text"], i
    assert buffered[0]["finish_reason"] == "length" and buffered[0]["text"] != \
        expected(PROMPT, 30)
    # "traffic of bursts absorb ...": the stop string is never generated in that order, so
    # the text runs to the length; "bursts of" is, and cuts the text before it.
    assert buffered[1]["finish_reason"] == "length"
    cut = srv.client.post(f"/v1/{NAME}", json={"inputs": [
        {"prompt": PROMPT, "max_new_tokens": 30, "stop": "bursts absorb"}]}).json()
    (out,) = cut["outputs"]
    assert (out["text"], out["finish_reason"]) == ("traffic of ", "stop")
    assert out["usage"]["completion_tokens"] == 4   # the stop string's tokens count


def test_concurrent_requests_share_the_engines_steps(srv):
    n, k = 4, 25
    go = threading.Barrier(n)

    def one(i: int) -> dict:
        with httpx.Client(base_url=srv.base, timeout=30) as c:
            assert c.get("/healthz").status_code == 200   # connected: all post at once
            go.wait()
            r = c.post(f"/v1/{NAME}", json={"inputs": [{"prompt": f"{PROMPT} {i}",
                                                         "max_new_tokens": k}]})
            assert r.status_code == 200, r.text
            return r.json()["outputs"][0]

    with ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(one, range(n)))
    steps = [o["engine"] for o in outs]
    # Each request got one token per step, every step from its first to its last ...
    assert all(s["last_step"] - s["first_step"] + 1 == k for s in steps), steps
    # ... and those in the engine at the same step ran in one batch (the engine's own step
    # numbers, not wall time): the largest batch is as many as overlapped, and they did
    # overlap, the whole lot in fewer steps than one at a time (n * k = 100).
    first = min(s["first_step"] for s in steps)
    span = max(s["last_step"] for s in steps) - first + 1
    overlap = max(sum(s["first_step"] <= t <= s["last_step"] for s in steps)
                  for t in range(first, first + span))
    assert max(s["peak_batch"] for s in steps) == overlap >= 2, steps
    assert span < n * k, steps
    assert [o["text"] for o in outs] == [expected(f"{PROMPT} {i}", k) for i in range(n)]


def test_a_client_that_leaves_mid_stream_aborts_its_request_in_the_engine(srv):
    before = srv.metric(f'floodway_cancelled_sequences_total{{endpoint="{NAME}"}}')
    s0 = srv.client.post(f"/v1/{NAME}", json={"inputs": [{"prompt": "x", "max_new_tokens": 1}]}
                         ).json()["outputs"][0]["engine"]["last_step"]   # the engine's step now
    # 256 tokens of 20 ms: five seconds of stream; the client leaves after the first chunk.
    with httpx.Client(base_url=srv.base, timeout=30) as c, \
            c.stream("POST", f"/v1/{NAME}", json={"inputs": [{"prompt": PROMPT}]},
                     headers={"Accept": "application/x-ndjson"}) as r:
        lines = r.iter_lines()
        first = json.loads(next(lines))
        assert first["chunk"]["tokens"] == 1
        running = wait_until(lambda: (s := sequences(srv)).get("active") == 1
                             and s.get("kv_cache_tokens", 0) > 0 and s, PATIENCE_S,
                             "the request running in the engine, holding KV tokens")
        assert running["kv_cache_capacity"] == 8 * 4096   # the engine's generation_load()
    wait_until(lambda: sequences(srv).get("active") == 0, PATIENCE_S,
               "the request aborted after the disconnect")
    assert sequences(srv)["kv_cache_tokens"] == 0
    wait_until(lambda: srv.metric(
        f'floodway_cancelled_sequences_total{{endpoint="{NAME}"}}') > before, PATIENCE_S,
        "cancelled count")
    ok = srv.client.post(f"/v1/{NAME}", json={"inputs": [{"prompt": "still here",
                                                          "max_new_tokens": 3}]})
    assert ok.status_code == 200, ok.text
    (out,) = ok.json()["outputs"]
    assert out["text"] == "here still here"
    # It ran alone, and well before the aborted request would have made its 256 tokens:
    # that request left the engine's batch (it did not run on to its end unread).
    assert out["engine"]["peak_batch"] == 1
    assert out["engine"]["first_step"] - s0 < 256, (s0, out["engine"])


def test_the_generation_cap_applies_to_the_own_engine(srv):
    over = srv.client.post(f"/v1/{NAME}", json={"inputs": [{"prompt": "x",
                                                            "max_new_tokens": 257}]})
    assert over.status_code == 422 and "max_new_tokens" in over.text


def test_openai_client_streams_chat_completions(srv):
    import openai

    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused")
    kwargs = {"model": NAME, "max_tokens": 6, "temperature": 0,
              "messages": [{"role": "user", "content": "what is a warm pool"}]}
    parts, usage = openai_chat_stream(client, **kwargs)
    # The toy renders the chat as "user: what is a warm pool\nassistant:" and reverses it.
    assert len(parts) > 1 and "".join(parts) == "assistant: pool warm a is what"
    whole = client.chat.completions.create(**kwargs)
    assert whole.choices[0].message.content == "".join(parts)
    assert whole.choices[0].finish_reason == "length"
    assert usage.completion_tokens == whole.usage.completion_tokens == 6
    assert usage.prompt_tokens == 7
    done = client.completions.create(model=NAME, prompt="one two three", max_tokens=4,
                                     temperature=0)
    assert done.choices[0].text == "three two one three"


def test_metrics_count_time_to_first_chunk_and_generated_tokens(srv):
    ttfc = f'floodway_time_to_first_chunk_seconds_count{{endpoint="{NAME}"}}'
    tokens = f'floodway_generated_tokens_total{{endpoint="{NAME}"}}'
    t0, n0 = srv.metric(ttfc), srv.metric(tokens)
    events = srv.sse(NAME, [{"prompt": PROMPT, "max_new_tokens": 9},
                       {"prompt": PROMPT, "max_new_tokens": 4}])
    assert events[-1][1] == "[DONE]"
    assert srv.metric(ttfc) == t0 + 2
    assert srv.metric(tokens) == n0 + 13
    assert srv.metric(f'floodway_inter_chunk_seconds_count{{endpoint="{NAME}"}}') > 0
