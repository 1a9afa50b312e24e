"""`to_modal(fw_app) -> modal.App`: the same endpoints as Modal classes on GPUs, plus a router.

    app = to_modal(endpoints)     # last line of modal_app.py; then `modal deploy modal_app.py`

For each endpoint: a Modal class (named in CamelCase, ``embed`` -> ``Embed``) on the endpoint's
GPU, memory-snapshotted, with the warm pool as its autoscaler settings, the artifact Volume
mounted read-only, and one `@modal.batched` method ``predict(inputs: list) -> list``. Then one
CPU function ``router`` serving `make_asgi_app` (the local router's HTTP surface) with
`ModalBackend` (`floodway.deploy.modal_router`: the same `decide()`, fed by Modal's stats) and
`ModalJobs`, and one CPU function ``run_job(endpoint, inputs) -> outputs`` that async jobs are
spawned on (a class with a batched method may have no other method). Constructing all this is
offline: no Modal token, no network.

Builds on Modal: for each distinct GPU type among the endpoints, one build function
(`build_function_name`: ``L4`` -> ``build_l4``, ``H100:2`` -> ``build_h100_2``, CPU ->
``build_cpu``) on that GPU type, because a TensorRT engine only runs on the compute capability
that built it. It runs the same pipeline as `floodway build` (`build_endpoint`) with the store
at the artifact Volume's mount path, mounted read-write there, then commits the Volume; its image
is the serving image plus the build extras (torch, transformers, ONNX and, on a GPU, TensorRT).
``build(endpoint=None, force=False) -> list[dict]``: one dict per endpoint built (see
`_run_builds`). `build_functions(app)` maps each endpoint GPU type to its build function;
`run_builds_on_modal` runs them (`floodway build APP --on-modal`).

Warm pools over time (`floodway.deploy.modal_warmers`): for each plan entry of `warmer_plan`, a
CPU function (``warm_cron_<i>`` at window edges, ``warm_tick`` every minute for predictive
endpoints) scheduled with ``modal.Cron(cron, timezone=...)`` that re-applies `desired()` through
``update_autoscaler``; the router records per-minute arrivals for them (`ArrivalRecorder`).

Where Modal finds the generated objects in a container: Modal records each class/function as
(module, top-level name) and, in the container, imports that module and looks the name up. So
the objects made here claim the module that called `to_modal` (``modal_app``) and are installed
there as globals; importing that module in the container runs `to_modal` again, which puts them
back. We do not use ``serialized=True`` (cloudpickle): that would tie the container's Python to
the deploying machine's and ship a pickled closure instead of the source that is in git.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import modal

from floodway.deploy.modal_router import (
    ITEM_ERROR,
    JOB_TIMEOUT_S,
    ModalBackend,
    record_cold_start,
)
from floodway.deploy.modal_warmers import WARMER_TIMEOUT_S, warmer_function, warmer_plan
from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint

# The serving path only (no torch): what `floodway.build.loader` and the router import.
SERVING_PACKAGES = (
    "numpy", "tokenizers", "safetensors", "huggingface_hub", "pydantic",
    "starlette", "uvicorn", "httpx", "typer", "rich", "prometheus_client", "croniter", "orjson",
)
PYTHON_VERSION = "3.11"
ROUTER_NAME = "router"
JOB_FUNCTION_NAME = "run_job"
# Requests one router container serves at once; each is mostly awaiting GPU classes.
ROUTER_MAX_INPUTS = 256
# The build extras (pyproject's ``build`` and ``tensorrt`` extras). torch is whichever wheel pip
# resolves on Modal's Linux (the CUDA build); ONNX Runtime GPU is in the same pip command so
# that one resolver picks CUDA/cuDNN libraries both accept.
BUILD_PACKAGES = ("torch>=2.4", "transformers>=4.44", "onnx>=1.16", "onnxscript>=0.1")
GPU_BUILD_PACKAGES = ("tensorrt>=10", "onnxruntime-gpu[cuda,cudnn]>=1.18")
# Seconds one build function call may run: a cold build downloads the model and torch-exports.
BUILD_TIMEOUT_S = 3600


def class_name(endpoint: str) -> str:
    """CamelCase Modal class name of an endpoint: ``embed`` -> ``Embed``, ``a-b_c`` -> ``ABC``."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_]", endpoint) if part)


def default_image(*, gpu: bool = False) -> modal.Image:
    """Debian slim with the serving dependencies and the floodway package (mounted at start).

    With `gpu`, ONNX Runtime's GPU wheel and the CUDA/cuDNN libraries it loads (its
    ``[cuda,cudnn]`` extras, per the ONNX Runtime install docs) replace the CPU wheel; it still
    has the CPU provider, so the router can share the image.
    The module that calls `to_modal` is added by Modal itself (its entrypoint mount).
    """
    return _base_image(gpu=gpu).add_local_python_source("floodway")


def _base_image(*, gpu: bool) -> modal.Image:
    """`default_image` without the floodway source (which Modal wants as the last layer)."""
    ort = "onnxruntime-gpu[cuda,cudnn]" if gpu else "onnxruntime"
    return (modal.Image.debian_slim(python_version=PYTHON_VERSION)
            .pip_install(ort, *SERVING_PACKAGES))


def with_build_extras(image: modal.Image, *, gpu: bool) -> modal.Image:
    """`image` plus what building needs: `BUILD_PACKAGES`, and `GPU_BUILD_PACKAGES` with `gpu`.

    With `gpu`, ONNX Runtime's CPU wheel is removed first (it and the GPU wheel install the same
    ``onnxruntime`` package; a no-op when only the GPU wheel is there). `image` must not end
    in ``add_local_*`` layers unless they use ``copy=True`` (Modal refuses build steps after
    them, when the image is built).
    """
    if gpu:
        image = image.run_commands("python -m pip uninstall -y onnxruntime")
    return image.pip_install(*BUILD_PACKAGES, *(GPU_BUILD_PACKAGES if gpu else ()))


def default_build_image(*, gpu: bool, serving_gpu: bool) -> modal.Image:
    """The build functions' image: the default serving image (`serving_gpu`: its GPU variant)
    plus the build extras (`gpu`: those of a GPU build), then the floodway source."""
    return (with_build_extras(_base_image(gpu=serving_gpu), gpu=gpu)
            .add_local_python_source("floodway"))


def build_function_name(gpu: str | None) -> str:
    """Name of the build function for endpoints on `gpu` (a Modal GPU string, None: CPU).

    ``None`` -> ``build_cpu``, ``L4`` -> ``build_l4``, ``H100:2`` -> ``build_h100_2``,
    ``A100-80GB`` -> ``build_a100_80gb``, ``H100!`` -> ``build_h100_exact``. Case-insensitive,
    as Modal's GPU names are: ``l4`` and ``L4`` share one build function.
    """
    if gpu is None:
        return "build_cpu"
    kind, _, count = gpu.partition(":")
    slug = re.sub(r"[^a-z0-9]+", "_", kind.lower().replace("!", "_exact")).strip("_")
    return f"build_{slug}" + (f"_{count}" if count else "")


def _store_root(artifacts_path: str) -> Path:
    return Path(os.environ.get("FLOODWAY_STORE") or artifacts_path)


def _move_to_cuda(loaded: Any) -> str:
    """Re-create an ONNX Runtime CPU session on CUDA when this container has the CUDA provider.

    Returns the backend now in use (``onnxruntime-cuda``, or the unchanged one). A no-op with
    an image whose ONNX Runtime wheel is CPU-only.
    """
    import onnxruntime as ort

    from floodway.build.loader import ONNX_FILE

    if loaded.backend != "onnxruntime-cpu" \
            or "CUDAExecutionProvider" not in ort.get_available_providers():
        return loaded.backend
    session = ort.InferenceSession(str(Path(loaded.artifact_dir) / ONNX_FILE),
                                   providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        return loaded.backend  # the provider is built in but no device is usable: stay on CPU
    out_names = [o.name for o in session.get_outputs()]

    def runner(feeds):
        return dict(zip(out_names, session.run(out_names, dict(feeds)), strict=True))

    loaded.runner = runner
    loaded.backend = "onnxruntime-cuda"
    return loaded.backend


def _worker_class(ep: Endpoint, artifacts_path: str) -> type:
    """The plain Python class behind an endpoint's Modal class (not yet decorated by the App)."""
    batching = ep.batching

    class Worker:
        model: Any = None
        hooks_ran: tuple[str, ...] = ()
        load_wall: tuple[float, float] = (0.0, 0.0)

        @modal.enter(snap=True)
        def load(self) -> None:
            """Before the memory snapshot: imports and the CPU-side load of the latest build.

            Runs without a GPU; a new build reaches containers on the next `modal deploy`
            (which also retakes the snapshot). Raises ArtifactError when there is no build.
            """
            from floodway.build.loader import load
            from floodway.build.store import ArtifactStore

            w0, t0 = time.time(), time.perf_counter()
            self.model = load(ArtifactStore(_store_root(artifacts_path)).latest(ep.name))
            self.model.timings_s["enter_snap"] = time.perf_counter() - t0
            self.load_wall = (w0, time.time())
            self.hooks_ran = (*self.hooks_ran, "snap")

        @modal.enter(snap=False)
        def to_gpu(self) -> None:
            """After restore, with the GPU attached: move the session to CUDA when possible;
            on Modal, record this start for the router's cold-start estimate."""
            w0, t0 = time.time(), time.perf_counter()
            _move_to_cuda(self.model)
            self.model.timings_s["enter_gpu"] = time.perf_counter() - t0
            self.hooks_ran = (*self.hooks_ran, "gpu")
            if not modal.is_local():
                record_cold_start(ep.name, *self.load_wall, w0, time.time())

        @modal.batched(max_batch_size=batching.max_batch_rows, wait_ms=int(batching.wait_ms))
        def predict(self, inputs: list) -> list:
            """A batch of N input rows -> N outputs, in order (callers send one row each).

            A raising batch is re-run item by item; an item that still raises answers
            ``{ITEM_ERROR: "Type: message"}`` instead of failing every row of its batch.
            """
            from floodway.runtime.worker import run_batch

            done, errors = run_batch(ep.fn, self.model, list(enumerate(inputs)))
            outputs: list[Any] = [None] * len(inputs)
            for i, value in done:
                outputs[i] = value
            for i, message in errors:
                outputs[i] = {ITEM_ERROR: message}
            return outputs

    return Worker


def _endpoint(fw_app: App, name: str) -> Endpoint:
    """`fw_app`'s endpoint `name`; FloodwayError naming the known endpoints when there is none."""
    known = fw_app.endpoints
    if name not in known:
        raise FloodwayError(f"App {fw_app.name!r} has no endpoint {name!r}; known endpoints: "
                            f"{', '.join(sorted(known)) or '(none)'}")
    return known[name]


def _build_targets(fw_app: App, gpu: str | None, endpoint: str | None) -> list[Endpoint]:
    """The endpoints the build function for `gpu` builds: all on that GPU type, or `endpoint`.

    Raises FloodwayError when `endpoint` is not in `fw_app` (naming the ones that are), or runs
    on another GPU type (naming the build function that builds it).
    """
    name = build_function_name(gpu)
    if endpoint is None:
        return [ep for ep in fw_app if build_function_name(ep.gpu) == name]
    ep = _endpoint(fw_app, endpoint)
    if build_function_name(ep.gpu) != name:
        raise FloodwayError(f"endpoint {endpoint!r} runs on {ep.gpu or 'CPU'}, so "
                            f"{build_function_name(ep.gpu)} builds it, not {name}")
    return [ep]


def _run_builds(fw_app: App, gpu: str | None, endpoint: str | None, force: bool,
                commit: Callable[[], Any] | None, *, artifacts_path: str = "/artifacts",
                ) -> list[dict[str, Any]]:
    """The body of a build function: build the endpoints of `fw_app` on `gpu` (or `endpoint`).

    The store is rooted at `artifacts_path` (the Volume's mount path) unless FLOODWAY_STORE is
    set. `commit` (the Volume's ``commit``; None: none) runs once afterwards, also when a build
    failed, so the builds that finished are kept. Returns one dict per endpoint: ``endpoint``,
    ``key`` (build key), ``path`` (its folder, as a string), ``cached`` (True: already built, a
    no-op), ``seconds``, ``skipped`` (stage -> why it did not run). Raises BuildError from the
    pipeline, FloodwayError for an `endpoint` it does not build (see `_build_targets`).
    """
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    targets = _build_targets(fw_app, gpu, endpoint)
    root = _store_root(artifacts_path)
    if commit is not None:
        # Keep the Hub cache on the Volume: a rebuild then neither downloads nor re-fetches.
        os.environ.setdefault("HF_HUB_CACHE", str(root / ".hf-cache"))
    store = ArtifactStore(root)
    out: list[dict[str, Any]] = []
    try:
        for ep in targets:
            def report(stage: str, msg: str, name: str = ep.name) -> None:
                print(f"{name}: {stage}: {msg}", flush=True)

            res = build_endpoint(ep, store, report=report, force=force)
            out.append({"endpoint": res.endpoint, "key": res.key, "path": str(res.path),
                        "cached": res.cached, "seconds": round(res.seconds, 3),
                        "skipped": dict(res.skipped)})
    finally:
        if commit is not None:
            commit()
    return out


# App name -> (the modal.App that `to_modal` made for it, endpoint GPU type -> build function).
# The latest `to_modal` call for a name wins; `build_functions` checks the App is that one.
_BUILD_FUNCTIONS: dict[str, tuple[modal.App, dict[str | None, modal.Function]]] = {}


def build_functions(modal_app: modal.App) -> dict[str | None, modal.Function]:
    """Each endpoint GPU type (``ep.gpu``; None: CPU) of `modal_app` -> its build function.

    `modal_app` must be what `to_modal` returned in this process (e.g. ``modal_app.app``); GPU
    strings that differ only in case share one function. Raises FloodwayError otherwise.
    """
    made = _BUILD_FUNCTIONS.get(modal_app.name or "")
    if made is None or made[0] is not modal_app:
        raise FloodwayError(f"Modal app {modal_app.name!r} was not made by to_modal in this "
                            f"process; import the deploy file (e.g. modal_app.py) first")
    return dict(made[1])


def run_builds_on_modal(module_app: modal.App, fw_app: App, endpoint: str | None = None,
                        force: bool = False) -> list[dict[str, Any]]:
    """`floodway build APP --on-modal`: run the build functions on Modal, one GPU type at a time.

    Needs Modal credentials (it starts an ephemeral run of `module_app`, with Modal's output
    shown). Builds every endpoint of `fw_app`, or just `endpoint`, on its own GPU type and
    returns the build functions' dicts (see `_run_builds`), in order.
    """
    functions = build_functions(module_app)
    gpus = [ep.gpu for ep in fw_app] if endpoint is None else [_endpoint(fw_app, endpoint).gpu]
    # One call per build function (GPU strings differing in case share one).
    calls = {build_function_name(gpu): functions[gpu] for gpu in gpus}
    results: list[dict[str, Any]] = []
    with modal.enable_output(), module_app.run():
        for fn in calls.values():
            results.extend(fn.remote(endpoint=endpoint, force=force))
    return results


def _make_global(obj: Any, name: str, module: str) -> None:
    """Give a factory-made class/function a top-level identity in `module` (see module doc)."""
    obj.__name__ = name
    obj.__qualname__ = name
    obj.__module__ = module


def _install(module: str, name: str, obj: Any) -> None:
    """Bind `obj` as ``module.name`` so a container importing `module` finds it there."""
    namespace = sys.modules[module].__dict__
    existing = namespace.get(name)
    if existing is not None and not isinstance(existing, (modal.Cls, modal.Function)):
        raise FloodwayError(f"to_modal needs the global name {module}.{name} for a Modal object, "
                            f"but it is already bound to {existing!r}; rename it")
    namespace[name] = obj


def to_modal(fw_app: App, *, volume_name: str = "floodway-artifacts",
             artifacts_path: str = "/artifacts", image: modal.Image | None = None,
             build_image: modal.Image | None = None, secrets: Sequence[modal.Secret] = (),
             router_secrets: Sequence[modal.Secret] = (), module: str | None = None,
             ) -> modal.App:
    """Build the Modal App for every endpoint of `fw_app` (see the module doc).

    Call it at the top level of the module that `modal deploy` runs: the generated class per
    endpoint, the ``router`` function, the ``build_*`` functions and the warmers
    (``warm_cron_<i>``, ``warm_tick``; `modal_warmers.warmer_plan`) become globals of that
    module. Raises FloodwayError when one of those names is already taken by something else,
    or two endpoint names map to one class name (``a-b`` and ``a_b``). `module`: the module to
    install into (default: the caller's).

    `image`: the serving image (default `default_image`). `build_image`: the build functions'
    image (default: `default_build_image`, or `image` plus `with_build_extras` when `image` is
    given). `secrets`: given to the build functions only, e.g.
    ``[modal.Secret.from_name("huggingface")]`` providing ``HF_TOKEN`` for gated models.
    `router_secrets`: given to the router, e.g. ``[modal.Secret.from_name("floodway-keys")]``
    providing ``FLOODWAY_API_KEYS``; the router refuses to start without keys unless
    ``FLOODWAY_PUBLIC_ROUTER=1`` is set there too (`modal_router.router_api_keys`).
    """
    if module is None:
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        module = caller.f_globals["__name__"]
    serving_gpu = any(ep.gpu for ep in fw_app)
    user_image = image
    image = image or default_image(gpu=serving_gpu)
    rw_volume = modal.Volume.from_name(volume_name, create_if_missing=True)
    volume = rw_volume.with_mount_options(read_only=True)
    app = modal.App(fw_app.name)
    classes: dict[str, Any] = {}
    for ep in fw_app:
        name = class_name(ep.name)
        taken = [other for other in classes if class_name(other) == name]
        if taken:
            raise FloodwayError(f"endpoints {taken[0]!r} and {ep.name!r} would both become Modal "
                                f"class {name!r}; rename one")
        user_cls = _worker_class(ep, artifacts_path)
        _make_global(user_cls, name, module)
        warm = ep.warm
        cls = app.cls(
            image=image, gpu=ep.gpu, volumes={artifacts_path: volume},
            enable_memory_snapshot=True,
            min_containers=warm.min_containers, buffer_containers=warm.buffer_containers,
            scaledown_window=round(warm.scaledown_window_s), max_containers=warm.max_containers,
        )(user_cls)
        _install(module, user_cls.__name__, cls)
        classes[ep.name] = cls

    async def run_job(endpoint: str, inputs: list) -> list:
        """One async job: its rows through the endpoint's class -> outputs, in order.
        Raises EndpointError naming the first failed row (the job fails)."""
        from floodway.deploy.modal_router import run_job_rows

        return await run_job_rows(ModalBackend(fw_app, classes), endpoint, inputs)

    _make_global(run_job, JOB_FUNCTION_NAME, module)
    job_fn = app.function(image=image, timeout=JOB_TIMEOUT_S)(
        modal.concurrent(max_inputs=ROUTER_MAX_INPUTS)(run_job))
    _install(module, JOB_FUNCTION_NAME, job_fn)

    def router():
        from floodway.deploy.modal_kv import ModalDictKV
        from floodway.deploy.modal_router import ModalJobs, router_api_keys
        from floodway.deploy.modal_warmers import TRAFFIC_DICT, ArrivalRecorder
        from floodway.runtime.http import make_asgi_app

        arrivals = ArrivalRecorder(fw_app.name, ModalDictKV(TRAFFIC_DICT))
        return make_asgi_app(fw_app, ModalBackend(fw_app, classes), jobs=ModalJobs(job_fn),
                             api_keys=router_api_keys(), on_arrival=arrivals.record)

    _make_global(router, ROUTER_NAME, module)
    # Keep a router warm when any endpoint keeps a GPU warm, else the router's cold start
    # would sit in front of the warm GPU.
    router_min = 1 if any(ep.warm.min_containers > 0 for ep in fw_app) else 0
    web = app.function(image=image, min_containers=router_min, secrets=list(router_secrets))(
        modal.concurrent(max_inputs=ROUTER_MAX_INPUTS)(modal.asgi_app()(router)))
    _install(module, ROUTER_NAME, web)

    for spec in warmer_plan(fw_app):
        warmer = warmer_function(fw_app, spec, classes)
        _make_global(warmer, spec.name, module)
        _install(module, spec.name, app.function(
            image=image, timeout=WARMER_TIMEOUT_S,
            schedule=modal.Cron(spec.cron, timezone=spec.timezone))(warmer))

    by_gpu: dict[str | None, modal.Function] = {}
    made: dict[str, modal.Function] = {}
    for ep in fw_app:
        fn_name = build_function_name(ep.gpu)
        if fn_name not in made:
            if build_image is not None:
                fn_image = build_image
            elif user_image is not None:
                fn_image = with_build_extras(user_image, gpu=ep.gpu is not None)
            else:
                fn_image = default_build_image(gpu=ep.gpu is not None, serving_gpu=serving_gpu)
            made[fn_name] = _build_function(app, fw_app, ep.gpu, fn_name, module,
                                            image=fn_image, volume=rw_volume,
                                            artifacts_path=artifacts_path, secrets=secrets)
        by_gpu[ep.gpu] = made[fn_name]
    _BUILD_FUNCTIONS[fw_app.name] = (app, by_gpu)
    return app


def _build_function(app: modal.App, fw_app: App, gpu: str | None, name: str, module: str, *,
                    image: modal.Image, volume: modal.Volume, artifacts_path: str,
                    secrets: Sequence[modal.Secret]) -> modal.Function:
    """The build function `name` for the endpoints on `gpu`, installed as ``module.name``."""

    def build(endpoint: str | None = None, force: bool = False) -> list[dict]:
        """Build the endpoints on this GPU type (or just `endpoint`) into the Volume; commit.

        Returns one dict per endpoint (``endpoint``, ``key``, ``path``, ``cached``,
        ``seconds``, ``skipped``). Run with ``.local()``, it builds here and commits nothing.
        """
        commit = None if modal.is_local() else volume.commit
        return _run_builds(fw_app, gpu, endpoint, force, commit, artifacts_path=artifacts_path)

    _make_global(build, name, module)
    fn = app.function(image=image, gpu=gpu, volumes={artifacts_path: volume},
                      timeout=BUILD_TIMEOUT_S, secrets=list(secrets))(build)
    _install(module, name, fn)
    return fn
