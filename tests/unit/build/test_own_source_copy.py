"""An own-runtime build holds copies of a local source's files: editing the user's folder
after the build never alters it. Only a Hub cache's blobs (immutable, named by their hash)
are shared with the build (hard links)."""

from __future__ import annotations

import os

import floodway as fw
from floodway.build.artifacts import load_own
from floodway.build.own import is_hub_blob
from floodway.build.store import ArtifactStore
from tests.unit.build import own_apps
from tests.unit.build.conftest import build_app


def _config(artifacts):
    return (artifacts.source_dir / "config.json").read_text()


def _app(model) -> fw.App:
    app = fw.App("copies")

    @app.endpoint(model=model, load=_config)
    def config(text, items: list[str]) -> list[str]:
        return [text] * len(items)

    return app


def test_editing_a_local_source_after_its_build_leaves_the_build_intact(tmp_path):
    src = own_apps.source_folder(tmp_path / "src")
    app = _app(fw.LocalModel(src))
    build_app(app, tmp_path / "store")
    folder = ArtifactStore(tmp_path / "store").latest("config")
    for name in ("config.json", "vocab.txt", "model.safetensors"):
        assert not os.path.samefile(folder / "source" / name, src / name), name
    before = (folder / "source" / "config.json").read_text()
    with open(src / "config.json", "r+") as f:   # edited in place (same inode)
        f.write('{"model_type": "EDITED"')
    assert (folder / "source" / "config.json").read_text() == before
    text, _, _ = load_own(app["config"], folder)   # its hashes still match
    assert '"model_type": "toy"' in text


def test_hub_cache_blobs_are_shared_with_the_build(tmp_path):
    from floodway.build.fetch import seed_hub_cache

    rev = "3" * 40
    snap = seed_hub_cache(own_apps.source_folder(tmp_path / "src"), "toy/copies", rev)
    build_app(_app(fw.HFModel("toy/copies", revision=rev)), tmp_path / "store")
    folder = ArtifactStore(tmp_path / "store").latest("config")
    weights = folder / "source" / "model.safetensors"
    assert not weights.is_symlink() and weights.stat().st_nlink >= 2
    blob = (snap / "model.safetensors").resolve()
    assert is_hub_blob(blob) and os.path.samefile(weights, blob)


def test_only_a_hub_cache_blob_counts_as_one(tmp_path):
    assert is_hub_blob(tmp_path / "models--org--name" / "blobs" / "abc123")
    assert not is_hub_blob(tmp_path / "my-model" / "blobs" / "abc123")
    assert not is_hub_blob(tmp_path / "models--org--name" / "snapshots" / "abc123")
