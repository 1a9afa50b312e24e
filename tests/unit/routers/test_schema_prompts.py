"""The native route's refusals say what to send instead: ``"stream"`` beside ``inputs``,
OpenAI's names in an fw.Prompt item, prompt and messages together (or neither), a chat role
fw.Prompt does not know."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

from floodway.errors import RequestError
from floodway.functions.prompts import Prompt
from floodway.routers.schema import parse_predict


def refused(body: dict, item_type=Prompt) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse_predict(json.dumps(body).encode(), item_type)
    return e.value


def test_stream_beside_inputs_says_how_a_stream_is_asked_for():
    err = refused({"inputs": [{"prompt": "hi"}], "stream": True})
    assert err.status == 422 and err.field == "stream"
    assert "Accept: text/event-stream" in str(err) and "application/x-ndjson" in str(err)


@pytest.mark.parametrize("name,use", [
    ("max_tokens", "use 'max_new_tokens'"), ("max_completion_tokens", "use 'max_new_tokens'"),
    ("text", "use 'prompt'"), ("input", "use 'prompt'"), ("n", "send n items"),
])
def test_openai_names_in_a_prompt_item_say_which_field_to_use(name, use):
    item = {"max_new_tokens": 16, name: "x"} if name in ("text", "input") \
        else {"prompt": "hi", name: 3}
    err = refused({"inputs": [{"prompt": "ok"}, item]})
    assert err.status == 422 and err.field == f"inputs[1].{name}"
    assert str(err).startswith(f"inputs[1].{name}: unknown field '{name}'") and use in str(err)


def test_the_unknown_field_is_told_before_the_errors_it_likely_caused():
    # no prompt (it was sent as "text"): the misnamed field is the answer, not "neither"
    err = refused({"inputs": [{"text": "x", "temperature": 9}]})
    assert err.field == "inputs[0].text" and "use 'prompt'" in str(err) and "1 more" in str(err)


def test_any_other_unknown_field_lists_the_prompts_fields():
    err = refused({"inputs": [{"prompt": "hi", "top_k": 5}]})
    assert err.field == "inputs[0].top_k"
    assert "fw.Prompt's fields: prompt, messages, max_new_tokens, temperature, top_p, seed, " \
        "stop" in str(err)
    msg = refused({"inputs": [{"messages": [{"role": "user", "content": "a", "name": "b"}]}]})
    assert msg.field == "inputs[0].messages[0].name" and "'role' and 'content'" in str(msg)


def test_another_models_unknown_field_lists_its_fields():
    class Pair(BaseModel):
        model_config = ConfigDict(extra="forbid")
        a: int
        b: int

    err = refused({"inputs": [{"a": 1, "b": 2, "c": 3}]}, Pair)
    assert err.field == "inputs[0].c" and "the item's fields: a, b" in str(err)


def test_prompt_and_messages_together_or_neither_without_the_value():
    both = refused({"inputs": [{"prompt": "hi", "messages": [{"role": "user",
                                                              "content": "secret words"}]}]})
    assert str(both) == "inputs[0]: give either 'prompt' or 'messages', not both"
    assert both.field == "inputs[0]" and both.status == 422
    neither = refused({"inputs": [{"max_new_tokens": 4}]})
    assert str(neither).startswith("inputs[0]: give 'prompt' (text) or 'messages'")
    assert "max_new_tokens" not in str(neither)


def test_a_role_outside_the_chat_roles_is_a_422_naming_it_and_the_allowed_ones():
    err = refused({"inputs": [{"messages": [{"role": "user", "content": "a"},
                                            {"role": "bot", "content": "b"}]}]})
    assert err.status == 422 and err.field == "inputs[0].messages[1].role"
    assert str(err) == ("inputs[0].messages[1].role: 'bot' is not a chat role; allowed: "
                        "'system', 'user', 'assistant' ('developer' is taken as 'system')")


def test_developer_is_taken_as_system_on_the_native_route():
    [item] = parse_predict(json.dumps({"inputs": [{"messages": [
        {"role": "developer", "content": "be brief"}]}]}).encode(), Prompt)
    assert item["messages"] == [{"role": "system", "content": "be brief"}]


@pytest.mark.parametrize(("field", "value"), [
    ("max_new_tokens", "4"), ("max_new_tokens", True), ("max_new_tokens", 2.0),
    ("seed", "3"), ("seed", 5.0), ("seed", False),
    ("temperature", "0.5"), ("temperature", True), ("top_p", "1"), ("top_p", False),
])
def test_numbers_are_strict_a_string_bool_or_fraction_is_a_422_naming_the_field(field, value):
    err = refused({"inputs": [{"prompt": "hi"}, {"prompt": "hi", field: value}]})
    assert err.status == 422 and err.field == f"inputs[1].{field}"
    assert f"got {value!r}" in str(err)


def test_a_float_field_takes_an_integer_number():
    [item] = parse_predict(json.dumps({"inputs": [{"prompt": "hi", "temperature": 1,
                                                   "top_p": 1}]}).encode(), Prompt)
    assert (item["temperature"], item["top_p"]) == (1.0, 1.0)
    assert isinstance(item["temperature"], float)


@pytest.mark.parametrize(("stop", "told"), [
    ([""], "'' has 0"), (["ok", "x" * 65], "'" + "x" * 37 + "'... has 65"), ("y" * 70, "has 70"),
])
def test_a_bad_stop_string_is_told_once(stop, told):
    err = refused({"inputs": [{"prompt": "hi", "stop": stop}]})
    assert err.field == "inputs[0].stop"
    assert str(err).startswith("inputs[0].stop: each stop string must have 1 to 64 characters; ")
    assert told in str(err)
    assert "got" not in str(err) and "Value error" not in str(err)
