"""Text tasks beyond embeddings: text-classification (texts and text pairs, as cross-encoders
take them) and token-classification, built from local models with seeded heads, served
through ONNX Runtime and compared with PyTorch on the same inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from floodway import tasks
from floodway.build.loader import load
from floodway.build.manifest import Manifest
from floodway.build.store import ArtifactStore

PAIRS = [("how do warm pools help?", "They keep containers ready before a burst."),
         ("what is a cold start?", "The time from a request to a ready container."),
         ("a", "b")]


def torch_logits(folder, cls_name, feeds):
    import torch
    import transformers

    model = getattr(transformers, cls_name).from_pretrained(str(folder)).eval()
    with torch.inference_mode():
        return model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()


def test_registry_names_every_task_and_refuses_unknown_ones():
    assert tasks.names() == ("feature-extraction", "text-classification",
                             "token-classification", "image-classification", "torch-module",
                             "text-generation")
    cls = tasks.get("text-classification")
    assert (cls.model_class, cls.outputs, cls.per_token) == (
        "AutoModelForSequenceClassification", ("logits",), False)
    assert tasks.get("token-classification").per_token
    with pytest.raises(KeyError, match="unknown task 'summarization'"):
        tasks.get("summarization")


def test_text_classification_manifest_records_task_io_labels_and_pair_parity(text_cls_store):
    m = Manifest.read(ArtifactStore(text_cls_store).latest("rerank"))
    assert m.task.name == "text-classification"
    assert m.task.model_class == "AutoModelForSequenceClassification"
    assert m.task.labels == ["contradiction", "neutral", "entailment"]
    assert m.task.tolerance == 1e-3 and m.task.per_token is False
    assert [o.model_dump() for o in m.io.outputs] == [
        {"name": "logits", "dtype": "float32", "shape": ["batch", 3]}]
    assert [i.name for i in m.io.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    cases = [(p.graph, p.case, p.padded) for p in m.parity]
    assert ("model.onnx", "pairs", True) in cases and ("model.opt.onnx", "pairs", True) in cases
    assert all(p.passed and p.outputs == ["logits"] and p.max_abs_err <= 1e-3 for p in m.parity)
    assert m.max_seq_len == 64 and {"tokenizer/tokenizer.json", "model.onnx"} <= set(m.artifacts)


def test_pairs_are_encoded_as_one_row_each_with_segment_ids(text_cls_store):
    model = load(ArtifactStore(text_cls_store).latest("rerank"))
    feeds = model.encode_pairs([("a", "b c")])
    # [CLS] a [SEP] b c [SEP]: the second text is segment 1
    assert feeds["token_type_ids"].tolist() == [[0, 0, 0, 1, 1, 1]]
    assert feeds["input_ids"][0, 0] == 101 and feeds["input_ids"][0, -1] == 102
    assert model.prepare([("a", "b c")])["input_ids"].tolist() == feeds["input_ids"].tolist()
    with pytest.raises(ValueError, match="item 1 is not a pair of strings"):
        model.encode_pairs([("a", "b"), ("only one",)])
    long = model.encode_pairs([("word " * 500, "other " * 500)])
    assert long["input_ids"].shape == (1, 64)      # truncated longest-first to the cap
    assert 0 < long["token_type_ids"].sum() < 64   # both segments kept


def test_text_classification_matches_pytorch_on_pairs_and_texts(text_cls_store, text_cls_dir):
    model = load(ArtifactStore(text_cls_store).latest("rerank"))
    assert model.task == "text-classification" and model.labels[2] == "entailment"
    for items in (PAIRS, ["a single text", "and another, somewhat longer, one"]):
        feeds = model.prepare(items)
        got = model.run(feeds)["logits"]
        want = torch_logits(text_cls_dir, "BertForSequenceClassification", feeds)
        assert got.shape == (len(items), 3)
        assert np.abs(got - want).max() <= 1e-3


def test_token_classification_matches_pytorch_on_real_positions(token_cls_store, token_cls_dir):
    folder = ArtifactStore(token_cls_store).latest("ner")
    m = Manifest.read(folder)
    assert m.task.per_token and m.io.outputs[0].shape == ["batch", "seq", 5]
    assert m.task.labels[:2] == ["O", "B-PER"]
    model = load(folder)
    feeds = model.prepare(["Ada Lovelace lived in London", "Paris"])
    got = model.run(feeds)["logits"]
    want = torch_logits(token_cls_dir, "BertForTokenClassification", feeds)
    real = feeds["attention_mask"].astype(bool)
    assert got.shape == feeds["input_ids"].shape + (5,)
    assert np.abs(got - want)[real].max() <= 1e-3


def test_classifiers_load_and_run_without_torch(text_cls_store, token_cls_store):
    code = ("import sys, json; from floodway.build.loader import load; "
            "a = load(sys.argv[1]); b = load(sys.argv[2]); "
            "x = a.run(a.prepare([('q', 'p'), ('r', 's t')]))['logits']; "
            "y = b.run(b.prepare(['one', 'two words']))['logits']; "
            "print(json.dumps([a.backend, list(x.shape), list(y.shape), "
            "'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code,
                          str(ArtifactStore(text_cls_store).latest("rerank")),
                          str(ArtifactStore(token_cls_store).latest("ner"))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    backend, x, y, torch_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert (backend, x, y, torch_loaded) == ("onnxruntime-cpu", [2, 3], [2, 4, 5], False)


def test_the_pytorch_fallback_rebuilds_the_task_model(text_cls_store, tmp_path):
    src = ArtifactStore(text_cls_store).latest("rerank")
    copy = tmp_path / src.name
    shutil.copytree(src, copy)
    for rel in ("model.opt.onnx", "model.onnx"):
        data = bytearray((copy / rel).read_bytes())
        data[50] ^= 1
        (copy / rel).write_bytes(bytes(data))
    fallback, ref = load(copy), load(src)
    assert fallback.backend == "torch"
    feeds = ref.prepare(PAIRS)
    got, want = (m.run(feeds)["logits"] for m in (fallback, ref))
    assert np.abs(got - want).max() <= 1e-3
