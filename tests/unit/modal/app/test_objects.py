"""`to_modal`: the Modal objects generated for modal_app.py, inspected offline (no Modal account).

Settings are read where modal 1.x keeps them before deployment: the public `Function.info()`
(GPU, volumes, batching, concurrency, web info) and, for what only the deploy request carries
(autoscaler settings, memory snapshot), the variables the function's loader closes over.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import modal
import numpy as np
import pytest
from modal._partial_function import (
    _find_partial_methods_for_user_cls,
    _PartialFunctionFlags,
)
from modal._runtime.user_code_imports import (
    _get_cls_or_user_cls,
    import_single_function_service,
)
from modal._utils.async_utils import synchronizer
from modal_proto import api_pb2

import floodway as fw
from floodway.errors import FloodwayError
from floodway.modal.contract import class_name

REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def modal_app():
    """modal_app.py imported as Modal's CLI and containers import it: module ``modal_app``."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("modal_app")


def _impl(obj):
    """The implementation object behind a synchronicity wrapper (modal.Cls -> _Cls, ...)."""
    return synchronizer._translate_in(obj)


def _deploy_settings(function) -> dict:
    """What `modal deploy` would send for `function`, from its loader's closure.

    modal keeps autoscaler settings and `enable_memory_snapshot` only inside the loader that
    builds the FunctionCreate request; offline, its closure is the one place to read them.
    """
    load = _impl(function)._load
    return {name: cell.cell_contents
            for name, cell in zip(load.__code__.co_freevars, load.__closure__, strict=True)}


def _service_function(cls):
    return cls._get_class_service_function()


# ---------------------------------------------------------------- the generated objects

def test_app_and_globals(modal_app):
    assert isinstance(modal_app.app, modal.App)
    assert modal_app.app.name == "floodway-demo"
    assert isinstance(modal_app.Embed, modal.Cls)
    assert isinstance(modal_app.router, modal.Function)


def test_embed_class_settings(modal_app):
    service = _service_function(modal_app.Embed)
    info = service.info()
    assert info.gpus == [("L4", 1)]
    assert info.batching_info.max_batch_size == 32
    assert info.batching_info.wait_ms == 5
    assert info.method_names == ["predict"]
    mount = info.volumes["/artifacts"]
    assert mount.name == "floodway-artifacts"
    assert mount.read_only is True

    deploy = _deploy_settings(service)
    assert deploy["enable_memory_snapshot"] is True
    auto = deploy["autoscaler_settings"]
    assert (auto.min_containers, auto.buffer_containers, auto.scaledown_window,
            auto.max_containers) == (1, 1, 120, 8)
    assert deploy["startup_timeout"] == 300          # Route.start_timeout_s


def test_start_timeout_is_the_class_startup_timeout(tmp_path, monkeypatch):
    app = fw.App("slowstart")
    app.endpoint(model=fw.LocalModel(tmp_path), name="e", gpu="T4",
                 route=fw.Route(start_timeout_s=912.4))(lambda model, inputs: inputs)
    module = _run_in_module(tmp_path, "fw_deploy_slowstart", app, monkeypatch)
    assert _deploy_settings(_service_function(module.E))["startup_timeout"] == 912


def test_class_concurrency_is_what_the_router_models(modal_app):
    """Modal runs at most max_inputs batches at once per container (one input slot fetches
    one batch under @modal.batched); the router's snapshot gives each runner exactly that
    many slots."""
    from floodway.core.snapshot import pipeline_slots
    from floodway.modal.kv import MemoryKV
    from floodway.modal.router.backend import ModalBackend

    ep = modal_app.endpoints["embed"]
    service = _service_function(modal_app.Embed)
    declared = service.info().concurrency_info.max_inputs
    backend = ModalBackend(modal_app.endpoints, {"embed": modal_app.Embed}, stats=MemoryKV())
    (runner,) = backend.snapshot("embed").containers     # min_containers=1, no stats yet
    assert declared == runner.slots == pipeline_slots(ep.route.max_inflight_per_container)
    assert declared == 2                                 # Route(max_inflight_per_container=8)
    assert _deploy_settings(service)["max_concurrent_inputs"] == declared   # what deploy sends


@pytest.mark.parametrize(("inflight", "slots"), [(1, 1), (2, 2), (64, 2)])
def test_class_concurrency_follows_the_route(tmp_path, monkeypatch, inflight, slots):
    from floodway.modal.contract import container_slots

    app = fw.App(f"conc{inflight}")
    app.endpoint(model=fw.LocalModel(tmp_path), name="e", gpu="T4",
                 route=fw.Route(max_inflight_per_container=inflight))(lambda model, inputs: inputs)
    module = _run_in_module(tmp_path, f"fw_deploy_conc{inflight}", app, monkeypatch)
    info = _service_function(module.E).info()
    assert info.concurrency_info.max_inputs == slots == container_slots(app["e"])


def test_gpu_memory_snapshot_option(tmp_path, monkeypatch):
    app = fw.App("gpusnap")
    model = fw.LocalModel(tmp_path)
    app.endpoint(model=model, name="plain", gpu="L4")(lambda model, inputs: inputs)
    app.endpoint(model=model, name="snap", gpu="L4", gpu_memory_snapshot=True)(
        lambda model, inputs: inputs)
    module = _run_in_module(tmp_path, "fw_deploy_gpusnap", app, monkeypatch)
    plain, snap = (_deploy_settings(_service_function(c)) for c in (module.Plain, module.Snap))
    assert snap["experimental_options"] == {"enable_gpu_snapshot": "True"}
    assert plain["experimental_options"] == {}
    assert plain["enable_memory_snapshot"] is snap["enable_memory_snapshot"] is True


def test_gpu_memory_snapshot_is_validated_at_decorator_time(tmp_path):
    app = fw.App("gpusnap-bad")
    with pytest.raises(fw.ConfigError) as info:
        app.endpoint(model=fw.LocalModel(tmp_path), name="cpu-snap",
                     gpu_memory_snapshot=True)(lambda model, inputs: inputs)
    text = str(info.value)
    assert "'cpu-snap'" in text and "gpu_memory_snapshot = True" in text and "gpu=" in text
    with pytest.raises(fw.ConfigError, match="gpu_memory_snapshot = 'yes'"):
        app.endpoint(model=fw.LocalModel(tmp_path), name="odd", gpu="L4",
                     gpu_memory_snapshot="yes")(lambda model, inputs: inputs)
    assert app.endpoints == {}


def test_embed_class_lifecycle_and_batched_method(modal_app):
    cls = _impl(modal_app.Embed)
    params = cls._method_partials["predict"].params
    assert (params.batch_max_size, params.batch_wait_ms) == (32, 5)
    flags = _PartialFunctionFlags
    snap = _find_partial_methods_for_user_cls(cls._user_cls, flags.ENTER_PRE_SNAPSHOT)
    post = _find_partial_methods_for_user_cls(cls._user_cls, flags.ENTER_POST_SNAPSHOT)
    assert list(snap) == ["load"]
    assert list(post) == ["to_gpu"]


def test_router_is_asgi_web_endpoint(modal_app):
    router = _impl(modal_app.router)
    assert router._webhook_config.type == api_pb2.WEBHOOK_TYPE_ASGI_APP
    info = modal_app.router.info()
    assert info.gpus == []                      # a CPU function
    assert info.web_info is not None
    assert info.concurrency_info.max_inputs >= 1
    deploy = _deploy_settings(modal_app.router)
    assert deploy["autoscaler_settings"].min_containers == 1   # embed keeps a GPU warm
    assert deploy["enable_memory_snapshot"] is False


def test_objects_are_found_as_a_container_finds_them(modal_app):
    """Not serialized: the container imports ``modal_app`` and looks each name up there."""
    for fn, impl_name in ((_service_function(modal_app.Embed), "Embed.*"),
                          (modal_app.router, "router")):
        source = _impl(fn)._source_info
        assert not source.is_serialized()
        assert (source.module_name, source.implementation_name) == ("modal_app", impl_name)
    file_def = api_pb2.Function.DEFINITION_TYPE_FILE
    cls_def = api_pb2.Function(module_name="modal_app", implementation_name="Embed.*",
                               definition_type=file_def)
    assert _get_cls_or_user_cls(cls_def, None) is modal_app.Embed
    fn_def = api_pb2.Function(module_name="modal_app", implementation_name="router",
                              definition_type=file_def)
    imported = import_single_function_service(fn_def, None)
    assert imported.app is _impl(modal_app.app)


def test_router_serves_the_http_surface(modal_app, monkeypatch):
    from starlette.testclient import TestClient

    monkeypatch.delenv("FLOODWAY_API_KEYS", raising=False)
    monkeypatch.delenv("FLOODWAY_PUBLIC_ROUTER", raising=False)
    with pytest.raises(FloodwayError, match="public web endpoint"):
        _impl(modal_app.router)._raw_f()        # no keys: refuses to start
    monkeypatch.setenv("FLOODWAY_API_KEYS", "test-key-0123456789")
    asgi = _impl(modal_app.router)._raw_f()
    assert asgi.state.api_keys
    with TestClient(asgi) as client:
        assert client.get("/healthz").status_code == 200
        headers = {"Authorization": "Bearer test-key-0123456789"}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True}   # no key: status
        assert client.get("/metrics").status_code == 401
        detail = client.get("/readyz", headers=headers).json()
        assert (detail["ready"], detail["backend"]) == (True, "modal")
        assert detail["modal"]["embed"]["runners"] is None        # no stats fetched yet
        assert client.post("/v1/embed", json={"inputs": ["x"]}).status_code == 401
        assert client.post("/v1/nope", json={"inputs": ["x"]},
                           headers=headers).status_code == 404
    monkeypatch.delenv("FLOODWAY_API_KEYS")
    monkeypatch.setenv("FLOODWAY_PUBLIC_ROUTER", "1")
    assert not _impl(modal_app.router)._raw_f().state.api_keys


def test_run_job_function(modal_app):
    info = modal_app.run_job.info()
    assert info.gpus == []                      # a CPU function fanning out to the class
    assert _impl(modal_app.run_job)._source_info.implementation_name == "run_job"


# ---------------------------------------------------------------- container-side code, locally

# .local() warns that the Volume is not mounted here; the store comes from FLOODWAY_STORE instead.
@pytest.mark.filterwarnings("ignore:.*mounted Volume:UserWarning")
def test_local_enter_and_predict(modal_app, built_store, monkeypatch):
    monkeypatch.setenv("FLOODWAY_STORE", str(built_store))
    obj = modal_app.Embed()
    out = obj.predict.local(["a first sentence", "and a second, longer one"])
    assert len(out) == 2
    arr = np.asarray(out, dtype=np.float64)
    assert arr.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-5)
    assert obj.hooks_ran == ("snap", "gpu")     # enter(snap=True), then enter(snap=False)
    assert obj.model.backend.startswith("onnxruntime")


def test_import_without_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env["HOME"] = str(tmp_path)                   # no ~/.modal.toml
    env.pop("FLOODWAY_STORE", None)
    code = ("import modal, modal_app; assert isinstance(modal_app.app, modal.App); "
            "assert isinstance(modal_app.Embed, modal.Cls); "
            "assert isinstance(modal_app.router, modal.Function); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_serving_image_installs_what_serving_imports():
    """The Modal image installs `SERVING_PACKAGES` (plus ONNX Runtime and Modal itself), not
    floodway's own dependency list: every module a container or the router imports must come
    from there. Import them with every other declared dependency made unimportable."""
    import tomllib

    from floodway.modal.app.images import SERVING_PACKAGES

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [*meta["dependencies"],
                *(d for ds in meta["optional-dependencies"].values() for d in ds)]
    names = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower().replace("-", "_")
             for d in declared}
    image = {p.lower().replace("-", "_") for p in SERVING_PACKAGES} | {"onnxruntime", "modal"}
    blocked = sorted(names - image - {"onnxruntime_gpu"})
    assert "numba" in blocked and "torch" in blocked       # simulator and build only
    code = f"""
import sys, importlib.abc
import modal                                # installed by Modal in every image, with its deps
BLOCKED = {blocked!r}
class NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed in the serving image")
sys.meta_path.insert(0, NotInImage())
import modal_app
import floodway.http.app, floodway.runtime.worker, floodway.codec, floodway.build.loader
import floodway.modal.router.backend, floodway.modal.warmers.apply, floodway.modal.jobs
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------------- to_modal on other apps

def _run_in_module(folder: Path, name: str, fw_app, monkeypatch, prelude: str = ""):
    """Import a deploy file `name`.py that calls `to_modal` at top level, as Modal's CLI does."""
    path = folder / f"{name}.py"
    path.write_text("from floodway.deploy import to_modal\n" + prelude
                    + "app = to_modal(fw_app)  # noqa: F821\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.fw_app = fw_app                      # what the file would define itself
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _two_endpoint_app(tmp_path) -> fw.App:
    app = fw.App("two")

    @app.endpoint(model=fw.LocalModel(tmp_path))
    def cpu_thing(model, inputs: list[str]) -> list[int]:
        return [len(s) for s in inputs]

    @app.endpoint(model=fw.LocalModel(tmp_path), name="big-model_v2", gpu="A100:2",
                  warm=fw.WarmPool(scaledown_window_s=30.4),
                  batching=fw.Batching(max_batch_rows=4, wait_ms=12.7))
    def other(model, inputs: list[str]) -> list[int]:
        return [0 for _ in inputs]

    return app


def test_names_defaults_and_cpu_endpoint(tmp_path, monkeypatch):
    module = _run_in_module(tmp_path, "fw_deploy_two", _two_endpoint_app(tmp_path),
                            monkeypatch)
    assert isinstance(module.CpuThing, modal.Cls)
    assert isinstance(module.BigModelV2, modal.Cls)
    cpu = _service_function(module.CpuThing)
    assert cpu.info().gpus == []
    auto = _deploy_settings(cpu)["autoscaler_settings"]
    assert (auto.min_containers, auto.buffer_containers, auto.scaledown_window) == (0, 0, 60)
    big = _service_function(module.BigModelV2)
    assert big.info().gpus == [("A100", 2)]
    assert big.info().batching_info.wait_ms == 13          # 12.7 ms, rounded
    assert _deploy_settings(big)["autoscaler_settings"].scaledown_window == 30
    assert _deploy_settings(module.router)["autoscaler_settings"].min_containers == 0
    assert _impl(module.router)._source_info.module_name == "fw_deploy_two"


def test_name_clash_is_reported(tmp_path, monkeypatch):
    with pytest.raises(FloodwayError, match="fw_deploy_clash.router"):
        _run_in_module(tmp_path, "fw_deploy_clash", _two_endpoint_app(tmp_path), monkeypatch,
                       prelude="router = 'mine'\n")


def test_class_name_collision_is_reported(tmp_path, monkeypatch):
    app = fw.App("clash")
    for name in ("a-b", "a_b"):
        app.endpoint(model=fw.LocalModel(tmp_path), name=name)(lambda model, inputs: inputs)
    with pytest.raises(FloodwayError, match="'a-b' and 'a_b' would both become Modal class 'AB'"):
        _run_in_module(tmp_path, "fw_deploy_cls_clash", app, monkeypatch)


def test_class_name():
    assert class_name("embed") == "Embed"
    assert class_name("big-model_v2") == "BigModelV2"


def test_a_second_app_in_one_module_is_refused(tmp_path, monkeypatch):
    """Two `to_modal` calls in one deploy file would bind ``router``, ``run_job`` and the
    classes to the second app's objects, and the first app's containers (which look their
    function up by name) would run the second app's code."""
    first = _two_endpoint_app(tmp_path)
    second = fw.App("another")
    second.endpoint(model=fw.LocalModel(tmp_path), name="cpu_thing")(lambda model, x: x)
    module = _run_in_module(tmp_path, "fw_deploy_twice", first, monkeypatch)
    module.to_modal(first, module="fw_deploy_twice")          # the same app again: fine
    with pytest.raises(FloodwayError, match="already holds the Modal objects of app 'two'"):
        module.to_modal(second, module="fw_deploy_twice")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"router_keys_secret": ""}, "router_keys_secret = ''"),
    ({"router_keys_secret": "team keys"}, "router_keys_secret = 'team keys'"),
    ({"router_keys_secret": "x" * 65}, "router_keys_secret"),
    ({"volume_name": "ap-0123456789abcdefghijkl"}, "volume_name"),
    ({"public_router": True, "router_keys_secret": "team-keys"}, "give one or the other"),
])
def test_names_modal_would_refuse_fail_at_import(tmp_path, monkeypatch, kwargs, match):
    from floodway.deploy import to_modal

    module = _run_in_module(tmp_path, "fw_deploy_names", _two_endpoint_app(tmp_path),
                            monkeypatch)
    with pytest.raises(FloodwayError, match=re.escape(match)):
        to_modal(_two_endpoint_app(tmp_path), module=module.__name__, **kwargs)


def test_an_app_name_modal_would_refuse_fails_at_import(tmp_path, monkeypatch):
    app = fw.App("bad name!")
    app.endpoint(model=fw.LocalModel(tmp_path), name="e")(lambda model, inputs: inputs)
    with pytest.raises(FloodwayError, match=re.escape("the App name (fw.App(...)) = 'bad name!'")):
        _run_in_module(tmp_path, "fw_deploy_bad_app", app, monkeypatch)


def test_the_deployed_buffer_is_capped_as_the_warmers_cap_it(tmp_path, monkeypatch):
    from floodway.modal.warmers.apply import autoscaler_settings
    from floodway.warmers.target import WarmTarget

    app = fw.App("capped")
    app.endpoint(model=fw.LocalModel(tmp_path), name="e", gpu="T4",
                 warm=fw.WarmPool(min_containers=2, buffer_containers=3, max_containers=4))(
        lambda model, inputs: inputs)
    module = _run_in_module(tmp_path, "fw_deploy_capped", app, monkeypatch)
    auto = _deploy_settings(_service_function(module.E))["autoscaler_settings"]
    warmer = autoscaler_settings(WarmTarget(2, 3, 60.0, ""), app["e"])
    assert auto.buffer_containers == warmer["buffer_containers"] == 2     # 2 + 2 <= 4
