"""Streaming endpoints at decorator time (`Endpoint.streaming`, fw.Generation, one item per
call, generation tasks) and the buffered answer of a stream (`combine`)."""

from __future__ import annotations

from typing import Any

import pytest

import floodway as fw
from floodway.functions.items import declared_item_type, item_decoder, sample_item
from floodway.functions.streams import chunk_tokens, combine


@pytest.mark.parametrize("chunks, whole", [
    ([], ""),
    (["Hel", "lo", ""], "Hello"),
    ([{"text": "He", "tokens": 1}, {"text": "llo", "tokens": 2, "finish_reason": "stop",
                                    "usage": {"prompt_tokens": 3, "completion_tokens": 3}}],
     {"text": "Hello", "tokens": 3, "finish_reason": "stop",
      "usage": {"prompt_tokens": 3, "completion_tokens": 3}}),
    ([{"text": "a", "finish_reason": None}, {"text": "b", "finish_reason": "length"}],
     {"text": "ab", "finish_reason": "length"}),
    ([{"text": "a"}, "b"], [{"text": "a"}, "b"]),
    ([1, [2], {"x": 3}], [1, [2], {"x": 3}]),
])
def test_combine(chunks, whole):
    assert combine(chunks) == whole


def test_chunk_tokens_counts_a_dicts_tokens_else_one():
    assert [chunk_tokens(c) for c in ({"text": "ab", "tokens": 2}, "ab", {"text": "x"},
                                      {"tokens": True}, [1, 2])] == [2, 1, 1, 1, 1]


def _app() -> fw.App:
    return fw.App("s")


def test_a_generator_function_is_a_streaming_endpoint_with_the_default_generation():
    app = _app()

    @app.endpoint()
    async def words(model, text: str):
        yield text

    @app.endpoint(generation=fw.Generation(max_sequences=3, max_stream_s=30))
    def counts(model, n: int):
        yield from range(n)

    @app.endpoint()
    def plain(model, texts: list[str]) -> list[str]:
        return texts

    assert words.streaming and words.input_type is str and words.generation == fw.Generation()
    assert counts.streaming and counts.input_type is int
    assert counts.generation.max_sequences == 3
    assert not plain.streaming and plain.generation is None
    # The container decodes an item of the declared type, and warms up with one.
    assert declared_item_type(counts.fn) is int and item_decoder(counts.fn)("4") == 4
    assert sample_item(words.fn) == "warm-up"


@pytest.mark.parametrize("define, says", [
    (lambda app: app.endpoint()(_listy), "one item per call"),
    (lambda app: app.endpoint(generation=fw.Generation())(_plain),
     "fw.Generation is for streaming endpoints"),
    (lambda app: app.endpoint(generation=fw.Generation(max_sequences=0))(_gen),
     r"generation.max_sequences.*0.*\[1, 1024\]"),
    (lambda app: app.endpoint(generation=fw.Generation(max_stream_s=-1))(_gen),
     "generation.max_stream_s"),
    (lambda app: app.endpoint(generation=fw.Generation(kv_cache_tokens=0))(_gen),
     "generation.kv_cache_tokens"),
    (lambda app: app.endpoint(generation=fw.Generation(max_new_tokens=0))(_gen),
     "generation.max_new_tokens"),
    (lambda app: app.endpoint(generation={"max_sequences": 2})(_gen),
     "None or fw.Generation"),
    (lambda app: app.endpoint()(_three), r"\(model, item: T\), yielding chunks"),
])
def test_streaming_configuration_errors_name_the_field(define, says):
    with pytest.raises(fw.ConfigError, match=says):
        define(_app())


async def _listy(model, texts: list[str]):
    yield texts


def _plain(model, texts: list[str]) -> list[str]:
    return texts


async def _gen(model, text: str):
    yield text


async def _three(model, text: str, extra: Any):
    yield text


def test_a_generation_task_needs_a_streaming_function(monkeypatch):
    from floodway import tasks

    monkeypatch.setitem(tasks.FAMILIES, "fake-generation", "generation")
    model = fw.LocalModel("/models/tiny", task="fake-generation")
    with pytest.raises(fw.ConfigError, match="task 'fake-generation' generates"):
        _app().endpoint(model=model)(_plain)
