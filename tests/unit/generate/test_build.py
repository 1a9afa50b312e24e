"""A text-generation build of the tiny GPT-2: one graph with its key/value cache, parity
checked on a prefill and on a decode step with a real past, the manifest's generation
record, and the PyTorch load path running the same graph."""

from __future__ import annotations

import json

import numpy as np
import pytest

from floodway.build.manifest import Manifest
from floodway.build.manifest_view import ManifestView
from floodway.errors import ArtifactError
from floodway.generate import kv


def test_the_manifest_records_io_parity_and_what_the_engine_needs(gen_build):
    m = Manifest.read(gen_build)
    assert m.task.name == "text-generation" and m.task.model_class == "AutoModelForCausalLM"
    assert m.generation.model_dump() == {"layers": 2, "heads": 4, "head_dim": 16,
                                         "vocab_size": 400, "eos_token_ids": [0],
                                         "bos_token_id": 0}
    ins = {i.name: i.shape for i in m.io.inputs}
    outs = {o.name: o.shape for o in m.io.outputs}
    assert list(ins)[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert ins["attention_mask"] == ["batch", "total"]
    assert ins["past_key_values.1.value"] == ["batch", 4, "past", 16]
    assert outs["logits"] == ["batch", "seq", 400]
    assert outs["present.0.key"] == ["batch", 4, "total", 16] and len(outs) == 5
    cases = {(p.graph, p.case) for p in m.parity}
    assert {("model.onnx", "decode-with-past"), ("model.opt.onnx", "prefill")} <= cases
    assert all(p.passed and p.max_abs_err < 1e-3 for p in m.parity)
    assert m.max_seq_len == 128
    assert {"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
            "tokenizer/generation_config.json"} <= set(m.artifacts)
    view = ManifestView.parse((gen_build / "manifest.json").read_bytes())
    assert view.generation.eos_token_ids == (0,) and view.generation.layers == 2


@pytest.mark.parametrize("bad, msg", [({"layers": 0}, "generation.layers"),
                                      ({"eos_token_ids": ["x"]}, "token ids"),
                                      ({"heads": "4"}, "generation.heads")])
def test_a_bad_generation_record_is_refused(gen_build, bad, msg):
    raw = json.loads((gen_build / "manifest.json").read_text())
    raw["generation"].update(bad)
    with pytest.raises(ArtifactError, match=msg):
        ManifestView.parse(json.dumps(raw))


def test_the_pytorch_path_runs_the_same_cache_graph(gen_build, loaded):
    from floodway.build import torch_runner

    run = torch_runner.runner(gen_build, loaded.manifest)
    spec = kv.KVSpec(2, 4, 16, 400)
    feeds = kv.prefill_feeds(spec, [[5, 6, 7], [9]])
    want, got = loaded.runner(feeds), run(feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-4)
