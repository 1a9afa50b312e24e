"""Session-wide builds of the task models (`tests.unit.build.task_models`): each is made and
built once per test session, then shared (exporting is the slow part)."""

from __future__ import annotations

from pathlib import Path

import pytest

import floodway as fw
from floodway.config import LocalModel

SMALL = fw.Build(max_seq_len=64, max_batch_rows=8)
BATCH = fw.Batching(max_batch_rows=8)


def build_app(app: fw.App, root: Path) -> Path:
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    for ep in app:
        build_endpoint(ep, ArtifactStore(root))
    return root


@pytest.fixture(scope="session")
def text_cls_dir(model_dir, tmp_path_factory) -> Path:
    from tests.unit.build.task_models import text_classifier

    return text_classifier(model_dir, tmp_path_factory.mktemp("text-cls"))


@pytest.fixture(scope="session")
def text_cls_store(text_cls_dir, tmp_path_factory) -> Path:
    """A store with endpoint "rerank": text-classification on MiniLM + a 3-label head."""
    app = fw.App("text-cls")

    @app.endpoint(model=LocalModel(text_cls_dir, task="text-classification"), build=SMALL,
                  batching=BATCH)
    def rerank(model, pairs: list[tuple[str, str]]) -> list[list[float]]:
        return model.run(model.prepare(pairs))["logits"]

    return build_app(app, tmp_path_factory.mktemp("text-cls-store"))


@pytest.fixture(scope="session")
def token_cls_dir(model_dir, tmp_path_factory) -> Path:
    from tests.unit.build.task_models import token_classifier

    return token_classifier(model_dir, tmp_path_factory.mktemp("token-cls"))


@pytest.fixture(scope="session")
def token_cls_store(token_cls_dir, tmp_path_factory) -> Path:
    """A store with endpoint "ner": token-classification on a tiny BERT."""
    app = fw.App("token-cls")

    @app.endpoint(model=LocalModel(token_cls_dir, task="token-classification"), build=SMALL,
                  batching=BATCH)
    def ner(model, texts: list[str]) -> list[list[list[float]]]:
        return model.run(model.prepare(texts))["logits"]

    return build_app(app, tmp_path_factory.mktemp("token-cls-store"))


CONV = "tests.unit.build.toy_modules:conv_net"
TAGGER = "tests.unit.build.toy_modules:tagger"


def torch_app(weights=None, revision=None, allow_pickle=False) -> fw.App:
    """Endpoints "classify" (conv_net, with `weights`) and "tag" (tagger: two inputs, a
    dynamic sequence axis, two outputs)."""
    from typing import Any

    from floodway.config import TensorSpec, TorchModel

    app = fw.App("torch-models")
    image = TensorSpec("image", "float32", (None, 3, 16, 16))

    @app.endpoint(model=TorchModel(CONV, weights=weights, revision=revision,
                                   allow_pickle=allow_pickle, inputs=[image],
                                   outputs=["logits"]), build=SMALL, batching=BATCH)
    def classify(model, images: list[Any]) -> list[list[float]]:
        return model.run(model.prepare(images))["logits"]

    @app.endpoint(model=TorchModel(TAGGER, inputs=[TensorSpec("ids", "int64", ("batch", "seq")),
                                                   TensorSpec("weights", "float32",
                                                              ("batch", "seq"))],
                                   outputs=["pooled", "tokens"]), build=SMALL, batching=BATCH)
    def tag(model, items: list[Any]) -> list[list[float]]:
        return model.run(model.prepare(items))["pooled"]

    return app


@pytest.fixture(scope="session")
def torch_store(tmp_path_factory) -> Path:
    """A store with `torch_app()`'s endpoints built (the factories' own weights)."""
    return build_app(torch_app(), tmp_path_factory.mktemp("torch-store"))


@pytest.fixture(scope="session")
def image_dirs(tmp_path_factory) -> dict[str, Path]:
    """Tiny image classifiers: "vit" (ViT processor) and "resnet" (ConvNeXT processor)."""
    from tests.unit.build.task_models import image_classifier, tiny_resnet

    return {"vit": image_classifier(tmp_path_factory.mktemp("vit")),
            "resnet": tiny_resnet(tmp_path_factory.mktemp("resnet"))}


@pytest.fixture(scope="session")
def image_store(image_dirs, tmp_path_factory) -> Path:
    """A store with endpoints "vit" and "resnet": image-classification."""
    app = fw.App("images")
    for name, folder in image_dirs.items():
        def classify(model, images: list[fw.Image]) -> list[list[float]]:
            return model.run(model.prepare(images))["logits"]

        app.endpoint(model=LocalModel(folder, task="image-classification"), name=name,
                     build=SMALL, batching=BATCH)(classify)
    return build_app(app, tmp_path_factory.mktemp("image-store"))
