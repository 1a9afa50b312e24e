"""The OpenAI wire formats, pure: request bodies -> floodway items (or a 400 naming the
OpenAI parameter), floodway outputs -> OpenAI answers and stream chunks."""

from __future__ import annotations

import base64
import json
import struct
from typing import Annotated, Any, TypedDict

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from floodway.errors import EndpointError, RequestError
from floodway.functions.prompts import Prompt
from floodway.http.openai_answers import (
    Generated,
    StreamAnswer,
    b64_float32,
    completion_answer,
    embeddings_answer,
    generated,
    models_answer,
    no_embeddings,
    usage_of,
)
from floodway.http.openai_params import input_error, item_error
from floodway.http.openai_wire import (
    chat_items,
    completion_items,
    embedding_items,
    parse_chat,
    parse_completion,
    parse_embeddings,
)


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


def refused(parse, raw: bytes) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse(raw)
    assert e.value.status == 400
    return e.value


CHAT = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}


# ------------------------------------------------------------------ embeddings in
def test_embedding_input_is_one_string_or_a_list_of_them():
    assert embedding_items(parse_embeddings(body(model="e", input="a b"))) == ["a b"]
    req = parse_embeddings(body(model="e", input=["a", "b"], user="u"))   # user: ignored
    assert embedding_items(req) == ["a", "b"] and req.encoding_format == "float"
    assert parse_embeddings(body(model="e", input="x", encoding_format="base64")) \
        .encoding_format == "base64"


@pytest.mark.parametrize("fields,param,says", [
    ({"input": [1, 2, 3]}, "input", "token-id arrays are not supported"),
    ({"input": [[1, 2], [3]]}, "input", "token-id arrays are not supported"),
    ({"input": []}, "input", "empty list"),
    ({"input": ["a", 3]}, "input[1]", "valid string, got 3"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "'float' or 'base64'"),
    ({"input": "a", "dimensions": 0}, "dimensions", "greater than or equal to 1"),
    ({"input": "a", "truncate": True}, "truncate", "Unrecognized request argument"),
    ({}, "input", "required"),
])
def test_bad_embedding_requests_name_the_parameter(fields, param, says):
    err = refused(parse_embeddings, body(model="e", **fields))
    assert err.field == param and says in str(err)


def test_a_body_that_is_not_a_json_object_is_a_400():
    assert "not valid JSON" in str(refused(parse_embeddings, b"{nope"))
    assert "JSON object" in str(refused(parse_embeddings, b"[1]"))
    assert "NaN" in str(refused(parse_chat, b'{"model": "g", "temperature": NaN}'))


# ------------------------------------------------------------------ completions in
def test_a_completion_becomes_prompt_items_with_openai_defaults():
    items = completion_items(parse_completion(body(model="g", prompt="Once")))
    # OpenAI samples at temperature 1.0 when none is sent; fw.Prompt would be greedy.
    assert items == [{"prompt": "Once", "temperature": 1.0}]
    assert Prompt.model_validate(items[0]).temperature == 1.0


def test_sampling_fields_map_to_prompt_fields():
    req = parse_completion(body(model="g", prompt=["a", "b"], max_tokens=5, temperature=0,
                                top_p=0.5, seed=7, stop="\n", n=2, stream=True,
                                stream_options={"include_usage": True}))
    items = completion_items(req)
    # n per prompt, choice i*n+j; seeds seed+j so the n choices differ and repeat
    assert [(i["prompt"], i["seed"]) for i in items] == [("a", 7), ("a", 8), ("b", 7), ("b", 8)]
    assert all(i["max_new_tokens"] == 5 and i["temperature"] == 0 and i["top_p"] == 0.5
               and i["stop"] == ["\n"] for i in items)
    assert req.include_usage and req.choices_per_prompt == 2
    for item in items:
        Prompt.model_validate(item)   # each is a valid fw.Prompt
    assert not parse_completion(body(model="g", prompt="a", stream=True)).include_usage


@pytest.mark.parametrize("stream", [None, False])
def test_stream_options_without_stream_true_is_a_400_naming_it(stream):
    for parse, fields in ((parse_completion, {"prompt": "a"}),
                          (parse_chat, {"messages": [{"role": "user", "content": "a"}]})):
        sent = {"model": "g", **fields, "stream_options": {"include_usage": True}}
        if stream is not None:
            sent["stream"] = stream
        e = refused(parse, body(**sent))
        assert e.field == "stream_options" and "only allowed when stream is true" in str(e)
        # null is no stream_options at all
        assert not parse(body(**{**sent, "stream_options": None})).include_usage


@pytest.mark.parametrize(("seed", "n", "seeds"), [
    (7, 2, [7, 8]),
    (2**63 - 1, 2, [2**63 - 1, 0]),          # seed + 1 wraps round instead of overflowing
    (-1, 3, [2**63 - 1, 0, 1]),              # OpenAI takes negative seeds
    (-2**63, 1, [0]),
])
def test_any_int64_seed_maps_into_prompts_range_the_same_way_each_time(seed, n, seeds):
    req = parse_completion(body(model="g", prompt="a", seed=seed, n=n))
    items = completion_items(req)
    assert [i["seed"] for i in items] == seeds == [i["seed"] for i in completion_items(req)]
    for item in items:
        Prompt.model_validate(item)   # within fw.Prompt's 0 .. 2**63 - 1


@pytest.mark.parametrize("seed", [2**63, -2**63 - 1])
def test_a_seed_outside_int64_is_a_400_naming_the_value_sent(seed):
    e = refused(parse_completion, body(model="g", prompt="a", seed=seed, n=2))
    assert e.field == "seed" and f"got {seed}" in str(e)


def test_chat_messages_become_prompt_messages():
    req = parse_chat(body(model="g", messages=[
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
         "name": "ann"},
        {"role": "assistant", "content": None, "refusal": None},
    ], max_completion_tokens=3, n=2))
    items = chat_items(req)
    assert len(items) == 2 and "seed" not in items[0]
    assert items[0]["messages"] == [{"role": "system", "content": "be brief"},
                                    {"role": "user", "content": "a\nb"},
                                    {"role": "assistant", "content": ""}]
    assert items[0]["max_new_tokens"] == 3
    assert chat_items(parse_chat(body(**CHAT, max_tokens=4)))[0]["max_new_tokens"] == 4


@pytest.mark.parametrize("extra,param,says", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "not supported"),
    ({"logprobs": True}, "logprobs", "not supported"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "not supported"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "not supported"),
    ({"temperature": "1"}, "temperature", "valid number"),
    ({"temperature": 2.5}, "temperature", "less than or equal to 2"),
    ({"top_p": 0}, "top_p", "greater than 0"),
    ({"n": 0}, "n", "greater than or equal to 1"),
    ({"n": 129}, "n", "less than or equal to 128"),
    ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens", "differ"),
    ({"stop": [1]}, "stop[0]", "valid string"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]},
     "messages[0].role", "'assistant'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].type", "'text'"),
    ({"messages": []}, "messages", "at least 1"),
    ({"stream": "yes"}, "stream", "valid boolean"),
])
def test_unsupported_or_bad_chat_fields_are_a_400_naming_them(extra, param, says):
    err = refused(parse_chat, body(**{**CHAT, **extra}))
    assert err.field == param and says in str(err), str(err)


def test_neutral_values_of_unsupported_fields_and_harmless_fields_pass():
    req = parse_chat(body(**CHAT, tools=[], tool_choice="none", logprobs=False,
                          response_format={"type": "text"}, frequency_penalty=0,
                          presence_penalty=0.0, logit_bias={}, user="u", store=False,
                          metadata={"a": "b"}, parallel_tool_calls=True))
    assert len(chat_items(req)) == 1


@pytest.mark.parametrize("extra,param", [
    ({"prompt": [1, 2]}, "prompt"), ({"prompt": []}, "prompt"), ({"echo": True}, "echo"),
    ({"logprobs": 0}, "logprobs"), ({"suffix": "x"}, "suffix"), ({"best_of": 3}, "best_of"),
])
def test_bad_completion_fields_are_a_400_naming_them(extra, param):
    err = refused(parse_completion, body(**{"model": "g", "prompt": "x", **extra}))
    assert err.field == param


@pytest.mark.parametrize("parse,fields,param,use", [
    (parse_chat, {**CHAT, "max_new_tokens": 5}, "max_new_tokens", "(use max_tokens"),
    (parse_completion, {"model": "g", "prompt": "x", "max_new_tokens": 5}, "max_new_tokens",
     "(use max_tokens)"),
    (parse_chat, {"model": "g", "prompt": "x"}, "prompt",
     "(use messages, or POST /v1/completions for a prompt)"),
    (parse_completion, {"model": "g", "messages": CHAT["messages"]}, "messages",
     "(use prompt, or POST /v1/chat/completions for messages)"),
    (parse_embeddings, {"model": "e", "inputs": ["a"]}, "inputs", "POST /v1/<model>"),
])
def test_a_misplaced_field_says_what_to_send_instead(parse, fields, param, use):
    err = refused(parse, body(**fields))
    assert err.field == param and f"Unrecognized request argument supplied: {param}" in str(err)
    assert use in str(err), str(err)


@pytest.mark.parametrize("parse,fields", [
    (parse_chat, {"messages": CHAT["messages"]}), (parse_completion, {"prompt": "x"}),
    (parse_embeddings, {"input": "x"}),
])
def test_a_missing_model_lists_the_endpoints(parse, fields):
    with pytest.raises(RequestError) as e:
        parse(body(**fields), models=["talk", "embed"])
    assert e.value.status == 400 and e.value.field == "model"
    assert str(e.value) == ("model: a required field is missing; it names the endpoint: one of "
                            "embed, talk")


@pytest.mark.parametrize("role", ["bot", "tool", "function", "", 3])
def test_chat_roles_are_fw_prompts_roles(role):
    """One rule on both routes: the same roles, and the same words, as fw.Prompt."""
    err = refused(parse_chat, body(**{**CHAT, "messages": [{"role": role, "content": "x"}]}))
    assert err.field == "messages[0].role"
    assert str(err) == (f"messages[0].role: {role!r} is not a chat role; allowed: 'system', "
                        "'user', 'assistant' ('developer' is taken as 'system')")
    with pytest.raises(ValidationError) as native:
        Prompt(messages=[{"role": role, "content": "x"}])
    assert native.value.errors()[0]["msg"] == str(err).split(": ", 1)[1]


def test_an_items_error_is_renamed_to_the_openai_parameter():
    err = RequestError("inputs[3].max_new_tokens: Input should be >= 1, got 0", status=422,
                       field="inputs[3].max_new_tokens")
    renamed = item_error(err, lambda i, f: {"max_new_tokens": "max_tokens"}.get(f, f"x{i}"))
    assert renamed.status == 400 and renamed.field == "max_tokens"
    assert str(renamed) == "max_tokens: Input should be >= 1, got 0"
    whole = item_error(RequestError("inputs[2]: bad", status=413, field="inputs[2]"),
                       lambda i, f: f"input[{i}]")
    assert (whole.field, str(whole), whole.status) == ("input[2]", "input[2]: bad", 413)
    auth = RequestError("no key", status=401, field="Authorization")
    assert item_error(auth, lambda i, f: "x") is auth   # not an item's: as it is
    deep = item_error(RequestError("inputs[0].messages[2].content: bad", status=422,
                                   field="inputs[0].messages[2].content"), lambda i, f: f)
    assert (deep.field, str(deep)) == ("messages[2].content", "messages[2].content: bad")


def test_an_inputs_failure_in_its_container_is_renamed_to_the_openai_parameter():
    told = EndpointError("2 of 2 inputs failed; first: inputs[1]: endpoint 'g': inputs[1]: "
                         "prompt: 602 tokens is too long", status=422,
                         field="inputs[1].prompt", kind="input_error")
    renamed = input_error(told, lambda i, f: f"prompt[{i}]", "prompt")
    assert isinstance(renamed, EndpointError)
    assert (renamed.status, renamed.field, renamed.kind) == (422, "prompt[1]", "input_error")
    assert str(renamed) == "prompt[1]: 602 tokens is too long"
    kv = input_error(RequestError("too big", status=413, field="inputs"), lambda i, f: "x",
                     "messages")
    assert (kv.field, kv.status, str(kv)) == ("messages", 413, "too big")
    crash = EndpointError("endpoint 'g' raised ValueError: boom")   # 500: not the input's
    assert input_error(crash, lambda i, f: "x", "prompt") is crash


# ------------------------------------------------------------------ answers out
def test_embeddings_answer_in_floats_and_base64():
    answer = embeddings_answer("e", [[1.0, -0.5], [0.25, 2]])
    assert answer["object"] == "list" and answer["model"] == "e"
    assert answer["data"][1] == {"object": "embedding", "index": 1, "embedding": [0.25, 2]}
    # plain vectors carry no token count: 0, not a guess
    assert answer["usage"] == {"prompt_tokens": 0, "total_tokens": 0}
    packed = embeddings_answer("e", [[1.0, -0.5]], encoding_format="base64")
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (1.0, -0.5) and raw == b"\x00\x00\x80?\x00\x00\x00\xbf"


def test_embedding_token_counts_when_the_endpoint_tells_them():
    told = embeddings_answer("e", [{"embedding": [1.0], "tokens": 3},
                                   {"embedding": [2.0], "tokens": 4}])
    assert told["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert told["data"][1]["embedding"] == [2.0]
    partly = embeddings_answer("e", [{"embedding": [1.0], "tokens": 3}, [2.0]])
    assert partly["usage"]["prompt_tokens"] == 0   # not all told: none


def test_embedding_dimensions_and_bad_outputs():
    assert embeddings_answer("e", [[1.0, 2.0]], dimensions=2)["data"][0]["embedding"]
    with pytest.raises(RequestError) as e:
        embeddings_answer("e", [[1.0, 2.0]], dimensions=1)
    assert e.value.field == "dimensions" and "2 dimensions" in str(e.value)
    for bad in ("text", [], [True], [[1.0]], {"vector": [1.0]}):
        with pytest.raises(RequestError, match="not an embedding") as e:
            embeddings_answer("e", [bad])
        assert e.value.status == 400 and e.value.field == "model"   # not retried


def test_b64_float32_rounds_to_float32():
    assert struct.unpack("<f", base64.b64decode(b64_float32([0.1])))[0] == pytest.approx(0.1)


ENGINE_OUT = {"text": "Hello", "tokens": 2, "finish_reason": "length",
              "usage": {"prompt_tokens": 4, "completion_tokens": 2}}


def test_generated_reads_the_engine_output_or_a_plain_string():
    assert generated("g", ENGINE_OUT) == Generated("Hello", "length", 4, 2)
    assert generated("g", "plain") == Generated("plain", "stop", None, None)
    assert generated("g", {"text": "x", "tokens": 3}) == Generated("x", "stop", None, 3)
    with pytest.raises(EndpointError, match="not text"):
        generated("g", [1, 2])


def test_usage_counts_a_prompt_once_per_n_choices():
    gens = [Generated("a", "stop", 4, 2), Generated("b", "stop", 4, 3),
            Generated("c", "stop", 5, 1), Generated("d", "stop", 5, 1)]
    assert usage_of(gens, 2) == {"prompt_tokens": 9, "completion_tokens": 7,
                                 "total_tokens": 16}
    assert usage_of([Generated("a", "stop")], 1)["total_tokens"] == 0


def test_buffered_answers_for_chat_and_completions():
    gens = [generated("g", ENGINE_OUT), generated("g", "bye")]
    chat = completion_answer("chat", answer_id="chatcmpl-1", created=5, model="g",
                             choices=gens, n=2)
    assert chat["object"] == "chat.completion" and chat["created"] == 5
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "Hello",
                                             "refusal": None}
    assert [c["finish_reason"] for c in chat["choices"]] == ["length", "stop"]
    assert chat["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    text = completion_answer("completion", answer_id="cmpl-1", created=5, model="g",
                             choices=gens, n=1)
    assert text["object"] == "text_completion"
    assert [c["text"] for c in text["choices"]] == ["Hello", "bye"]
    assert [c["index"] for c in text["choices"]] == [0, 1]


def stream(kind="chat", n_items=1, n=1, include_usage=False) -> StreamAnswer:
    return StreamAnswer(kind, answer_id="x-1", created=9, model="g", n_items=n_items, n=n,
                        include_usage=include_usage)


def test_a_chat_stream_sends_the_role_first_and_finish_with_the_last_chunk():
    s = stream(include_usage=True)
    first = s.chunk(0, {"text": "He", "tokens": 1})
    assert first["object"] == "chat.completion.chunk" and first["usage"] is None
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": "He"},
                                 "logprobs": None, "finish_reason": None}]
    assert s.chunk(0, {"text": "", "tokens": 0}) is None   # nothing new to tell
    last = s.chunk(0, {**ENGINE_OUT, "text": "llo"})
    assert last["choices"][0]["delta"] == {"content": "llo"}
    assert last["choices"][0]["finish_reason"] == "length"
    assert s.end(0, {**ENGINE_OUT, "tokens": 3}) is None   # finish already sent
    assert s.usage()["choices"] == [] and s.usage()["usage"]["prompt_tokens"] == 4


def test_a_stream_whose_chunks_carry_no_finish_ends_each_choice_at_its_end():
    s = stream("completion", n_items=2, n=2)
    a = s.chunk(1, "x")
    assert a["object"] == "text_completion" and "usage" not in a
    assert a["choices"][0] == {"index": 1, "text": "x", "logprobs": None,
                               "finish_reason": None}
    end = s.end(1, "x")
    assert end["choices"][0]["finish_reason"] == "stop" and end["choices"][0]["text"] == ""
    chat_end = stream().end(0, "")     # ended before any chunk: the role still comes
    assert chat_end["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    with pytest.raises(EndpointError):
        s.chunk(0, 42)


def test_models_answer_lists_every_endpoint():
    assert models_answer(["a", "b"], 3) == {"object": "list", "data": [
        {"id": "a", "object": "model", "created": 3, "owned_by": "floodway"},
        {"id": "b", "object": "model", "created": 3, "owned_by": "floodway"}]}


class Tagged(TypedDict):
    label: str


class Counted(TypedDict):
    embedding: list[float]
    tokens: int


class Scored(BaseModel):
    embedding: list[str]


@pytest.mark.parametrize("r, never", [
    (str, True), (int, True), (float, True), (list[str], True), (list[list[float]], True),
    (list[bool], True), (dict[str, str], True), (dict[str, float], True), (Tagged, True),
    (Scored, True), (str | None, True),
    (list[float], False), (tuple[float, ...], False), (Annotated[list[float], "x"], False),
    (list[int | float], False), (Counted, False), (dict, False), (dict[str, Any], False),
    (list, False), (Any, False), (np.ndarray, False), (list[str] | list[float], False),
])
def test_a_return_type_that_can_never_be_an_embedding_is_told_apart(r, never):
    assert no_embeddings(r) is never

