"""End to end: every app under examples/ built with `floodway build` and served by `floodway
serve` (real router and worker processes), its answers compared with PyTorch on the same
inputs, a malformed item refused naming it, and torch absent from every container that
serves an ONNX graph.

Each example is built once per session (the four builds run at once) into a temporary
store, and all four servers start together, one container each.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import struct
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from floodway.build.manifest import Manifest
from floodway.build.store import ArtifactStore
from tests.conftest import ROOT
from tests.e2e.conftest import running_server

pytestmark = pytest.mark.e2e

EXAMPLES = ROOT / "examples"
# endpoint -> the example app file that defines it
APPS = {"rerank": "rerank_app.py", "relevance": "cross_encoder_app.py",
        "classify_image": "vision_app.py", "embed_eager": "eager_app.py"}
ONNX_SERVED = ("rerank", "relevance", "classify_image")
PAIRS = [("how do warm pools help with traffic spikes?",
          "Warm pools keep containers ready, so a burst does not wait for cold starts."),
         ("how do warm pools help with traffic spikes?", "Bananas are rich in potassium."),
         ("a", "b")]
TEXTS = ["serendipity", "floodway keeps latency flat through traffic spikes."]


@pytest.fixture(scope="session")
def examples_env(hf_cache, tmp_path_factory) -> dict[str, str]:
    """The environment the examples are built and served in: a temporary artifact store,
    the cross-encoder's folder beside it, offline."""
    root = tmp_path_factory.mktemp("examples")
    return {"FLOODWAY_STORE": str(root / "store"), "HF_HUB_OFFLINE": "1",
            "CROSS_ENCODER_DIR": str(root / "cross-encoder")}


@pytest.fixture(scope="session")
def examples_store(examples_env) -> Path:
    """The store with every example built by the real CLI (`floodway build APP`)."""
    env = {**os.environ, **examples_env}

    def build(app: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "floodway.cli", "build", str(EXAMPLES / app)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(len(APPS)) as pool:
        done = dict(zip(APPS, pool.map(build, APPS.values()), strict=True))
    for name, res in done.items():
        assert res.returncode == 0, f"build of {name}:\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
        assert f"{name}: built" in res.stdout + res.stderr
    return Path(examples_env["FLOODWAY_STORE"])


@pytest.fixture(scope="module")
def servers(examples_store, examples_env, tmp_path_factory):
    """endpoint -> a running `floodway serve` of its example (one container), all started at
    once and polled until ready."""
    logs = tmp_path_factory.mktemp("examples-serve")
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(APPS)) as pool:
        def start(name: str):
            return stack.enter_context(running_server(
                EXAMPLES / APPS[name], examples_store, "--containers", "1",
                log=logs / f"{name}.log", env=examples_env))

        started = dict(zip(APPS, pool.map(start, APPS), strict=True))
        yield started


@pytest.fixture(scope="module")
def sentence_transformer(model_dir):
    """The PyTorch reference for MiniLM embeddings: sentence-transformers' own pipeline."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


def post(server, endpoint: str, inputs: list):
    return server.client.post(f"/v1/{endpoint}", json={"inputs": inputs})


def answer(server, endpoint: str, inputs: list) -> list:
    r = post(server, endpoint, inputs)
    assert r.status_code == 200, r.text
    return r.json()["outputs"]


def image_b64(size: tuple[int, int], seed: int, fmt: str = "PNG") -> str:
    """A smooth random RGB image of `size` (width, height), as base64 `fmt`."""
    rng = np.random.default_rng(seed)
    small = (rng.random((8, 8, 3)) * 255).astype(np.uint8)
    img = PIL.Image.fromarray(small).resize(size, PIL.Image.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode()


def decoded(item: str) -> PIL.Image.Image:
    return PIL.Image.open(io.BytesIO(base64.b64decode(item))).convert("RGB")


def bomb() -> str:
    """A PNG declaring 50000 x 50000 pixels in a few hundred bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    header = struct.pack(">IIBBBBB", 50_000, 50_000, 1, 0, 0, 0, 0)
    raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
           + chunk(b"IDAT", zlib.compress(bytes(4096))) + chunk(b"IEND", b""))
    return base64.b64encode(raw).decode()


def test_examples_use_modal_apps_model_revision():
    import modal_app

    for app in ("rerank_app.py", "cross_encoder_app.py", "eager_app.py"):
        text = (EXAMPLES / app).read_text()
        assert f'MODEL_REVISION = "{modal_app.MODEL_REVISION}"' in text, app
        assert f'MODEL_REPO = "{modal_app.MODEL_REPO}"' in text, app


def test_builds_record_task_parity_and_runtime(examples_store):
    store = ArtifactStore(examples_store)
    want = {"rerank": "feature-extraction", "relevance": "text-classification",
            "classify_image": "torch-module"}
    for name, task in want.items():
        m = Manifest.read(store.latest(name))
        assert m.task.name == task and m.runtime != "own"
        assert m.parity and all(p.passed and p.max_abs_err <= 1e-3 for p in m.parity), name
    assert Manifest.read(store.latest("relevance")).task.labels == ["not_relevant", "relevant"]
    vision = Manifest.read(store.latest("classify_image"))
    assert [(i.name, i.shape) for i in vision.io.inputs] == [
        ("pixel_values", ["batch", 3, 224, 224])]
    assert "weights/model.safetensors" in vision.artifacts
    eager = Manifest.read(store.latest("embed_eager"))
    assert eager.runtime == "own" and eager.parity == []
    assert {"source/config.json", "source/tokenizer.json"} <= set(eager.artifacts)


def test_torch_is_imported_only_where_no_onnx_artifact_exists(servers):
    for name, srv in servers.items():
        (c,) = srv.containers(name)
        assert c["state"] == "ready", (name, c)
        if name in ONNX_SERVED:
            assert (c["backend"], c["torch_imported"]) == ("onnxruntime-cpu", False), name
        else:
            assert (c["backend"], c["torch_imported"]) == ("load-hook", True), name
            assert "load_hook" in c["cold_start_s"]


def test_rerank_scores_match_sentence_transformers(servers, sentence_transformer):
    got = np.asarray(answer(servers["rerank"], "rerank", [list(p) for p in PAIRS]))
    a, b = (sentence_transformer.encode([p[i] for p in PAIRS], normalize_embeddings=True)
            for i in (0, 1))
    want = (a * b).sum(axis=1)
    assert got.shape == (3,) and np.abs(got - want).max() <= 1e-3, (got, want)
    assert got[0] > got[1] + 0.2          # a real model: the relevant passage ranks first


def test_cross_encoder_matches_pytorch(servers, examples_env):
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    got = answer(servers["relevance"], "relevance", [list(p) for p in PAIRS])
    folder = examples_env["CROSS_ENCODER_DIR"]
    tok = AutoTokenizer.from_pretrained(folder)
    model = BertForSequenceClassification.from_pretrained(folder).eval()
    batch = tok([p[0] for p in PAIRS], [p[1] for p in PAIRS], padding=True,
                return_tensors="pt")
    with torch.inference_mode():
        probs = model(**batch).logits.softmax(dim=-1).numpy()
    labels = model.config.id2label
    assert [g["label"] for g in got] == [labels[int(k)] for k in probs.argmax(axis=1)]
    err = max(abs(g["score"] - float(probs[i].max())) for i, g in enumerate(got))
    assert err <= 1e-3, (got, probs)


def test_image_classifier_matches_the_module(servers):
    import torch

    from examples.vision_app import preprocess
    from examples.vision_module import resnet18_seeded

    items = [image_b64((300, 200), 1), image_b64((224, 224), 2, "JPEG"),
             image_b64((97, 400), 3)]
    got = answer(servers["classify_image"], "classify_image", items)
    pixels = preprocess([decoded(x) for x in items])
    with torch.inference_mode():
        probs = resnet18_seeded().eval()(torch.from_numpy(pixels)).softmax(dim=-1).numpy()
    assert [len(g) for g in got] == [5, 5, 5]
    for row, top in zip(probs, got, strict=True):
        scores = [t["score"] for t in top]
        assert max(abs(t["score"] - row[t["label"]]) for t in top) <= 1e-3
        # the five most likely, best first (ties within rounding may swap places)
        assert scores == sorted(scores, reverse=True) and len({t["label"] for t in top}) == 5
        assert min(scores) >= np.sort(row)[-5] - 1e-6


def test_eager_embeddings_match_sentence_transformers(servers, sentence_transformer):
    got = np.asarray(answer(servers["embed_eager"], "embed_eager", TEXTS))
    want = sentence_transformer.encode(TEXTS, normalize_embeddings=True)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert got.shape == (2, 384) and np.all(cos >= 0.999), cos


@pytest.mark.parametrize("endpoint,good,bad,status,needle", [
    ("rerank", ["q", "p"], ["only one"], 422, "a JSON array of 2 items"),
    ("relevance", ["q", "p"], "not a pair", 422, "a JSON array of 2 items"),
    ("classify_image", image_b64((32, 32), 4), base64.b64encode(b"not an image").decode(),
     422, "not a PNG"),
    ("classify_image", image_b64((32, 32), 4), bomb(), 413, "declares 2,500,000,000 pixels"),
    ("embed_eager", "fine", 7, 422, "Input should be a valid string"),
])
def test_a_malformed_item_is_refused_naming_it(servers, endpoint, good, bad, status, needle):
    srv = servers[endpoint]
    r = post(srv, endpoint, [good, bad])
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert "inputs[1]" in message and needle in message, message
    assert len(answer(srv, endpoint, [good])) == 1     # and it keeps serving
