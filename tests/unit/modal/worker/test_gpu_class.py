"""The GPU class's load hooks, offline, with a stand-in TensorRT engine and GPU
(`tests.unit.build.standin_engine`): the build is prepared before the memory snapshot (no GPU
there) and the engine opened in the ``snap=False`` hook, once the GPU is attached; with GPU
memory snapshots, in the ``snap=True`` hook. The hooks are called as Modal's container calls
them, in order, with the GPU attached in between."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from modal._partial_function import _find_partial_methods_for_user_cls, _PartialFunctionFlags

import modal_app
from floodway.modal.worker.gpu_class import worker_class
from tests.unit.build.standin_engine import standin_in_process, store_with_standin_engine

FLAGS = _PartialFunctionFlags
EMBED = modal_app.endpoints["embed"]


@pytest.fixture(scope="module")
def engine_store(built_store, tmp_path_factory):
    return store_with_standin_engine(built_store, tmp_path_factory.mktemp("worker-store"))


@pytest.fixture
def store_env(engine_store, monkeypatch):
    monkeypatch.setenv("FLOODWAY_STORE", str(engine_store))
    return engine_store


class Hooks:
    """One instance of an endpoint's class, its hooks and method called like Modal does."""

    def __init__(self, ep, artifacts_path="/artifacts", **kwargs):
        cls = worker_class(ep, artifacts_path, **kwargs)
        self.obj = cls()
        self._snap = _find_partial_methods_for_user_cls(cls, FLAGS.ENTER_PRE_SNAPSHOT)["load"]
        self._post = _find_partial_methods_for_user_cls(cls, FLAGS.ENTER_POST_SNAPSHOT)["to_gpu"]
        self._predict = _find_partial_methods_for_user_cls(cls, FLAGS.BATCHED)["predict"]

    def before_snapshot(self):
        self._snap.raw_f(self.obj)

    def after_restore(self):
        self._post.raw_f(self.obj)

    def predict(self, rows):
        return self._predict.raw_f(self.obj, rows)


def test_the_engine_is_opened_in_the_gpu_phase(store_env, tmp_path):
    attached = tmp_path / "gpu-attached"
    with standin_in_process(gpu_when=attached) as trt:
        hooks = Hooks(EMBED)
        hooks.before_snapshot()                     # no GPU: Modal's CPU memory snapshot
        assert hooks.obj.model is None, (
            f"snap=True opened {hooks.obj.model.backend} without the GPU")
        assert hooks.obj.prepared is not None and trt.DESERIALIZED == []
        attached.touch()                            # restored onto a GPU machine
        hooks.after_restore()
        assert hooks.obj.model.backend == "tensorrt", hooks.obj.model.path_taken
        assert len(trt.DESERIALIZED) == 1
        assert hooks.obj.hooks_ran == ("snap", "gpu")
        out = np.asarray(hooks.predict(["a first sentence", "and a second one"]))
        assert out.shape == (2, 384) and trt.EXECUTIONS[0] >= 1
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_with_gpu_memory_snapshots_the_engine_is_in_the_snapshot(store_env):
    from floodway.modal.worker.gpu_class import opens_before_snapshot

    ep = dataclasses.replace(EMBED, gpu_memory_snapshot=True)
    assert opens_before_snapshot(ep) and not opens_before_snapshot(EMBED)
    with standin_in_process() as trt:              # the GPU is attached while snap=True runs
        hooks = Hooks(ep)
        hooks.before_snapshot()
        assert hooks.obj.model.backend == "tensorrt"
        assert len(trt.DESERIALIZED) == 1
        hooks.after_restore()                       # restored with its GPU memory: no reload
        assert len(trt.DESERIALIZED) == 1
        assert "enter_snap" in hooks.obj.model.timings_s
        assert len(hooks.predict(["x"])[0]) == 384


def test_hardware_detection_can_be_injected(store_env, tmp_path):
    """`worker_class(hardware=...)` decides what the GPU phase plans for (here an L4 with the
    stand-in's TensorRT, while nvidia-smi finds no GPU)."""
    from floodway.build.hardware import HardwareInfo
    from tests.unit.build.standin_engine import STANDIN_GPU, STANDIN_TRT_VERSION

    l4 = HardwareInfo(gpu_name=STANDIN_GPU[0], compute_capability=STANDIN_GPU[1],
                      tensorrt_version=STANDIN_TRT_VERSION)
    with standin_in_process(gpu_when=tmp_path / "never"):
        hooks = Hooks(EMBED, hardware=lambda: l4)
        hooks.before_snapshot()
        hooks.after_restore()
        assert hooks.obj.model.backend == "tensorrt"
        plain = Hooks(EMBED)
        plain.before_snapshot()
        plain.after_restore()
        assert plain.obj.model.backend == "onnxruntime-cpu"
        assert "no CUDA GPU on this machine" in plain.obj.model.path_taken[0]


def test_a_cpu_endpoint_opens_its_session_before_the_snapshot(store_env):
    ep = dataclasses.replace(EMBED, gpu=None)
    hooks = Hooks(ep)
    hooks.before_snapshot()
    assert hooks.obj.model.backend == "onnxruntime-cpu"
    assert hooks.obj.prepared is None


@pytest.mark.filterwarnings("ignore:.*mounted Volume:UserWarning")
def test_the_generated_class_takes_the_engine_path(store_env):
    """Through the Modal class `to_modal` made (``.local()`` runs both hooks in order)."""
    with standin_in_process():
        obj = modal_app.Embed()
        out = obj.predict.local(["through the generated class"])
        assert len(out) == 1 and len(out[0]) == 384
        assert obj.model.backend == "tensorrt"


def test_predict_from_several_threads_at_once(store_env):
    """With input concurrency, Modal runs a container's batches on threads at once."""
    texts = [f"sentence number {i}" for i in range(8)]
    with standin_in_process():
        hooks = Hooks(EMBED)
        hooks.before_snapshot()
        hooks.after_restore()
        want = np.asarray(hooks.predict(texts))
        got: dict[int, np.ndarray] = {}

        def one(i: int) -> None:
            got[i] = np.asarray(hooks.predict(texts[i:] + texts[:i]))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i in range(8):
        np.testing.assert_allclose(got[i], np.roll(want, -i, axis=0), atol=1e-5)


def test_no_build_fails_clearly(tmp_path, monkeypatch):
    from floodway.errors import ArtifactError

    monkeypatch.setenv("FLOODWAY_STORE", str(tmp_path))
    with pytest.raises(ArtifactError, match="floodway build"):
        Hooks(EMBED).before_snapshot()


# ---------------------------------------------------------------- endpoints with their own runtime

@pytest.fixture(scope="module")
def own_store(tmp_path_factory):
    """A store with `tests.unit.build.own_apps`' endpoints built; (app module, store root)."""
    from floodway.functions.discover import import_target
    from tests.unit.build import own_apps

    root = tmp_path_factory.mktemp("own")
    path = own_apps.app_file(root / "own_modal_app.py", own_apps.source_folder(root / "src"))
    return import_target(str(path)), own_apps.build_all(path, root / "store")


def _own(own_store, monkeypatch, name, **changes):
    module, store = own_store
    monkeypatch.setenv("FLOODWAY_STORE", str(store))
    module.CALLS.clear()
    return module, dataclasses.replace(module.app[name], **changes)


def test_a_gpu_load_hook_runs_after_the_restore_with_its_files_hashed_before(own_store,
                                                                             monkeypatch):
    module, ep = _own(own_store, monkeypatch, "describe", gpu="L4")
    hooks = Hooks(ep)
    hooks.before_snapshot()                 # no GPU yet: only the build is opened and hashed
    assert module.CALLS == [] and hooks.obj.model is None
    assert hooks.obj.artifacts is not None and hooks.obj.artifacts._hashing is None
    hooks.after_restore()                   # the GPU is attached: now the hook runs, once
    assert len(module.CALLS) == 1 and hooks.obj.hooks_ran == ("snap", "gpu")
    assert set(hooks.obj.timings_s) == {"enter_snap", "load_hook", "enter_gpu"}
    assert hooks.predict(["a", "b"])[1].endswith(":b")


@pytest.mark.parametrize("changes", [{"gpu": None}, {"gpu": "L4", "gpu_memory_snapshot": True}])
def test_a_load_hook_runs_before_the_snapshot_where_the_device_is_there(own_store,
                                                                        monkeypatch, changes):
    module, ep = _own(own_store, monkeypatch, "describe", **changes)
    hooks = Hooks(ep)
    hooks.before_snapshot()
    assert len(module.CALLS) == 1 and hooks.obj.model["config"].startswith("{")
    hooks.after_restore()                   # restored with its state: not called again
    assert len(module.CALLS) == 1
    assert hooks.predict(["x"]) == [f"3:{hooks.obj.model['onnxruntime']}:"
                                    f"{'torch' in __import__('sys').modules}:x"]


def test_a_sourceless_endpoint_serves_with_no_model(own_store, monkeypatch):
    _, ep = _own(own_store, monkeypatch, "shout", gpu="L4")
    hooks = Hooks(ep)
    hooks.before_snapshot()
    hooks.after_restore()
    assert hooks.obj.model is None and hooks.obj.opened
    assert hooks.predict(["quiet", "please"]) == ["QUIET", "PLEASE"]
