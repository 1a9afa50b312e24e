"""`show_example`: the request `floodway serve --show-example` sends and what it prints,
against a router played by an httpx mock transport: a streaming endpoint is asked for
Server-Sent Events and its events summed up, another endpoint for one JSON answer."""

from __future__ import annotations

import asyncio
import json

import httpx

import floodway as fw
from floodway.runtime.example import PROMPT_EXAMPLE, describe_stream, show_example

app = fw.App("ex")


@app.endpoint()
async def generate(model, prompt: fw.Prompt):
    yield {"text": "x", "tokens": 1}


@app.endpoint()
def embed(model, texts: list[str]) -> list:
    return [[0.0, 1.0] for _ in texts]


@app.endpoint()
def count(model, inputs: list[int]) -> list:
    return inputs


def sse(*events) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


LAST = {"text": "!", "tokens": 1, "finish_reason": "stop",
        "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
OUTPUT = {"text": " world!", "tokens": 2, "finish_reason": "stop",
          "usage": {"prompt_tokens": 1, "completion_tokens": 2}}


def shown(ep, answer):
    """What show_example printed and the requests it sent, `answer(request)` playing the
    router."""
    lines, seen = [], []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await show_example("http://127.0.0.1:8000", ep, client=c, out=lines.append)

    status = asyncio.run(go())
    return status, "\n".join(lines), seen


def test_a_prompt_endpoint_is_sent_a_small_prompt_as_a_stream_and_the_curl_line_is_sse():
    def answer(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(
            {"index": 0, "chunk": {"text": " world", "tokens": 1}},
            {"index": 0, "chunk": LAST}, {"index": 0, "output": OUTPUT}))

    status, text, [request] = shown(app["generate"], answer)
    assert status == 200
    assert request.headers["accept"] == "text/event-stream"
    assert json.loads(request.content) == {"inputs": [PROMPT_EXAMPLE]}
    assert ("curl -sN -X POST http://127.0.0.1:8000/v1/generate -H 'Content-Type: "
            "application/json' -H 'Accept: text/event-stream' -d '{\"inputs\": [{\"prompt\": "
            "\"Hello\", \"max_new_tokens\": 16}]}'") in text
    assert "3 events then data: [DONE]" in text
    assert "input 0: 2 chunks, then its output: an object with keys text, tokens, " \
        "finish_reason, usage (text ' world!')" in text
    assert "model 'generate'" in text and "/v1/chat/completions" in text


def test_another_endpoint_gets_one_json_answer():
    def answer(request):
        n = len(json.loads(request.content)["inputs"])
        return httpx.Response(200, json={"outputs": [[0.5, 1.0, 2.0]] * n})

    status, text, [request] = shown(app["embed"], answer)
    assert status == 200 and "text/event-stream" not in request.headers.get("accept", "")
    assert "curl -s -X POST http://127.0.0.1:8000/v1/embed" in text and "-sN" not in text
    assert "2 outputs, each 3 numbers." in text


def test_a_refused_stream_prints_its_status_and_error():
    def answer(request):
        return httpx.Response(503, json={"error": {"type": "overloaded", "message": "busy"}})

    status, text, _ = shown(app["generate"], answer)
    assert status == 503 and "answer (503" in text and "busy" in text


def test_no_example_for_an_item_type_without_one():
    status, text, seen = shown(app["count"], lambda r: httpx.Response(500))
    assert status is None and seen == []
    assert "no example request for count's item type" in text


def test_describe_stream_tells_errors_and_unfinished_inputs():
    lines = describe_stream([{"index": 0, "chunk": "a"}, {"index": 1, "error": {
        "type": "deadline_exceeded", "message": "late"}}, {"index": 2, "chunk": "b"}])
    assert lines[0] == "input 0: 1 chunk, and no end"
    assert lines[1].startswith("input 1: 0 chunks, then an error: ") and "late" in lines[1]
    assert lines[2] == "input 2: 1 chunk, and no end"
