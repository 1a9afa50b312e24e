"""fw.Prompt: one of prompt/messages, ranges, stop strings; errors name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import floodway as fw
from floodway.errors import RequestError
from floodway.generate.requests import to_prompt


def test_defaults_and_a_str_stop_is_one_stop():
    p = fw.Prompt(prompt="hi", stop="\n")
    assert (p.max_new_tokens, p.temperature, p.top_p, p.seed, p.stop) == \
        (None, 0.0, 1.0, None, ["\n"])
    m = fw.Prompt(messages=[{"role": "user", "content": "hi"}])
    assert m.messages[0].role == "user" and fw.Prompt.of("x").prompt == "x"
    assert fw.Prompt.of({"prompt": "y", "seed": 3}).seed == 3 and fw.Prompt.of(p) is p


@pytest.mark.parametrize("kw, field", [
    ({}, r"give 'prompt' \(text\) or 'messages'"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "c"}]},
     "give either 'prompt' or 'messages', not both"),
    ({"messages": [{"role": "bot", "content": "c"}]},
     r"'bot' is not a chat role; allowed: 'system', 'user', 'assistant'"),
    ({"messages": [{"role": "tool", "content": "c"}]}, "'tool' is not a chat role"),
    ({"prompt": "a", "temperature": 2.5}, "temperature"),
    ({"prompt": "a", "top_p": 0}, "top_p"),
    ({"prompt": "a", "max_new_tokens": 0}, "max_new_tokens"),
    ({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "a", "stop": [""]}, "1 to 64 characters"),
    ({"prompt": "a", "stop": ["x" * 65]}, "1 to 64 characters"),
    ({"prompt": "a", "seed": -1}, "seed"),
    ({"prompt": "a", "extra": 1}, "extra"),
    ({"messages": [{"role": "user"}]}, "content"),
])
def test_bad_prompts_are_refused_naming_the_field(kw, field):
    with pytest.raises(ValidationError, match=field):
        fw.Prompt(**kw)


def test_developer_is_the_system_role():
    """One rule for roles on both routes: "developer" (OpenAI's newer name) is "system"."""
    p = fw.Prompt(messages=[{"role": "developer", "content": "be brief"},
                            {"role": "user", "content": "hi"}])
    assert [m.role for m in p.messages] == ["system", "user"]


def test_the_engine_turns_validation_errors_into_422s_naming_the_field():
    with pytest.raises(RequestError, match=r"temperature = 9 is not allowed") as e:
        to_prompt({"prompt": "a", "temperature": 9})
    assert e.value.status == 422 and e.value.field == "temperature"
    with pytest.raises(RequestError) as e:
        to_prompt({"messages": [{"role": "user", "content": 5}]})
    assert e.value.field == "messages.0.content"
