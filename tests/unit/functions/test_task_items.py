"""A graph endpoint's item type must be what its task prepares: fw.Image for an image
task, no image or array for a text task; checked when the endpoint is defined."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import floodway as fw
from floodway.errors import ConfigError
from floodway.tasks import FAMILIES, get, names

REV = "a" * 40


def _define(task: str, fn, **kw):
    app = fw.App("items")
    return app.endpoint(model=fw.HFModel("org/model", revision=REV, task=task), **kw)(fn)


def test_the_families_known_without_imports_are_the_tasks_own():
    assert {n: get(n).family for n in names()} == FAMILIES


@pytest.mark.parametrize("annotated", [True, False])
def test_an_image_task_with_an_item_type_other_than_fw_image_is_refused(annotated):
    def classify(model, images: list[Any]) -> list[Any]:
        return images

    def untyped(model, images):
        return images

    with pytest.raises(ConfigError) as e:
        _define("image-classification", classify if annotated else untyped, name="cls")
    msg = str(e.value)
    assert "endpoint 'cls': function.images = list[Any] (or none) is not allowed" in msg
    assert "allowed: list[fw.Image]" in msg and "'image-classification'" in msg


def test_an_image_task_with_str_items_is_refused():
    def classify(model, images: list[str]) -> list[Any]:
        return images

    with pytest.raises(ConfigError, match=r"function.images = list\[<class 'str'>\]"):
        _define("image-classification", classify)


def test_an_image_task_with_fw_image_items_is_accepted():
    def classify(model, images: list[fw.Image]) -> list[Any]:
        return images

    ep = _define("image-classification", classify)
    assert ep is not None


@pytest.mark.parametrize("task", ["feature-extraction", "text-classification",
                                  "token-classification"])
def test_a_text_task_refuses_images_and_arrays_and_takes_text_or_any(task):
    def pictures(model, items: list[fw.Image]) -> list[Any]:
        return items

    def arrays(model, items: list[fw.Array[np.float32, (3,)]]) -> list[Any]:
        return items

    def nested(model, items: list[tuple[str, fw.Image]]) -> list[Any]:
        return items

    for fn in (pictures, arrays, nested):
        with pytest.raises(ConfigError, match=rf"function.items = .* allowed: list\[str\].*"
                                              rf"task '{task}' prepares text items"):
            _define(task, fn, name="t")

    def text(model, items: list[str]) -> list[Any]:
        return items

    def pairs(model, items: list[tuple[str, str]]) -> list[Any]:
        return items

    def anything(model, items: list[Any]) -> list[Any]:
        return items

    for fn in (text, pairs, anything):
        _define(task, fn)


def test_an_endpoint_with_its_own_runtime_takes_any_items():
    def classify(model, images: list[Any]) -> list[Any]:
        return images

    app = fw.App("own")
    app.endpoint(model=fw.HFModel("org/model", revision=REV, task="image-classification"),
                 load=lambda artifacts: None)(classify)
    app.endpoint(model=None, name="none")(classify)


def test_a_text_generation_build_with_tensorrt_is_refused_naming_the_field():
    async def generate(model, prompt: fw.Prompt):
        yield prompt

    with pytest.raises(ConfigError) as e:
        _define("text-generation", generate, build=fw.Build(tensorrt=True))
    assert "build.tensorrt" in str(e.value) and "key/value-cache" in str(e.value)
    _define("text-generation", generate, build=fw.Build(tensorrt=False))   # ONNX only: fine
