"""Chat messages rendered with a model's template (sandboxed), or the plain fallback."""

from __future__ import annotations

import json

import pytest

from floodway.errors import RequestError
from floodway.generate.chat import read_template, render

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_the_fallback_is_role_content_lines_then_assistant():
    assert render(MSGS, None) == "system: be brief\nuser: hi\nassistant:"


def test_a_models_template_gets_messages_special_tokens_and_the_generation_prompt(tmp_path):
    tpl = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
           "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": tpl, "bos_token": "<s>", "eos_token": {"content": "</s>"}}))
    template, specials = read_template(tmp_path / "tokenizer_config.json")
    assert specials == {"bos_token": "<s>", "eos_token": "</s>"}
    assert render(MSGS, template, specials) == \
        "<s><|system|>be brief<|user|>hi<|assistant|>"
    assert read_template(tmp_path / "absent.json") == (None, {})


def test_raise_exception_and_template_errors_are_422_naming_messages():
    tpl = "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    with pytest.raises(RequestError, match="user first") as e:
        render(MSGS, tpl)
    assert e.value.status == 422 and e.value.field == "messages"
    with pytest.raises(RequestError, match="chat template failed"):
        render(MSGS, "{{ messages.__class__.__mro__ }}{{ nope() }}")


def test_the_sandbox_refuses_python_internals():
    with pytest.raises(RequestError):
        render(MSGS, "{{ ''.__class__.__subclasses__() }}")
