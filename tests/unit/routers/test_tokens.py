"""The router's token estimate of an input, known at admission (no tokenizer)."""

from __future__ import annotations

from typing import Annotated

import pytest

import floodway as fw
from floodway.errors import ConfigError
from floodway.routers.tokens import (
    BATCH_TOKENS_PER_ROW,
    PAIR_SPECIAL_TOKENS,
    SPECIAL_TOKENS,
    TokenCost,
    batch_tokens,
    item_tokens,
    row_tokens,
    takes_text,
    text_tokens,
)


def test_a_text_costs_its_utf8_bytes_over_four_plus_its_special_tokens():
    assert text_tokens("abcd" * 10) == 10
    assert text_tokens("abcde") == 2                     # rounded up
    assert item_tokens("abcd" * 10, 256) == 10 + SPECIAL_TOKENS
    # A CJK character is three UTF-8 bytes: it costs about a token, not a quarter of one.
    assert item_tokens("東京" * 8, 256) == 12 + SPECIAL_TOKENS


def test_long_texts_cost_more_up_to_the_builds_sequence_cap():
    five_words = item_tokens("the cat sat on mats", 256)
    many_words = item_tokens("the cat sat on mats " * 40, 256)
    assert five_words == 7 and many_words == 202
    assert item_tokens("word " * 1000, 256) == 256
    assert item_tokens("word " * 1000, 64) == 64
    assert item_tokens("", 256) == SPECIAL_TOKENS


def test_a_pair_sums_both_texts_and_other_items_cost_one_row():
    assert item_tokens(["abcd" * 3, "abcd" * 5], 256) == 8 + PAIR_SPECIAL_TOKENS
    assert item_tokens(("abcd", "abcd" * 300), 128) == 128
    for other in ({"b64": "AAAA", "dtype": "float32", "shape": [1]}, 3, ["a", "b", "c"],
                  ["a", 1], None):
        assert item_tokens(other, 256) == 1


def test_only_text_endpoints_count_tokens():
    assert takes_text(str) and takes_text(tuple[str, str])
    assert takes_text(Annotated[str, "doc"])
    assert not takes_text(fw.Image) and not takes_text(object)
    app = fw.App("t")
    model = fw.HFModel("org/model", revision="a" * 40)

    @app.endpoint(model=model, build=fw.Build(max_seq_len=128),
                  batching=fw.Batching(max_batch_rows=8))
    def embed(model, texts: list[str]) -> list[str]:
        return texts

    @app.endpoint(model=model)
    def anything(model, items):
        return items

    cost = TokenCost.of(app.endpoints["embed"])
    assert cost == TokenCost(max_seq_len=128, max_batch_tokens=8 * BATCH_TOKENS_PER_ROW)
    assert cost("abcd" * 1000) == 128
    assert TokenCost.of(app.endpoints["anything"]) is None
    assert row_tokens(app.endpoints["embed"], ["abcd", "abcd" * 40]) == 40 + SPECIAL_TOKENS
    assert row_tokens(app.endpoints["anything"], ["abcd" * 40]) == 0


def test_the_token_budget_defaults_to_rows_times_128_and_is_validated():
    assert batch_tokens(fw.Batching(max_batch_rows=32)) == 32 * 128
    assert batch_tokens(fw.Batching(max_batch_rows=32, max_batch_tokens=2048)) == 2048
    assert fw.Batching(max_batch_tokens=2048).problems("batching") == []
    for bad in (0, -5, 1 << 25, 2.5, True):
        problems = fw.Batching(max_batch_tokens=bad).problems("batching")
        assert [p.field for p in problems] == ["batching.max_batch_tokens"], bad
    app = fw.App("t")
    with pytest.raises(ConfigError, match="max_batch_tokens"):
        app.endpoint(model=fw.HFModel("org/model", revision="a" * 40),
                     batching=fw.Batching(max_batch_tokens=0))(lambda m, xs: xs)


def test_token_aware_off_makes_a_text_endpoint_cost_rows():
    app = fw.App("t")
    model = fw.HFModel("org/model", revision="a" * 40)

    @app.endpoint(model=model, batching=fw.Batching(token_aware=False))
    def embed(model, texts: list[str]) -> list[str]:
        return texts

    assert TokenCost.of(app.endpoints["embed"]) is None
    assert row_tokens(app.endpoints["embed"], ["abcd" * 40]) == 0
    assert [p.field for p in fw.Batching(token_aware="yes").problems("b")] == ["b.token_aware"]
