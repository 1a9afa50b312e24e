"""The loader's pydantic-free manifest reader agrees with the pydantic schema of record."""

import copy
import json

import pytest

from floodway.build.manifest import Manifest
from floodway.build.manifest_view import ManifestView
from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError


@pytest.fixture
def raw(built_store) -> dict:
    return json.loads((ArtifactStore(built_store).latest("embed") / "manifest.json").read_text())


def test_agrees_with_pydantic_on_a_real_manifest(raw):
    view, full = ManifestView.parse(json.dumps(raw)), Manifest.model_validate(raw)
    assert view.endpoint == full.endpoint and view.build_key == full.build_key
    assert view.inputs == tuple(i.name for i in full.io.inputs)
    assert view.max_seq_len == full.max_seq_len and view.skipped == full.skipped
    assert {k: (v.bytes, v.sha256) for k, v in view.artifacts.items()} == {
        k: (v.bytes, v.sha256) for k, v in full.artifacts.items()}
    assert view.task == full.task.name == "feature-extraction" and view.runtime == full.runtime
    assert [(i.name, i.dtype, list(i.shape)) for i in view.input_specs] == [
        (i.name, i.dtype, i.shape) for i in full.io.inputs]
    assert view.outputs == tuple(o.name for o in full.io.outputs) == ("last_hidden_state",)


def test_a_manifest_without_the_task_fields_reads_as_feature_extraction(raw):
    old = copy.deepcopy(raw)
    for key in ("task", "runtime"):
        del old[key]
    view, full = ManifestView.parse(json.dumps(old)), Manifest.model_validate(old)
    assert view.task == full.task.name == "feature-extraction"
    assert view.runtime == full.runtime == "floodway"


def _set(d, path, value):
    *head, last = path
    for k in head:
        d = d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value


@pytest.mark.parametrize("path,value,needle", [
    (("schema_version",), 2, "schema_version 2"),
    (("artifacts", "model.onnx", "bytes"), "12", "bytes = '12' is not a size"),
    (("artifacts", "model.onnx", "bytes"), True, "is not a size"),
    (("artifacts", "model.onnx", "sha256"), "abc", "is not a sha256"),
    (("artifacts",), [], "artifacts should be an object"),
    (("io", "inputs"), "input_ids", "io.inputs should be a list"),
    (("max_seq_len",), 0, "max_seq_len = 0"),
    (("endpoint",), KeyError, "endpoint = None"),
    (("runtime",), "vllm", "runtime = 'vllm'"),
    (("io", "inputs", 0, "shape"), [None], "should hold sizes and axis names"),
])
def test_rejects_what_pydantic_rejects(raw, path, value, needle):
    bad = copy.deepcopy(raw)
    _set(bad, path, value)
    with pytest.raises(ArtifactError, match=needle.replace("(", r"\(")):
        ManifestView.parse(json.dumps(bad))
    with pytest.raises(ValueError):
        Manifest.model_validate(bad)


@pytest.mark.parametrize("rel", ["../outside", "/etc/passwd", "a/../../b", "a\\\\..\\\\b"])
def test_paths_must_stay_inside_the_build(raw, rel):
    bad = copy.deepcopy(raw)
    bad["artifacts"][rel] = next(iter(bad["artifacts"].values()))
    with pytest.raises(ArtifactError, match="leaves the build folder"):
        ManifestView.parse(json.dumps(bad))


def test_not_json():
    with pytest.raises(ArtifactError, match="not JSON"):
        ManifestView.parse(b"{")
