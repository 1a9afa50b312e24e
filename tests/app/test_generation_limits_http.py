"""Requests to a streaming endpoint that no wait would admit, over HTTP (in process): more
sequences than every container and the queue could ever hold is a 413 naming ``inputs``
(``n`` on the OpenAI routes) and the limit, not a 503 to retry; a sequence larger than a
container's KV cache names the OpenAI parameter."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.functions.prompts import Prompt
from floodway.http.admit import most_sequences
from floodway.http.app import make_asgi_app
from tests.app.scripted import client
from tests.app.test_openai_generate import StreamingBackend

app = fw.App("limits")


# At most 1 container x 2 sequences running, or 3 queued (0.9 of max_queue 4, at normal
# priority): 3 sequences in one request.
@app.endpoint(generation=fw.Generation(max_sequences=2, max_new_tokens=8),
              warm=fw.WarmPool(max_containers=1), route=fw.Route(max_queue=4))
async def small(model, prompt: Prompt):
    yield {"text": "x", "tokens": 1, "finish_reason": "stop",
           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


class TinyKV(StreamingBackend):
    """A container whose KV cache holds 5 tokens: no sequence of max_new_tokens 8 fits."""

    def stream_snapshot(self, endpoint):
        return dataclasses.replace(super().stream_snapshot(endpoint), kv_cache_tokens=5)


def run(backend_type, *requests):
    clock = ManualClock()
    backend = backend_type(app, clock)
    asgi = make_asgi_app(app, backend, clock=clock)

    async def go():
        async with client(asgi) as c:
            return [await c.post(path, json=body) for path, body in requests]
    return backend, asyncio.run(go())


def chat(**kw):
    return {"model": "small", "messages": [{"role": "user", "content": "hi"}], **kw}


def test_the_limit_is_every_container_busy_or_the_prioritys_share_of_the_queue():
    assert most_sequences(app["small"], 1) == 3 and most_sequences(app["small"]) == 4


def test_more_inputs_than_the_endpoint_can_ever_hold_is_a_413_naming_inputs():
    backend, (over, within) = run(
        StreamingBackend, ("/v1/small", {"inputs": [{"prompt": "a"}] * 4}),
        ("/v1/small", {"inputs": [{"prompt": "a"}] * 3}))
    err = over.json()["error"]
    assert over.status_code == 413 and "retry-after" not in over.headers
    assert err["field"] == "inputs" and "makes 4 sequences" in err["message"]
    assert "at most 3 at normal priority" in err["message"]
    assert "WarmPool.max_containers 1 x Generation.max_sequences 2" in err["message"]
    assert within.status_code == 200 and len(within.json()["outputs"]) == 3
    assert len(backend.calls) == 1   # the refused request did no work


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", chat(n=4)),
    ("/v1/completions", {"model": "small", "prompt": ["a", "b"], "n": 2}),   # 2 x 2 = 4
])
def test_n_choices_past_the_limit_is_a_413_naming_n_in_openais_shape(path, body):
    backend, (r,) = run(StreamingBackend, (path, body))
    err = r.json()["error"]
    assert r.status_code == 413 and "retry-after" not in r.headers
    assert (err["param"], err["type"]) == ("n", "invalid_request_error")
    assert "at most 3 at normal priority" in err["message"] and backend.calls == []


def test_n_choices_within_the_limit_are_served():
    _, (r,) = run(StreamingBackend, ("/v1/completions",
                                     {"model": "small", "prompt": ["a"], "n": 3}))
    assert r.status_code == 200 and len(r.json()["choices"]) == 3


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", chat(), "messages"),
    ("/v1/completions", {"model": "small", "prompt": "a"}, "prompt"),
])
def test_a_sequence_no_kv_cache_can_hold_names_the_openai_parameter(path, body, param):
    _, (r, native) = run(TinyKV, (path, body), ("/v1/small", {"inputs": [{"prompt": "a"}]}))
    err = r.json()["error"]
    assert r.status_code == 413 and err["param"] == param
    assert "KV-cache budget" in err["message"]
    assert (native.status_code, native.json()["error"]["field"]) == (413, "inputs")
