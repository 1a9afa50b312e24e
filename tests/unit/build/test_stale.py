"""A build made from another definition of its endpoint is not served silently: `floodway
serve` names each changed field and the command that rebuilds, unless told --allow-stale."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from typer.testing import CliRunner

import floodway as fw
import modal_app
from floodway.build.pipeline import build_endpoint
from floodway.build.stale import changes, check_builds
from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError
from floodway.functions.discover import load_app
from floodway.server import build_server

APP = '''
import floodway as fw

app = fw.App("plain")


@app.endpoint(build=fw.Build(max_seq_len={seq}))
def embed(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]
'''


@pytest.fixture
def built(tmp_path):
    """app.py with Build(max_seq_len=128), built into a store; returns (app.py, store)."""
    path, store = tmp_path / "app.py", tmp_path / "store"
    path.write_text(APP.format(seq=128))
    _, (ep,) = load_app(str(path))
    build_endpoint(ep, ArtifactStore(store))
    return path, store


def edited(tmp_path, seq: int):
    """app.py as edited after the build (another file: a module is imported once)."""
    path = tmp_path / "edited" / "app.py"
    path.parent.mkdir()
    path.write_text(APP.format(seq=seq))
    return path


def test_serving_after_a_config_change_without_a_rebuild_is_refused(built, tmp_path):
    path, store = built
    build_server(str(path), store=store, jobs_db=tmp_path / "j.sqlite3")   # current: fine
    path = edited(tmp_path, 256)
    with pytest.raises(ArtifactError) as e:
        build_server(str(path), store=store, jobs_db=tmp_path / "j.sqlite3")
    assert str(e.value) == (
        f"endpoint 'embed': Build(max_seq_len) is 256 in {path} but the artifacts were built "
        f"with 128: run `floodway build {path}` (or pass --allow-stale to serve the old "
        "artifacts anyway)")


def test_allow_stale_serves_with_a_warning(built, tmp_path, caplog):
    _, store = built
    path = edited(tmp_path, 256)
    with caplog.at_level(logging.WARNING, logger="floodway.serve"):
        _, pool = build_server(str(path), store=store, jobs_db=tmp_path / "j.sqlite3",
                               allow_stale=True)
    assert set(pool.endpoints) == {"embed"}
    assert "Build(max_seq_len) is 256" in caplog.text and "--allow-stale" in caplog.text


def test_the_cli_passes_allow_stale_to_serve(monkeypatch):
    from floodway import cli, server

    seen = {}
    monkeypatch.setattr(server, "serve", lambda app, **kw: seen.update(kw))
    # `serve` sets FLOODWAY_NO_MODAL in its process (this one): set here, it is unset again
    # when the test ends, so later tests still build Modal objects.
    monkeypatch.setenv("FLOODWAY_NO_MODAL", "1")
    res = CliRunner().invoke(cli.cli, ["serve", "app.py", "--allow-stale"])
    assert res.exit_code == 0, res.output
    assert seen["allow_stale"] is True


def test_every_build_relevant_change_is_named(built_store):
    ep = modal_app.endpoints["embed"]
    manifest = json.loads((ArtifactStore(built_store).latest("embed") / "manifest.json")
                          .read_text())
    assert changes(ep, manifest, "app.py") == []
    other = dataclasses.replace(
        ep, build=dataclasses.replace(ep.build, precision=("fp32", "int8"), opset=18),
        model=fw.HFModel(ep.model.repo_id, ep.model.revision, task="text-classification"))
    found = changes(other, manifest, "app.py")
    assert found == [
        "Build(opset) is 18 in app.py but the artifacts were built with 17",
        "Build(precision) is ['fp32', 'int8'] in app.py but the artifacts were built with "
        "['fp32']",
        "the task is 'text-classification' in app.py but the artifacts were built for "
        "'feature-extraction'"]
    moved = dataclasses.replace(ep, model=fw.HFModel("org/other", "b" * 40))
    assert changes(moved, manifest, "app.py") == [
        f"the model source is hf://org/other@{'b' * 40} in app.py but the artifacts were "
        f"built from {ep.model.display}"]


def test_a_manifest_without_a_newer_field_counts_it_as_its_default(built_store):
    ep = modal_app.endpoints["embed"]
    manifest = json.loads((ArtifactStore(built_store).latest("embed") / "manifest.json")
                          .read_text())
    del manifest["build"]["precision_min_cosine"]
    assert changes(ep, manifest, "app.py") == []
    check_builds([ep], ArtifactStore(built_store), "app.py")   # raises nothing
