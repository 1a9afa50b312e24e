"""The torch-free safetensors reader: every byte materialized, truncation detected."""

import numpy as np
import pytest
from safetensors.numpy import save_file

from floodway.build.weights import load_safetensors, read_into_memory
from floodway.errors import ArtifactError


@pytest.fixture
def st_file(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((64, 33)).astype(np.float32),
               "b": np.arange(10, dtype=np.int64), "c": rng.standard_normal(7).astype(np.float16)}
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path))
    return path, tensors


@pytest.mark.parametrize("mode", ["read", "mmap"])
def test_roundtrip(st_file, mode):
    path, tensors = st_file
    got = load_safetensors(path, mode=mode)
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v)


def test_truncated(st_file):
    path, _ = st_file
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 8)
    with pytest.raises(ArtifactError, match="truncated"):
        load_safetensors(path)


def test_read_into_memory_is_the_whole_file(st_file):
    path, _ = st_file
    assert read_into_memory(path).tobytes() == path.read_bytes()
