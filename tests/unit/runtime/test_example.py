"""`floodway serve --show-example`: the example request is made of the endpoint's own item
type, in a wire form the router accepts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import floodway as fw
from floodway.routers.schema import parse_predict
from floodway.runtime.example import PROMPT_EXAMPLE, curl_line, describe, example_inputs


def texts(model, inputs: list[str]) -> list: ...
def untyped(model, inputs) -> list: ...
def pairs(model, inputs: list[tuple[str, str]]) -> list: ...
def images(model, inputs: list[fw.Image]) -> list: ...
def arrays(model, inputs: list[fw.Array[np.float32, (None, 3)]]) -> list: ...
def numbers(model, inputs: list[int]) -> list: ...


async def prompts(model, prompt: fw.Prompt):
    yield {"text": "x", "tokens": 1}


@pytest.mark.parametrize("fn", [texts, untyped, pairs, images, arrays, prompts])
def test_the_example_is_items_of_the_endpoints_type_that_the_router_accepts(fn):
    inputs = example_inputs(fn)
    assert inputs
    item_type: Any = fw.App("x").endpoint(model=None, name="e")(fn).input_type
    assert parse_predict(json.dumps({"inputs": inputs}).encode(), item_type) is not None


def test_pairs_get_pairs_and_images_get_a_png():
    assert all(isinstance(p, list) and len(p) == 2 for p in example_inputs(pairs))
    import base64

    assert base64.b64decode(example_inputs(images)[0]).startswith(b"\x89PNG")


def test_a_prompt_endpoint_gets_one_small_prompt():
    assert example_inputs(prompts) == [PROMPT_EXAMPLE]
    assert fw.Prompt.model_validate(PROMPT_EXAMPLE).max_new_tokens == 16


def test_the_curl_line_asks_for_sse_for_a_stream():
    body = {"inputs": [PROMPT_EXAMPLE]}
    streamed = curl_line("http://h:1", "gen", body, stream=True)
    assert streamed == ("curl -sN -X POST http://h:1/v1/gen -H 'Content-Type: application/json'"
                        " -H 'Accept: text/event-stream' -d '{\"inputs\": [{\"prompt\": "
                        "\"Hello\", \"max_new_tokens\": 16}]}'")
    assert "Accept" not in curl_line("http://h:1", "gen", body) and " -s " in \
        curl_line("http://h:1", "gen", body)


def test_no_obvious_example_is_none():
    assert example_inputs(numbers) is None


@pytest.mark.parametrize(("output", "words"), [
    ([0.1] * 384, "384 numbers"), (0.36, "a number"), ({"label": "a", "score": 1.0},
                                                        "an object with keys label, score"),
    ([{"label": 1}] * 5, "a list of 5 objects"), (["a", 1], "a list of 2 items"),
])
def test_describe(output, words):
    assert describe(output) == words
