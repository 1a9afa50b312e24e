"""Completions and chat completions in process (ASGI), buffered and streamed, over a
backend that runs the streaming endpoint's generator in the test's event loop; and the
official `openai` client reading them."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

import floodway as fw
from floodway.core.clock import ManualClock
from floodway.core.stream_events import ChunkEvent
from floodway.errors import RequestError
from floodway.functions.prompts import Prompt
from floodway.http.app import make_asgi_app
from floodway.http.openai_answers import StreamAnswer
from floodway.http.openai_stream import openai_events
from tests.app.scripted import ScriptedBackend, client
from tests.app.streamed import Streamed

app = fw.App("gen")
SEEN: list[Prompt] = []


@app.endpoint(generation=fw.Generation(max_new_tokens=8))
async def talk(model, prompt: Prompt):
    """One chunk per word of the prompt (or of the last message), then the engine's last
    chunk. "boom" raises where it stands; "explode" first raises before any chunk;
    "toolong" is refused as the built-in engine refuses a prompt over its context."""
    SEEN.append(prompt)
    text = prompt.prompt if prompt.prompt is not None else prompt.messages[-1].content
    words = text.split()
    if words[:1] == ["explode"]:
        raise ValueError("exploded")
    if words[:1] == ["toolong"]:
        raise RequestError("prompt: 602 tokens is too long: at most 511 tokens leave room "
                           "for an answer", status=422, field="prompt")
    for w in words[:prompt.max_new_tokens or 8]:
        if w == "boom":
            raise ValueError("boom")
        yield {"text": w + " ", "tokens": 1}
    done = min(len(words), prompt.max_new_tokens or 8)
    yield {"text": "", "tokens": 0, "finish_reason": "length" if done < len(words) else "stop",
           "usage": {"prompt_tokens": len(words), "completion_tokens": done}}


class StreamingBackend(ScriptedBackend):
    def enqueue(self, endpoint, inputs, *, timeout_s, priority=1, tenant="anonymous"):
        self.calls.append((endpoint, inputs, timeout_s))
        return Streamed("talk", self.app.endpoints[endpoint].fn, inputs, self.clock)


@pytest.fixture
def asgi():
    SEEN.clear()
    clock = ManualClock()
    return make_asgi_app(app, StreamingBackend(app, clock), clock=clock)


def chat(content, **kw):
    return {"model": "talk", "messages": [{"role": "user", "content": content}], **kw}


def posts(asgi, *requests):
    async def go():
        async with client(asgi) as c:
            return [await c.post(path, json=body) for path, body in requests]
    return asyncio.run(go())


def events(r) -> list:
    """An SSE answer's data payloads, JSON decoded ("[DONE]" as is)."""
    assert r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b]
    assert all(b.startswith("data: ") for b in blocks)
    return [b[6:] if b[6:] == "[DONE]" else json.loads(b[6:]) for b in blocks]


def test_a_buffered_chat_completion(asgi):
    [r] = posts(asgi, ("/v1/chat/completions", chat("one two three", seed=3, n=2)))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "talk" and isinstance(body["created"], int)
    assert [c["message"]["content"] for c in body["choices"]] == ["one two three "] * 2
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "stop"]
    # the prompt counted once for its two choices
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    assert [(p.temperature, p.seed) for p in SEEN] == [(1.0, 3), (1.0, 4)]


def test_a_buffered_completion_of_two_prompts(asgi):
    [r] = posts(asgi, ("/v1/completions", {"model": "talk", "prompt": ["a b c", "d"],
                                           "max_tokens": 2, "temperature": 0}))
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == \
        [(0, "a b ", "length"), (1, "d ", "stop")]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert [p.max_new_tokens for p in SEEN] == [2, 2]


def test_a_streamed_chat_completion_with_usage(asgi):
    [r] = posts(asgi, ("/v1/chat/completions",
                       chat("one two", stream=True, stream_options={"include_usage": True})))
    assert r.status_code == 200
    *chunks, usage, done = events(r)
    assert done == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "one "}
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "one two "
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 4


def test_streamed_text_equals_the_buffered_text(asgi):
    body = {"model": "talk", "prompt": "x y z w", "max_tokens": 3}
    buffered, streamed = posts(asgi, ("/v1/completions", body),
                               ("/v1/completions", {**body, "stream": True}))
    *chunks, done = events(streamed)
    assert "usage" not in chunks[0]   # only with stream_options.include_usage
    assert "".join(c["choices"][0]["text"] for c in chunks) == \
        buffered.json()["choices"][0]["text"] == "x y z "


def test_refusals_name_the_openai_parameter(asgi):
    over, tools, wrong = posts(
        asgi, ("/v1/chat/completions", chat("hi", max_completion_tokens=9)),
        ("/v1/chat/completions", chat("hi", tools=[{"type": "function"}])),
        ("/v1/completions", {"model": "talk", "prompt": "hi", "temperature": -1}))
    assert over.status_code == 400
    err = over.json()["error"]
    assert err["param"] == "max_completion_tokens" and "allowed: 1 to 8" in err["message"]
    assert tools.json()["error"]["param"] == "tools"
    assert wrong.json()["error"]["param"] == "temperature"
    assert SEEN == []   # refused before any work


def test_failures_before_and_during_the_stream(asgi):
    before, during = posts(asgi, ("/v1/chat/completions", chat("explode now", stream=True)),
                           ("/v1/chat/completions", chat("a boom", stream=True)))
    # nothing streamed yet: an error answer with its status
    assert before.status_code == 500
    assert before.json()["error"]["code"] == "endpoint_error"
    # mid-stream: the chunk sent, then an error event ends the stream (no [DONE])
    first, error = events(during)
    assert first["choices"][0]["delta"]["content"] == "a "
    assert error["error"]["type"] == "server_error" and "boom" in error["error"]["message"]


def test_a_prompt_the_model_refuses_is_a_client_error_on_every_route(asgi):
    """The engine's RequestError (a prompt over the context) is the client's fault: 422
    naming the field on the native route, OpenAI's 400 on its routes, streamed or not."""
    native, both, chat_sse, completion = posts(
        asgi, ("/v1/talk", {"inputs": [{"prompt": "toolong x"}]}),
        ("/v1/talk", {"inputs": [{"prompt": "toolong x"}, {"prompt": "fine"}]}),
        ("/v1/chat/completions", chat("toolong x", stream=True)),
        ("/v1/completions", {"model": "talk", "prompt": "toolong x"}))
    err = native.json()["error"]
    assert native.status_code == 422 and err["type"] == "input_error"
    assert err["field"] == "inputs[0].prompt" and "602 tokens is too long" in err["message"]
    assert both.status_code == 422 and both.json()["outputs"][1]["text"] == "fine "
    assert chat_sse.status_code == 400 and completion.status_code == 400
    assert chat_sse.json()["error"]["type"] == "invalid_request_error"
    assert "602 tokens is too long" in completion.json()["error"]["message"]
    # named by OpenAI's parameter, the native names (inputs[0], the item's field) not told
    chat_err, completion_err = chat_sse.json()["error"], completion.json()["error"]
    assert chat_err["param"] == "messages" and completion_err["param"] == "prompt"
    assert chat_err["message"] == ("messages: 602 tokens is too long: at most 511 tokens "
                                   "leave room for an answer")
    assert completion_err["message"].startswith("prompt: 602 tokens")
    assert "inputs" not in chat_err["message"] + completion_err["message"]


def test_an_input_error_names_the_openai_parameter_buffered_and_mid_stream(asgi):
    """n choices that all fail on their input (a 400 naming messages), and the second
    prompt of a list failing after the first streamed (an error event naming prompt[1])."""
    both, streamed = posts(
        asgi, ("/v1/chat/completions", chat("toolong x", n=2)),
        ("/v1/completions", {"model": "talk", "prompt": ["a b", "toolong"], "stream": True}))
    err = both.json()["error"]
    assert both.status_code == 400 and err["param"] == "messages"
    assert err["message"].startswith("messages: 602 tokens is too long")
    *_, error = events(streamed)
    assert streamed.status_code == 200
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["param"], error["error"]["code"]) == ("prompt[1]", "input_error")
    assert error["error"]["message"].startswith("prompt[1]: 602 tokens is too long")


def test_a_lone_surrogate_names_the_openai_field_and_path(asgi):
    async def go():
        async with client(asgi) as c:
            hdr = {"content-type": "application/json"}
            return (await c.post("/v1/chat/completions", headers=hdr, content=(
                        b'{"model": "talk", "messages": [{"role": "user", "content": "a"},'
                        b' {"role": "user", "content": "b\\ud800"}]}')),
                    await c.post("/v1/completions", headers=hdr, content=(
                        b'{"model": "talk", "prompt": ["ok", "\\udfff"], "n": 2}')))

    msgs, prompts = (r.json()["error"] for r in asyncio.run(go()))
    assert msgs["param"] == "messages[1].content"
    assert msgs["message"] == ("messages[1].content: the string is not valid Unicode "
                               "(surrogates not allowed at character 1)")
    assert prompts["param"] == "prompt[1]" and prompts["message"].startswith("prompt[1]: ")


@pytest.mark.parametrize("n", [60, 128])
def test_n_more_than_the_backend_can_ever_admit_is_413_naming_n_not_503(asgi, n):
    # The scripted backend: 2 containers x 4 sequences, or 0.9 of a queue of 8: at most 8.
    buffered, streamed, chat_n = posts(
        asgi, ("/v1/completions", {"model": "talk", "prompt": "hi", "n": n}),
        ("/v1/completions", {"model": "talk", "prompt": "hi", "n": n, "stream": True}),
        ("/v1/chat/completions", chat("hi", n=n)))
    for r in (buffered, streamed, chat_n):
        assert r.status_code == 413 and "retry-after" not in r.headers
        err = r.json()["error"]
        assert err["param"] == "n" and err["type"] == "invalid_request_error"
        assert f"{n} choices" in err["message"] and "at most 8" in err["message"]
    assert SEEN == []   # refused before any work


def test_a_wrong_method_on_an_openai_path_is_answered_in_openais_shape(asgi):
    async def go():
        async with client(asgi) as c:
            return [await c.get(p) for p in ("/v1/chat/completions", "/v1/completions",
                                            "/v1/embeddings")] + \
                [await c.delete("/v1/models"), await c.get("/v1/talk")]

    *wrong, native = asyncio.run(go())
    for r in wrong:
        err = r.json()["error"]
        assert r.status_code == 405 and set(err) == {"message", "type", "param", "code"}
        assert (err["type"], err["code"]) == ("invalid_request_error", "method_not_allowed")
        assert "Method Not Allowed" in err["message"]
    assert native.status_code == 405 and native.json()["error"]["type"] == "method_not_allowed"


def test_an_input_error_mid_stream_is_an_input_error_event(asgi):
    """Another input already streamed: a 200 whose event names the input error; one
    input failing first: its 422 (nothing was sent yet)."""
    async def go():
        async with client(asgi) as c:
            sse = {"Accept": "text/event-stream"}
            return (await c.post("/v1/talk", json={"inputs": [{"prompt": "a b"},
                                                              {"prompt": "toolong"}]},
                                 headers=sse),
                    await c.post("/v1/talk", json={"inputs": [{"prompt": "toolong"}]},
                                 headers=sse))
    r, alone = asyncio.run(go())
    assert alone.status_code == 422 and alone.json()["error"]["type"] == "input_error"
    errors = [e["error"] for e in events(r)[:-1] if "error" in e]
    assert r.status_code == 200
    assert errors == [{"type": "input_error", "field": "inputs[1].prompt",
                       "message": errors[0]["message"]}]
    assert "inputs[1]: prompt: 602 tokens is too long" in errors[0]["message"]


def test_the_native_route_holds_max_new_tokens_to_the_generation_cap(asgi):
    [r] = posts(asgi, ("/v1/talk", {"inputs": [{"prompt": "a", "max_new_tokens": 8},
                                               {"prompt": "b", "max_new_tokens": 9}]}))
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "inputs[1].max_new_tokens"
    assert "9 is over the cap" in r.json()["error"]["message"] and SEEN == []


def test_chat_roles_are_one_rule_on_both_routes(asgi):
    bot = [{"role": "bot", "content": "x"}]
    native, openai_route, dev = posts(
        asgi, ("/v1/talk", {"inputs": [{"messages": bot}]}),
        ("/v1/chat/completions", {"model": "talk", "messages": bot}),
        ("/v1/talk", {"inputs": [{"messages": [{"role": "developer", "content": "hi"}]}]}))
    n, o = native.json()["error"], openai_route.json()["error"]
    assert (native.status_code, n["field"]) == (422, "inputs[0].messages[0].role")
    assert (openai_route.status_code, o["param"]) == (400, "messages[0].role")
    allowed = "'bot' is not a chat role; allowed: 'system', 'user', 'assistant'"
    assert allowed in n["message"] and allowed in o["message"]
    assert dev.status_code == 200 and [m.role for m in SEEN[0].messages] == ["system"]


class FakeStream:
    """An ItemStream stand-in: its events, and whether it was cancelled."""

    def __init__(self, evs):
        self.evs, self.cancelled = list(evs), 0

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.evs:
            raise StopAsyncIteration
        return self.evs.pop(0)

    def cancel(self):
        self.cancelled += 1
        return 1


def test_a_stream_closed_early_cancels_its_inputs():
    """The client gone mid-stream: the body iterator is closed, and the inputs stop."""
    s = FakeStream([ChunkEvent(0, {"text": "a"}, 0.0), ChunkEvent(0, {"text": "b"}, 0.1)])
    answer = StreamAnswer("chat", answer_id="c", created=1, model="talk", n_items=1, n=1,
                          include_usage=False)

    async def go():
        body = openai_events(s, answer)
        first = await anext(body)
        await body.aclose()
        return first

    assert b'"content":"a"' in asyncio.run(go())
    assert s.cancelled == 1


def test_the_openai_client_streams_and_reads_answers(asgi):
    async def go():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")
        async with openai.AsyncOpenAI(base_url="http://t/v1", api_key="k", http_client=http,
                                      max_retries=0) as c:
            streamed = await c.chat.completions.create(
                model="talk", messages=[{"role": "user", "content": "hello big world"}],
                stream=True, stream_options={"include_usage": True}, seed=1)
            parts, usage = [], None
            async for chunk in streamed:
                parts += [ch.delta.content or "" for ch in chunk.choices]
                usage = chunk.usage or usage
            whole = await c.chat.completions.create(
                model="talk", messages=[{"role": "user", "content": "hello big world"}],
                seed=1)
            text = await c.completions.create(model="talk", prompt="p q", max_tokens=1)
            failed = None
            try:
                async for _ in await c.chat.completions.create(
                        model="talk", messages=[{"role": "user", "content": "x boom"}],
                        stream=True):
                    pass
            except openai.APIError as e:
                failed = e
            return "".join(parts), usage, whole, text, failed

    streamed, usage, whole, text, failed = asyncio.run(go())
    assert streamed == whole.choices[0].message.content == "hello big world "
    assert usage.prompt_tokens == 3 and usage.completion_tokens == 3
    assert whole.choices[0].finish_reason == "stop" and whole.usage.total_tokens == 6
    assert text.choices[0].text == "p " and text.choices[0].finish_reason == "length"
    assert failed is not None and "boom" in failed.message


def test_prefer_respond_async_is_ignored_on_an_openai_route(asgi):
    async def go():
        async with client(asgi) as c:
            return await c.post("/v1/chat/completions", json=chat("a b"),
                                headers={"Prefer": "respond-async", "Idempotency-Key": "k1"})

    r = asyncio.run(go())
    assert r.status_code == 200 and "preference-applied" not in r.headers
    assert r.json()["choices"][0]["message"]["content"] == "a b "
    assert r.headers["x-floodway-decision"] == "dispatch"
