"""The GPU class and a warmer through Modal's real container entrypoint, against the fake.

Each test deploys ``modal_app.py`` to the fake through the real client, then runs one of its
functions as Modal would: ``python -m modal._container_entrypoint`` in a subprocess, from the
files the client mounted, with the definition the client sent
(`tests.modal_fake.entrypoint.Container`). The GPU class reads the session's build of the
example endpoint (``FLOODWAY_STORE``: the artifact Volume is not mounted here).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import modal_app
from floodway.modal.contract import ITEM_ERROR, container_slots
from floodway.modal.stats import STATS_DICT, cold_key
from floodway.modal.warmers.apply import WARM_DICT
from tests.modal.support import APP_NAME, DIM, deploy_example
from tests.modal_fake import FakeModalServer
from tests.modal_fake.entrypoint import Container
from tests.unit.build.standin_engine import (
    GPU_WHEN_ENV,
    STANDIN_BIN,
    STANDIN_DIR,
    add_standin_engine,
)

EMBED = "Embed.*"
TEXTS = [f"sentence number {i} about {'floods ' * (i % 5)}and ways" for i in range(39)]
BAD_ROW = 17        # where a row that is not a string goes (the endpoint raises on it alone)


@pytest.fixture(scope="module")
def local_embeddings(built_store):
    """`TEXTS` embedded by the local floodway path (loader + worker batch) on the same build."""
    from floodway.build.loader import load
    from floodway.build.store import ArtifactStore
    from floodway.runtime.worker import run_batch

    ep = modal_app.endpoints["embed"]
    model = load(ArtifactStore(built_store).latest("embed"))
    done, errors = run_batch(ep.fn, model, list(enumerate(TEXTS)))
    assert errors == []
    return np.array([v for _, v in sorted(done)])


def embed_container(server: FakeModalServer, store, *, env=None, **kwargs) -> Container:
    """A container of the deployed GPU class reading the build in `store`."""
    return Container.deployed(server, APP_NAME, EMBED,
                              env={"FLOODWAY_STORE": str(store), **(env or {})}, **kwargs)


def _first(board, name: str) -> float:
    """When the first `name` RPC reached the fake (``time.time()``)."""
    return next(t for n, _, t in board.calls if n == name)


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "no-snapshot"])
def test_gpu_class_loads_and_answers_batches(fake_modal, built_store, local_embeddings,
                                             snapshot):
    """Both enter hooks run (around the memory snapshot when one is taken), the rows come back
    in order as the local path's embeddings, Modal batches them as the decorator says, a bad
    row answers the per-item error alone, the container runs the batches concurrently as the
    router models it, and the start is recorded for the router."""
    deploy_example(fake_modal)
    board = fake_modal.servicer.containers
    definition = fake_modal.state.function(EMBED, app=APP_NAME).definition
    rows = [(t,) for t in TEXTS]
    rows.insert(BAD_ROW, (12345,))
    box = embed_container(fake_modal, built_store, snapshot=snapshot)
    ids = box.send("predict", rows)        # queued before the container asks: fixed batches
    with box:
        out = box.results(ids, timeout_s=60)
    assert box.returncode == 0 and board.task_results == [], box.log()

    bad = out.pop(BAD_ROW)
    assert set(bad) == {ITEM_ERROR} and bad[ITEM_ERROR].startswith("TypeError"), bad
    [its_batch] = [b for b in board.batches if ids[BAD_ROW] in b]
    assert len(its_batch) == 32                 # its 31 batch-mates are among the answers
    got = np.array(out)
    assert got.shape == (len(TEXTS), DIM)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, local_embeddings, atol=1e-4)

    # @modal.batched(max_batch_size=32, wait_ms=5): the container asks for batches of 32.
    asks = [(r, t) for n, r, t in board.calls if n == "FunctionGetInputs"]
    assert {(r.batch_max_size, r.batch_linger_ms) for r, _ in asks} == {(32, 5)}
    assert sorted(len(b) for b in board.batches) == [len(rows) - 32, 32]
    assert definition.batch_max_size == 32
    # Input concurrency: the container runs as many batches at once as the router models
    # (it took the second batch while the first was running).
    slots = container_slots(modal_app.endpoints["embed"])
    assert slots > 1 and {r.input_concurrency for r, _ in asks} == {slots}
    assert asks[1][1] < _first(board, "FunctionPutOutputs")

    names = board.call_names()
    [sample] = fake_modal.state.dict_items(STATS_DICT)[cold_key("embed")]
    assert sample["init_s"] > 0
    assert sample["at"] <= _first(board, "FunctionGetInputs")   # the snap=False hook ran first
    if snapshot:
        # snap=True hook, checkpoint, restore, snap=False hook (it wrote the sample), inputs.
        assert names[:2] == ["ContainerHello", "ContainerCheckpoint"]
        assert _first(board, "ContainerCheckpoint") <= sample["at"]
    else:
        assert "ContainerCheckpoint" not in names
    [artifacts] = definition.volume_mounts
    assert board.commits == [artifacts.volume_id]     # committed on exit, as Modal does


def test_gpu_class_reports_a_failed_start(fake_modal, tmp_path):
    """With no build in the store the snap=True hook raises: the container reports the
    failure as its task result (ArtifactError naming the fix) and asks for no input."""
    deploy_example(fake_modal)
    board = fake_modal.servicer.containers
    box = embed_container(fake_modal, tmp_path, snapshot=True)
    with box:
        assert box.proc.wait(60) == 0
    [result] = board.task_results
    assert "ArtifactError" in result.result.exception
    assert "floodway build" in result.result.exception
    assert "FunctionGetInputs" not in board.call_names()


@pytest.fixture(scope="module")
def engine_only_store(built_store, tmp_path_factory):
    """A store whose latest build of the example can load only through a stand-in TensorRT
    engine (`tests.unit.build.standin_engine`): its ONNX graph moved out of the build for the
    engine's use alone, the optimized graph and the weights left out, so every other path
    of the loader's plan fails."""
    from floodway.build.loader import WEIGHTS_FILE
    from floodway.build.prefetch import ONNX_DATA, ONNX_FILE, OPT_DATA, OPT_FILE
    from floodway.build.store import ArtifactStore

    root = tmp_path_factory.mktemp("engine-only-store")
    shutil.copytree(built_store / "embed", root / "embed", ignore=shutil.ignore_patterns(
        OPT_FILE, OPT_DATA, Path(WEIGHTS_FILE).name))
    build = ArtifactStore(root).latest("embed")
    engine = add_standin_engine(build)
    graph = root / "engine-graph"
    graph.mkdir()
    for name in (ONNX_FILE, ONNX_DATA):
        (build / name).rename(graph / name)
    data = json.dumps({"standin_engine": 1, "onnx": str(graph / ONNX_FILE)}).encode()
    (build / engine).write_bytes(data)
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["artifacts"][engine] = {"bytes": len(data),
                                     "sha256": hashlib.sha256(data).hexdigest()}
    (build / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


@pytest.mark.parametrize("attach_gpu", [True, False], ids=["gpu-attached", "no-gpu"])
def test_gpu_class_opens_the_engine_once_restored_on_a_gpu(fake_modal, engine_only_store,
                                                           local_embeddings, tmp_path,
                                                           attach_gpu):
    """Bug 3: the image has TensorRT, the GPU is attached only at the restore (as on Modal:
    memory snapshots are taken without one). The snap=False hook detects it afresh and opens
    the engine, the build's only loadable path; without the GPU, the start fails, naming
    why each path was not taken."""
    deploy_example(fake_modal)
    board = fake_modal.servicer.containers
    # The stand-in nvidia-smi (first on PATH) sees its GPU only while the path in
    # GPU_WHEN_ENV exists: none before the snapshot, and the restore attaches one.
    path = os.pathsep.join((str(STANDIN_BIN), os.environ.get("PATH", os.defpath)))
    box = embed_container(fake_modal, engine_only_store, snapshot=True,
                          site_paths=[STANDIN_DIR],
                          env={"PATH": path, GPU_WHEN_ENV: str(tmp_path / "no-such-gpu")},
                          restore_env={GPU_WHEN_ENV: str(tmp_path)} if attach_gpu else {})
    ids = box.send("predict", [(t,) for t in TEXTS[:8]])
    with box:
        if not attach_gpu:
            assert box.proc.wait(60) == 0
            [failed] = board.task_results
            why = failed.result.exception
            assert "ArtifactError" in why and "skipped (no CUDA GPU on this machine)" in why, why
            return
        out = box.results(ids, timeout_s=60)
    assert board.task_results == [], box.log()
    assert board.call_names()[:2] == ["ContainerHello", "ContainerCheckpoint"]
    np.testing.assert_allclose(np.array(out), local_embeddings[:8], atol=1e-4)


def test_cron_warmer_changes_the_autoscaler_from_a_container(fake_modal):
    """``warm_cron_0`` as Modal runs it on schedule: in its own container, with the GPU class
    hydrated from the app's layout, it applies the endpoint's target through the current
    autoscaler API (no deprecation warning in its output) and keeps it in floodway-warm."""
    deploy_example(fake_modal)
    box = Container.deployed(fake_modal, APP_NAME, "warm_cron_0")
    with box:
        [[result]] = box.call("", [()], timeout_s=60)
    assert box.returncode == 0 and fake_modal.servicer.containers.task_results == []
    assert result["endpoint"] == "embed" and result["error"] is None and result["called"]
    assert fake_modal.state.updates_for(EMBED) == [result["settings"]]
    assert result["settings"]["min_containers"] in (1, 4)      # off or in the weekday window
    stored = fake_modal.state.dict_items(WARM_DICT)[("applied", APP_NAME, "embed")]
    assert stored["settings"] == result["settings"]
    assert "deprecated" not in box.log().lower()


def test_router_starts_with_its_secret_only(fake_modal):
    """The router's container gets FLOODWAY_API_KEYS from its named Secret alone (nothing of
    the deploying machine's environment reaches it): it builds its app and asks for
    requests. With the keys empty it refuses to start, saying how to set them."""
    deploy_example(fake_modal)
    board = fake_modal.servicer.containers
    with Container.deployed(fake_modal, APP_NAME, "router") as box:
        assert board.wait_until(lambda b: "FunctionGetInputs" in b.call_names(), 60), box.log()
    assert board.task_results == []

    with Container.deployed(fake_modal, APP_NAME, "router", env={"FLOODWAY_API_KEYS": ""}) as box:
        assert box.proc.wait(60) == 0
    [failed] = board.task_results
    assert "FLOODWAY_API_KEYS" in failed.result.exception
    assert "modal secret create" in failed.result.exception
