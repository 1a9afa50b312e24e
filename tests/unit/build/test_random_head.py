"""A task model whose checkpoint lacks the task's head (text-classification on the MiniLM
sentence-transformers model) is refused at build time, unless the source opts in: then the
head is seeded by the build, so one build key always yields the same weights."""

from __future__ import annotations

import logging

import pytest

import floodway as fw
from floodway.build.manifest import Manifest
from floodway.build.pipeline import build_endpoint
from floodway.build.store import ArtifactStore
from floodway.errors import BuildError
from tests.unit.build.conftest import BATCH, SMALL

CLASSIFIER = "AutoModelForSequenceClassification"


def classify_app(model_dir, allow: bool) -> fw.App:
    app = fw.App("heads")

    @app.endpoint(model=fw.LocalModel(model_dir, task="text-classification",
                                      allow_random_head=allow), build=SMALL, batching=BATCH)
    def classify(model, texts: list[str]) -> list[list[float]]:
        return model.run(model.prepare(texts))["logits"]

    return app


def test_a_model_without_a_classification_head_is_refused(model_dir, tmp_path):
    with pytest.raises(BuildError, match=r"stage 'snapshot' failed: .* has no trained head for "
                                         r"AutoModelForSequenceClassification: 2 weights are "
                                         r"missing .*classifier\.bias, classifier\.weight.*"
                                         r"task='feature-extraction'.*allow_random_head=True"):
        build_endpoint(classify_app(model_dir, False)["classify"], ArtifactStore(tmp_path))
    assert not (tmp_path / "classify" / "LATEST").exists()


def test_the_random_head_is_seeded_so_a_key_always_gives_the_same_weights(model_dir):
    import torch

    from floodway.build.export import load_torch_model

    def head(seed: int) -> torch.Tensor:
        torch.manual_seed(1234)     # the caller's generator state does not matter ...
        model = load_torch_model(model_dir, allow_pickle=False, model_class=CLASSIFIER,
                                 seed=seed, allow_random_head=True)
        return model.classifier.weight.detach().clone()

    before = torch.random.get_rng_state()
    a, b, c = head(7), head(7), head(8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.random.set_rng_state(before)


def test_an_opted_in_build_is_reproducible_and_warns(model_dir, tmp_path, caplog):
    ep = classify_app(model_dir, True)["classify"]
    with caplog.at_level(logging.WARNING, logger="floodway.build"):
        first = build_endpoint(ep, ArtifactStore(tmp_path / "a"))
    assert "head is untrained" in caplog.text
    again = build_endpoint(ep, ArtifactStore(tmp_path / "b"))
    assert first.key == again.key
    m1, m2 = Manifest.read(first.path), Manifest.read(again.path)
    weights = "weights/model.safetensors"
    assert m1.artifacts[weights].sha256 == m2.artifacts[weights].sha256
    assert m1.source.allow_random_head and len(m1.warnings) == 1
    assert "untrained" in m1.warnings[0] and first.warnings == tuple(m1.warnings)
    # A no-op rebuild still reports it.
    assert build_endpoint(ep, ArtifactStore(tmp_path / "a")).warnings == first.warnings
