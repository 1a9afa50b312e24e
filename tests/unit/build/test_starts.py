"""What the store knows of an endpoint's cold starts: its build's probe and the starts earlier
runs kept, of the latest build only."""

from __future__ import annotations

import json

from floodway.build.starts import STARTS_FILE, known_starts, remember_start
from floodway.build.store import ArtifactStore
from floodway.core.estimators import COLD_SAMPLES


def fake_build(root, key: str = "k1", endpoint: str = "embed", **manifest) -> ArtifactStore:
    """A store whose latest build of `endpoint` is `key`, its manifest holding `manifest`."""
    store = ArtifactStore(root)
    folder = store.build_dir(endpoint, key)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"build_key": key, **manifest}))
    store._point_latest(endpoint, key)
    return store


def test_the_probe_of_the_latest_build_is_known(tmp_path):
    known = known_starts(fake_build(tmp_path, cold_start_s=0.42), "embed")
    assert (known.build_key, known.probe_s, known.samples) == ("k1", 0.42, ())


def test_nothing_is_known_without_a_build_or_a_probe(tmp_path):
    assert known_starts(ArtifactStore(tmp_path), "embed").probe_s is None
    assert known_starts(fake_build(tmp_path), "embed").probe_s is None
    bad = fake_build(tmp_path / "b", cold_start_s="fast")
    assert known_starts(bad, "embed").probe_s is None


def test_starts_are_kept_per_build_and_bounded(tmp_path):
    store = fake_build(tmp_path, cold_start_s=0.4)
    for s in range(COLD_SAMPLES + 2):
        remember_start(store, "embed", "k1", 1.0 + s)
    known = known_starts(store, "embed")
    assert known.samples == tuple(1.0 + s for s in range(2, COLD_SAMPLES + 2))
    # A new build: the old build's starts say nothing of it.
    folder = store.build_dir("embed", "k2")
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    store._point_latest("embed", "k2")
    assert known_starts(store, "embed").samples == ()
    remember_start(store, "embed", "k2", 0.7)
    assert json.loads((tmp_path / "embed" / STARTS_FILE).read_text()) == {
        "build_key": "k2", "samples": [0.7]}


def test_a_start_of_no_build_in_the_store_is_not_kept(tmp_path):
    store = fake_build(tmp_path)
    remember_start(store, "embed", "missing", 1.0)
    remember_start(store, "embed", "k1", float("nan"))
    assert not (tmp_path / "embed" / STARTS_FILE).exists()
