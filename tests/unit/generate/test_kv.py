"""Packing caches of different lengths into one padded batch, and back."""

from __future__ import annotations

import numpy as np

from floodway.generate.kv import (
    KVCache,
    KVSpec,
    decode_feeds,
    prefill_feeds,
    store_decode,
    store_prefill,
)

SPEC = KVSpec(layers=2, heads=3, head_dim=4, vocab_size=7)


def test_prefill_right_pads_prompts_with_masks_positions_and_empty_past():
    f = prefill_feeds(SPEC, [[5, 6, 7], [8]])
    assert f["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert f["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert f["position_ids"].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert f["past_key_values.1.value"].shape == (2, 3, 0, 4)


def _presents(rows, total, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((rows, 3, total, 4)).astype(np.float32)
            for n in SPEC.present}


def test_prefill_stores_each_prompts_positions_and_returns_its_last_scores():
    out = _presents(2, 3)
    out["logits"] = np.arange(2 * 3 * 7, dtype=np.float32).reshape(2, 3, 7)
    caches = [KVCache(SPEC, 6), KVCache(SPEC, 4)]
    scores = store_prefill(SPEC, out, caches, [3, 1])
    assert scores.tolist() == [out["logits"][0, 2].tolist(), out["logits"][1, 0].tolist()]
    assert [c.length for c in caches] == [3, 1]
    assert np.array_equal(caches[1].data[1, 0, :, :1], out["present.1.key"][1, :, :1])
    assert not caches[1].data[:, :, :, 1:].any()


def test_decode_pads_the_past_masks_it_and_appends_the_new_position():
    a, b = KVCache(SPEC, 6), KVCache(SPEC, 6)
    a.data[:, :, :, :3] = 1.0
    b.data[:, :, :, :1] = 2.0
    a.length, b.length = 3, 1
    f = decode_feeds(SPEC, [a, b], [9, 4])
    assert f["input_ids"].tolist() == [[9], [4]]
    assert f["position_ids"].tolist() == [[3], [1]]
    assert f["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 0, 0, 1]]
    past = f["past_key_values.0.key"]
    assert past.shape == (2, 3, 3, 4) and past[1, :, 1:].sum() == 0 and past[0].min() == 1
    out = _presents(2, 4, seed=1)
    out["logits"] = np.ones((2, 1, 7), np.float32)
    scores = store_decode(SPEC, out, [a, b])
    assert scores.shape == (2, 7) and (a.length, b.length) == (4, 2)
    assert np.array_equal(b.data[0, 1, :, 1], out["present.0.value"][1, :, -1])
    assert np.array_equal(a.data[1, 0, :, 3], out["present.1.key"][0, :, -1])
