"""The build functions `to_modal` generates (``build_l4``, ``build_cpu``, ...), offline.

Their settings are read as in test_objects.py: `Function.info()` for GPU, volumes, timeout
and secrets; the image layers from each image's Dockerfile function (what the loader would send
to Modal's builder). Their body runs here through `.local()`, on the store of `built_store`.
Nothing here contacts Modal: `run_builds_on_modal` is only run against stand-ins.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from pathlib import Path

import modal
import pytest
from modal._image import _Image
from modal._utils.async_utils import synchronizer

import floodway as fw
from floodway.build.hardware import detect
from floodway.build.pipeline import compile_skip_reason
from floodway.build.store import LATEST
from floodway.errors import BuildError, FloodwayError
from floodway.modal.app import build, images
from floodway.modal.extra import NO_MODAL_ENV

REPO = Path(__file__).resolve().parents[4]
# Any builder version renders the same commands for the pip/run steps used here.
IMAGE_BUILDER_VERSION = "2025.06"
# .local() warns that the Volume is not mounted here; the store comes from FLOODWAY_STORE instead.
NOT_MOUNTED = "ignore:.*mounted Volume:UserWarning"


@pytest.fixture
def modal_app(monkeypatch):
    """modal_app.py as Modal imports it, with FLOODWAY_NO_MODAL unset (else `app` is None)."""
    monkeypatch.delenv(NO_MODAL_ENV, raising=False)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    module = importlib.import_module("modal_app")
    if module.app is None:               # first imported where FLOODWAY_NO_MODAL was set
        module = importlib.reload(module)
    return module


def _impl(obj):
    return synchronizer._translate_in(obj)


def _image(function) -> _Image:
    return _impl(function)._spec.image


def _image_commands(image: _Image) -> list[str]:
    """Every Dockerfile command of `image` and the images it is built on, base first."""
    out: list[str] = []

    def walk(img: _Image) -> None:
        for dep in img._deps() if img._deps else ():
            if isinstance(dep, _Image):
                walk(dep)
        load = img._load
        cells = {name: cell.cell_contents
                 for name, cell in zip(load.__code__.co_freevars, load.__closure__ or (),
                                       strict=True)}
        if cells.get("dockerfile_function"):
            out.extend(cells["dockerfile_function"](IMAGE_BUILDER_VERSION).commands)

    walk(image)
    return out


def _pip_installs(image: _Image) -> str:
    return "\n".join(c for c in _image_commands(image) if "pip install" in c)


# ---------------------------------------------------------------- names

@pytest.mark.parametrize(("gpu", "name"), [
    (None, "build_cpu"), ("L4", "build_l4"), ("l4", "build_l4"), ("H100:2", "build_h100_2"),
    ("A100-80GB", "build_a100_80gb"), ("H100!", "build_h100_exact"),
    ("A10G:4", "build_a10g_4"),
])
def test_build_function_name(gpu, name):
    assert build.build_function_name(gpu) == name
    assert name.isidentifier()


# ---------------------------------------------------------------- modal_app.py's build_l4

def test_build_l4_settings(modal_app):
    fn = modal_app.build_l4
    assert isinstance(fn, modal.Function)
    info = fn.info()
    assert info.gpus == [("L4", 1)]
    assert info.timeout == build.BUILD_TIMEOUT_S == 3600
    assert info.secrets == []
    mount = info.volumes["/artifacts"]
    assert mount.name == "floodway-artifacts"
    assert mount.read_only is False               # the build writes the Volume
    serving = modal_app.Embed._get_class_service_function()
    assert serving.info().volumes["/artifacts"].read_only is True   # the classes only read it

    source = _impl(fn)._source_info
    assert not source.is_serialized()
    assert (source.module_name, source.implementation_name) == ("modal_app", "build_l4")


def test_build_image_is_serving_image_plus_build_extras(modal_app):
    build, serving = _image(modal_app.build_l4), _image(modal_app.router)
    assert build is not serving
    build_pips, serving_pips = _pip_installs(build), _pip_installs(serving)
    assert serving_pips in build_pips              # the serving layers, then more
    for package in ("torch", "transformers", "onnx>=", "onnxscript", "tensorrt",
                    "onnxruntime-gpu[cuda,cudnn]"):
        assert package in build_pips
    for package in ("torch", "transformers", "tensorrt", "onnxscript", "cuda-python"):
        assert package not in serving_pips


def test_engine_class_image_is_serving_image_plus_tensorrt(modal_app):
    """embed builds engines on its GPU (Build(tensorrt=True), gpu="L4"): its class loads them,
    so its image adds TensorRT (from the build image's own spec, so that the engine's stamp
    matches) and cuda-python; nothing the build alone needs."""
    serving = _pip_installs(_image(modal_app.router))
    engine = _pip_installs(_image(modal_app.Embed._get_class_service_function()))
    assert serving in engine
    assert images.TENSORRT_SERVING_PACKAGES[0] in images.GPU_BUILD_PACKAGES
    for package in images.TENSORRT_SERVING_PACKAGES:
        assert package in engine
    for package in ("torch", "transformers", "onnxscript"):
        assert package not in engine


def test_build_functions_mapping(modal_app):
    assert build.build_functions(modal_app.app) == {"L4": modal_app.build_l4}
    with pytest.raises(FloodwayError, match="not made by to_modal"):
        build.build_functions(modal.App("floodway-demo"))


@pytest.mark.filterwarnings(NOT_MOUNTED)
def test_local_build_is_a_noop_on_a_built_store(modal_app, built_store, monkeypatch):
    monkeypatch.setenv("FLOODWAY_STORE", str(built_store))
    commits: list[object] = []
    monkeypatch.setattr(modal.Volume, "commit", lambda self: commits.append(self))
    out = modal_app.build_l4.local()
    assert [r["endpoint"] for r in out] == ["embed"]
    res = out[0]
    assert set(res) == {"endpoint", "key", "path", "cached", "seconds", "skipped"}
    assert res["cached"] is True
    key = (built_store / "embed" / LATEST).read_text().strip()
    assert res["key"] == key
    assert Path(res["path"]) == built_store / "embed" / key
    reason = compile_skip_reason(modal_app.endpoints["embed"], detect())
    assert res["skipped"] == ({"compile": reason} if reason else {})
    if detect().gpu_name is None:
        assert "compile" in res["skipped"]
    assert commits == []                           # .local(): nothing to commit
    assert modal_app.build_l4.local(endpoint="embed", force=False)[0]["key"] == key


@pytest.mark.filterwarnings(NOT_MOUNTED)
def test_in_a_container_the_build_commits_the_volume(modal_app, built_store, monkeypatch):
    monkeypatch.setenv("FLOODWAY_STORE", str(built_store))
    monkeypatch.setattr(modal, "is_local", lambda: False)
    commits: list[object] = []
    monkeypatch.setattr(modal.Volume, "commit", lambda self: commits.append(self))
    assert modal_app.build_l4.local()[0]["cached"] is True
    assert len(commits) == 1
    mounted = _impl(modal_app.build_l4)._spec.volumes["/artifacts"]
    assert _impl(commits[0]) is mounted             # the read-write handle, not the classes'


@pytest.mark.filterwarnings(NOT_MOUNTED)
def test_unknown_endpoint_names_the_known_ones(modal_app):
    with pytest.raises(FloodwayError, match=r"no endpoint 'nope'; known endpoints: embed"):
        modal_app.build_l4.local(endpoint="nope")


def test_commit_runs_after_a_failed_build(modal_app, monkeypatch, tmp_path):
    import floodway.build.pipeline as pipeline

    def broken(ep, store, **kwargs):
        raise BuildError("export", f"broken for {ep.name}")

    monkeypatch.setattr(pipeline, "build_endpoint", broken)
    monkeypatch.setenv("FLOODWAY_STORE", str(tmp_path))
    commits: list[int] = []
    with pytest.raises(BuildError, match="export"):
        build._run_builds(modal_app.endpoints, "L4", None, False, lambda: commits.append(1))
    assert commits == [1]


def test_store_defaults_to_the_mount_path(modal_app, monkeypatch, tmp_path):
    import floodway.build.pipeline as pipeline

    seen: list[Path] = []

    def record(ep, store, **kwargs):
        seen.append(store.root)
        return pipeline.BuildResult(ep.name, "k", store.root / ep.name / "k", True, 0.01)

    monkeypatch.setattr(pipeline, "build_endpoint", record)
    monkeypatch.delenv("FLOODWAY_STORE", raising=False)
    out = build._run_builds(modal_app.endpoints, "L4", None, True, None,
                         artifacts_path=str(tmp_path / "mnt"))
    assert seen == [tmp_path / "mnt"]
    assert out == [{"endpoint": "embed", "key": "k", "path": str(tmp_path / "mnt" / "embed" / "k"),
                    "cached": True, "seconds": 0.01, "skipped": {}}]


# ---------------------------------------------------------------- other apps

def _run_in_module(folder: Path, name: str, fw_app, monkeypatch, prelude: str = "",
                   args: str = ""):
    """Import a deploy file `name`.py that calls `to_modal` at top level, as Modal's CLI does."""
    monkeypatch.delenv(NO_MODAL_ENV, raising=False)
    path = folder / f"{name}.py"
    path.write_text("import modal\nfrom floodway.deploy import to_modal\n" + prelude
                    + f"app = to_modal(fw_app{args})  # noqa: F821\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.fw_app = fw_app
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _three_endpoint_app(tmp_path) -> fw.App:
    app = fw.App("three")
    for name, gpu in (("cpu-thing", None), ("big", "A100:2"), ("also-big", "a100:2")):
        app.endpoint(model=fw.LocalModel(tmp_path), name=name, gpu=gpu)(
            lambda model, inputs: inputs)
    return app


def test_one_build_function_per_gpu_type(tmp_path, monkeypatch):
    fw_app = _three_endpoint_app(tmp_path)
    module = _run_in_module(tmp_path, "fw_build_three", fw_app, monkeypatch,
                            args=", secrets=[modal.Secret.from_dict({'HF_TOKEN': 'x'})]")
    assert build.build_functions(module.app) == {None: module.build_cpu,
                                                 "A100:2": module.build_a100_2,
                                                 "a100:2": module.build_a100_2}
    cpu, big = module.build_cpu.info(), module.build_a100_2.info()
    assert cpu.gpus == [] and big.gpus == [("A100", 2)]
    assert len(cpu.secrets) == len(big.secrets) == 1
    # The token is for builds only: the router has just its keys Secret.
    assert module.router.info().secrets == ["modal.Secret.from_name('floodway-router-keys')"]
    assert not cpu.volumes["/artifacts"].read_only
    cpu_pips = _pip_installs(_image(module.build_cpu))
    assert "torch" in cpu_pips and "tensorrt" not in cpu_pips
    assert "tensorrt" in _pip_installs(_image(module.build_a100_2))
    assert [ep.name for ep in build._build_targets(fw_app, "A100:2", None)] == ["big", "also-big"]
    assert [ep.name for ep in build._build_targets(fw_app, None, None)] == ["cpu-thing"]


@pytest.mark.filterwarnings(NOT_MOUNTED)
def test_endpoint_on_another_gpu_type_is_refused(tmp_path, monkeypatch):
    module = _run_in_module(tmp_path, "fw_build_other", _three_endpoint_app(tmp_path),
                            monkeypatch)
    with pytest.raises(FloodwayError, match="'big' runs on A100:2, so build_a100_2 builds it"):
        module.build_cpu.local(endpoint="big")


def test_build_image_and_user_image(tmp_path, monkeypatch):
    prelude = ("serve_img = modal.Image.debian_slim().pip_install('floodway-serving-marker')\n"
               "build_img = modal.Image.debian_slim().pip_install('floodway-build-marker')\n")
    given = _run_in_module(tmp_path, "fw_build_given", _three_endpoint_app(tmp_path),
                           monkeypatch, prelude=prelude,
                           args=", image=serve_img, build_image=build_img")
    assert _image(given.build_cpu) is _impl(given.build_img)
    assert _image(given.build_a100_2) is _impl(given.build_img)
    extended = _run_in_module(tmp_path, "fw_build_extended", _three_endpoint_app(tmp_path),
                              monkeypatch, prelude=prelude, args=", image=serve_img")
    commands = _image_commands(_image(extended.build_a100_2))
    assert "python -m pip uninstall -y onnxruntime" in " ".join(commands)
    pips = _pip_installs(_image(extended.build_a100_2))
    assert "floodway-serving-marker" in pips and "tensorrt" in pips


def test_build_name_clash_is_reported(tmp_path, monkeypatch):
    with pytest.raises(FloodwayError, match="fw_build_clash.build_cpu"):
        _run_in_module(tmp_path, "fw_build_clash", _three_endpoint_app(tmp_path), monkeypatch,
                       prelude="build_cpu = 'mine'\n")


# ---------------------------------------------------------------- run_builds_on_modal (stand-ins)

class _FakeFunction:
    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def remote(self, **kwargs):
        self.calls.append((self.name, kwargs))
        return [{"endpoint": self.name}]


class _FakeApp:
    name = "three"

    def __init__(self):
        self.runs = 0

    @contextlib.contextmanager
    def run(self):
        self.runs += 1
        yield self


def test_run_builds_on_modal_calls_each_build_function_once(tmp_path, monkeypatch):
    fw_app = _three_endpoint_app(tmp_path)
    calls: list = []
    cpu, big = _FakeFunction("build_cpu", calls), _FakeFunction("build_a100_2", calls)
    fake, builds = _FakeApp(), _FakeApp()
    monkeypatch.setitem(build._BUILD_FUNCTIONS, fake,
                        (fake, builds, {None: cpu, "A100:2": big, "a100:2": big}))
    monkeypatch.setattr(modal, "enable_output", contextlib.nullcontext)
    out = build.run_builds_on_modal(fake, fw_app, None, True)
    assert calls == [("build_cpu", {"endpoint": None, "force": True}),
                     ("build_a100_2", {"endpoint": None, "force": True})]
    assert out == [{"endpoint": "build_cpu"}, {"endpoint": "build_a100_2"}]
    assert (fake.runs, builds.runs) == (0, 1)       # the build App alone, once
    calls.clear()
    build.run_builds_on_modal(fake, fw_app, "also-big", False)
    assert calls == [("build_a100_2", {"endpoint": "also-big", "force": False})]


def test_run_builds_on_modal_checks_the_endpoint_before_contacting_modal(modal_app, monkeypatch):
    def no_modal():
        raise AssertionError("contacted Modal")

    monkeypatch.setattr(modal, "enable_output", no_modal)
    with pytest.raises(FloodwayError, match="known endpoints: embed"):
        build.run_builds_on_modal(modal_app.app, modal_app.endpoints, "nope", False)


def test_on_modal_runs_only_the_build_functions(modal_app, monkeypatch):
    """`floodway build --on-modal` runs an App holding the build functions (and through them
    the Volume) alone: no GPU class, whose min_containers would start it before any build
    exists, no router, no warmers. The served App still carries the build functions."""
    ran: list = []
    calls: list = []

    @contextlib.contextmanager
    def run(self, *args, **kwargs):
        ran.append(self)
        yield self

    monkeypatch.setattr(modal.App, "run", run)
    monkeypatch.setattr(modal, "enable_output", contextlib.nullcontext)
    monkeypatch.setattr(modal.Function, "remote",
                        lambda self, **kw: calls.append((_impl(self)._tag_, kw)) or [])
    assert build.run_builds_on_modal(modal_app.app, modal_app.endpoints, None, False) == []
    (app,) = ran
    assert app is not modal_app.app and app is build.build_app(modal_app.app)
    assert calls == [("build_l4", {"endpoint": None, "force": False})]
    state = _impl(app)._local_state
    assert state.classes == {} and state.web_endpoints == []
    assert set(state.functions) == {"build_l4"}
    for fn in state.functions.values():
        assert (_deploy_settings(fn)["min_containers"] or 0) == 0
        assert _deploy_settings(fn)["schedule"] is None
        assert "/artifacts" in fn._spec.volumes
    served = _impl(modal_app.app)._local_state.functions
    assert served["build_l4"] is _impl(modal_app.build_l4) and "Embed.*" in served


def _deploy_settings(function) -> dict:
    load = _impl(function)._load
    return {name: cell.cell_contents
            for name, cell in zip(load.__code__.co_freevars, load.__closure__, strict=True)}


def test_a_second_import_of_the_deploy_file_leaves_the_first_app_usable(modal_app):
    """Two Apps of one name (the deploy file imported again, as a fresh Modal container or a
    test does): each keeps its own build functions and router Secret."""
    from floodway.modal import deploy

    first = modal_app.app
    again = importlib.reload(modal_app)
    assert again.app is not first and again.app.name == first.name
    assert set(build.build_functions(first)) == set(build.build_functions(again.app)) == {"L4"}
    assert deploy.router_keys_secret(first) == deploy.router_keys_secret(again.app) \
        == "floodway-router-keys"
