"""Incremental detokenization with the tiny model's byte-level BPE tokenizer (trained from
the shipped corpus in well under a second; no model needed)."""

from __future__ import annotations

import pytest

from floodway.generate.detokenizer import REPLACEMENT, Detokenizer

TEXT = "Zürich café 東京 🙂 ok, naïve!"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer

    from examples.tiny_gpt2 import train_tokenizer

    folder = tmp_path_factory.mktemp("tok")
    train_tokenizer(folder)
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_deltas_join_to_the_full_text_and_never_split_a_character(tokenizer):
    ids = tokenizer.encode(TEXT).ids
    # some token ends inside a multi-byte character (byte-level BPE)
    assert any(REPLACEMENT in tokenizer.decode([i]) for i in ids)
    d = Detokenizer(tokenizer)
    deltas = [d.push(i) for i in ids] + [d.flush()]
    assert "".join(deltas) == TEXT == tokenizer.decode(ids)
    assert all(REPLACEMENT not in x for x in deltas)
    assert "" in deltas         # held back while a character was incomplete


def test_context_tokens_are_not_repeated(tokenizer):
    prompt = tokenizer.encode("hello there").ids
    more = tokenizer.encode(" warm pools").ids
    d = Detokenizer(tokenizer, prompt)
    assert "".join(d.push(i) for i in more) + d.flush() == " warm pools"


def test_an_incomplete_character_at_the_end_is_flushed_as_a_replacement(tokenizer):
    ids = tokenizer.encode(TEXT).ids
    cut = next(i for i in range(1, len(ids)) if tokenizer.decode(ids[:i]).endswith(REPLACEMENT))
    d = Detokenizer(tokenizer)
    sent = "".join(d.push(i) for i in ids[:cut])
    assert REPLACEMENT not in sent
    rest = d.flush()
    assert rest.endswith(REPLACEMENT) and sent + rest == tokenizer.decode(ids[:cut])
