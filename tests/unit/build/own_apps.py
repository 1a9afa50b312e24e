"""Endpoints that bring their own runtime, for the tests: a tiny Hugging Face-format source
folder, and an app file whose endpoints use it through a `load=` hook or have no source.
Building them takes milliseconds (no graph is exported)."""

from __future__ import annotations

import json
from pathlib import Path

APP = '''
import sys

import floodway as fw

app = fw.App("own")
CALLS = []


def load(artifacts):
    """Reads the build's files; remembers what the container had imported by then."""
    CALLS.append(artifacts.build_key)
    config = (artifacts.source_dir / "config.json").read_text()
    return {{"files": list(artifacts.files), "config": config,
            "onnxruntime": "onnxruntime" in sys.modules}}


@app.endpoint(model=fw.LocalModel({folder!r}), load=load)
def describe(state, texts: list[str]) -> list[str]:
    return [f"{{len(state['files'])}}:{{state['onnxruntime']}}:{{'torch' in sys.modules}}:{{t}}"
            for t in texts]


@app.endpoint()
def shout(state, texts: list[str]) -> list[str]:
    assert state is None
    return [t.upper() for t in texts]
'''


def source_folder(dst: Path) -> Path:
    """A folder with config.json, a tokenizer vocabulary and one safetensors file."""
    import numpy as np
    from safetensors.numpy import save_file

    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps({"model_type": "toy", "hidden": 4}))
    (dst / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(dst / "model.safetensors"))
    return dst


def app_file(dst: Path, source: Path) -> Path:
    """The app above, written to `dst` (a .py file) with its source at `source`."""
    dst.write_text(APP.format(folder=str(source)))
    return dst


def build_all(app_path: Path, store: Path) -> Path:
    """Build every endpoint of the app file at `app_path` into the store at `store`."""
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore
    from floodway.functions.discover import load_app

    _, eps = load_app(str(app_path))
    for ep in eps:
        build_endpoint(ep, ArtifactStore(store))
    return store
