"""Fetch stage: the real huggingface_hub path offline, and completeness checks."""

import json
import shutil
import struct

import pytest

import floodway as fw
from floodway.build.fetch import check_complete, fetch, safetensors_payload_end, seed_hub_cache
from floodway.errors import BuildError

REV = "0123456789abcdef0123456789abcdef01234567"


def copy_model(model_dir, dst):
    shutil.copytree(model_dir, dst)
    return dst


def test_seeded_cache_resolves_through_snapshot_download(model_dir, tmp_path):
    cache = tmp_path / "hub"
    snap = seed_hub_cache(model_dir, "org/minilm", REV, cache)
    assert (snap / "model.safetensors").is_symlink()
    # huggingface_hub.snapshot_download with HF_HUB_OFFLINE=1 (set in conftest) ...
    got = fetch(fw.HFModel("org/minilm", revision=REV), cache_dir=cache, prefer_cache=False)
    assert got == snap
    assert (got / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()
    # ... and the fast path that skips the Hub client resolves the same folder.
    assert fetch(fw.HFModel("org/minilm", revision=REV), cache_dir=cache) == snap


@pytest.mark.parametrize("prefer_cache", [True, False])
def test_incomplete_cached_snapshot_is_reported_not_used(model_dir, tmp_path, prefer_cache):
    cache = tmp_path / "hub"
    snap = seed_hub_cache(model_dir, "org/minilm", REV, cache)
    blob = (snap / "model.safetensors").resolve()
    with blob.open("r+b") as f:          # an interrupted download
        f.truncate(blob.stat().st_size // 3)
    with pytest.raises(BuildError, match="model.safetensors is truncated"):
        fetch(fw.HFModel("org/minilm", revision=REV), cache_dir=cache,
              prefer_cache=prefer_cache)


def test_offline_and_not_cached_is_a_clear_error(tmp_path):
    with pytest.raises(BuildError, match=r"fetch.*not in the Hub cache.*hub-seed"):
        fetch(fw.HFModel("org/absent", revision=REV), cache_dir=tmp_path)


def test_complete_model_passes(model_dir):
    check_complete(model_dir, allow_pickle=False)


def test_truncated_safetensors_detected(model_dir, tmp_path):
    d = copy_model(model_dir, tmp_path / "m")
    w = d / "model.safetensors"
    need = safetensors_payload_end(w)
    with w.open("r+b") as f:
        f.truncate(need - 1000)
    with pytest.raises(BuildError, match=r"model.safetensors is truncated: .* describes"):
        check_complete(d, allow_pickle=False)


def test_garbage_header_detected(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").write_text("{}")
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(BuildError, match="header length"):
        check_complete(d, allow_pickle=False)


def test_missing_config_and_tokenizer(model_dir, tmp_path):
    d = copy_model(model_dir, tmp_path / "m")
    (d / "config.json").unlink()
    (d / "tokenizer.json").unlink()
    (d / "vocab.txt").unlink()
    with pytest.raises(BuildError, match="missing config.json, tokenizer.json"):
        check_complete(d, allow_pickle=False)


def test_missing_shard_detected(model_dir, tmp_path):
    d = copy_model(model_dir, tmp_path / "m")
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(BuildError, match="model-00002-of-00002.safetensors"):
        check_complete(d, allow_pickle=False)


def test_pickle_only_refused_unless_opted_in(model_dir, tmp_path):
    d = copy_model(model_dir, tmp_path / "m")
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    with pytest.raises(BuildError,
                       match=r"only pickled weights \(pytorch_model.bin\).*allow_pickle"):
        check_complete(d, allow_pickle=False)
    check_complete(d, allow_pickle=True)


def test_local_model_folder(model_dir):
    assert fetch(fw.LocalModel(model_dir)) == model_dir.resolve()
