"""The cold-start loader: no torch, integrity checks, io signature check."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from floodway.build.loader import load
from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError


@pytest.fixture
def build_copy(built_store, tmp_path):
    src = ArtifactStore(built_store).latest("embed")
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_loads_and_runs_without_importing_torch(built_store):
    folder = ArtifactStore(built_store).latest("embed")
    code = ("import sys, json; from floodway.build.loader import load; "
            f"m = load({str(folder)!r}); f = m.encode(['hi there', 'x']); "
            "o = m.run(f)['last_hidden_state']; "
            "print(json.dumps([m.backend, list(o.shape), 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    backend, shape, torch_loaded = json.loads(out.strip().splitlines()[-1])
    assert backend == "onnxruntime-cpu"
    assert shape[0] == 2 and shape[2] == 384
    assert torch_loaded is False


def test_encode_pads_and_truncates(built_store):
    m = load(ArtifactStore(built_store).latest("embed"))
    f = m.encode(["a", "word " * 1000])
    assert f["input_ids"].shape == (2, 256) and f["input_ids"].dtype == np.int64
    assert f["attention_mask"][0].sum() == 3 and f["attention_mask"][1].sum() == 256


def test_truncated_artifact_detected(build_copy):
    onnx = build_copy / "model.onnx"
    with onnx.open("r+b") as f:
        f.truncate(onnx.stat().st_size // 2)
    with pytest.raises(ArtifactError, match=r"model.onnx has \d+ bytes, the manifest says"):
        load(build_copy)


def test_altered_artifact_detected_by_hash(build_copy):
    tok = build_copy / "tokenizer" / "vocab.txt"
    data = bytearray(tok.read_bytes())
    data[100] ^= 1
    tok.write_bytes(bytes(data))
    load(build_copy)   # same size: the fast check passes ...
    with pytest.raises(ArtifactError, match="does not match its manifest sha256"):
        load(build_copy, verify="sha256")   # ... the full check does not


def test_missing_file_and_missing_manifest(build_copy):
    (build_copy / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(ArtifactError, match="tokenizer.json is missing"):
        load(build_copy)
    (build_copy / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="no manifest.json"):
        load(build_copy)


def test_io_signature_mismatch(build_copy):
    path = build_copy / "manifest.json"
    m = json.loads(path.read_text())
    m["io"]["inputs"] = m["io"]["inputs"][:2]
    path.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="takes inputs .*token_type_ids.* the manifest says"):
        load(build_copy)


def test_no_build_names_the_command(tmp_path):
    with pytest.raises(ArtifactError, match="floodway build"):
        ArtifactStore(tmp_path).latest("embed")
