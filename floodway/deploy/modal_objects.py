"""`to_modal(fw_app) -> modal.App`: the same endpoints as Modal classes on GPUs, plus a router.

    app = to_modal(endpoints)     # last line of modal_app.py; then `modal deploy modal_app.py`

For each endpoint: a Modal class (named in CamelCase, ``embed`` -> ``Embed``) on the endpoint's
GPU, memory-snapshotted, with the warm pool as its autoscaler settings, the artifact Volume
mounted read-only, and one `@modal.batched` method ``predict(inputs: list) -> list``. Then one
CPU function ``router`` serving `make_asgi_app` (the local router's HTTP surface) whose backend
calls those classes. Constructing all this is offline: no Modal token, no network.

Where Modal finds the generated objects in a container: Modal records each class/function as
(module, top-level name) and, in the container, imports that module and looks the name up. So
the objects made here claim the module that called `to_modal` (``modal_app``) and are installed
there as globals; importing that module in the container runs `to_modal` again, which puts them
back. We do not use ``serialized=True`` (cloudpickle): that would tie the container's Python to
the deploying machine's and ship a pickled closure instead of the source that is in git.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import modal

from floodway.errors import EndpointError, FloodwayError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint

# The serving path only (no torch): what `floodway.build.loader` and the router import.
SERVING_PACKAGES = (
    "numpy", "tokenizers", "safetensors", "huggingface_hub", "pydantic",
    "starlette", "uvicorn", "httpx", "typer", "rich", "prometheus_client", "croniter",
)
PYTHON_VERSION = "3.11"
ROUTER_NAME = "router"
# Requests one router container serves at once; each is mostly awaiting GPU classes.
ROUTER_MAX_INPUTS = 256


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
    ort = "onnxruntime-gpu[cuda,cudnn]" if gpu else "onnxruntime"
    return (modal.Image.debian_slim(python_version=PYTHON_VERSION)
            .pip_install(ort, *SERVING_PACKAGES)
            .add_local_python_source("floodway"))


class ModalBackend:
    """The router's `Backend` on Modal: one ``predict.remote.aio`` call per input row.

    `classes` maps endpoint name -> its Modal class. Rows are sent concurrently and
    `@modal.batched` regroups them into batches inside the GPU containers; outputs come back in
    input order. Raises TimeoutError past `timeout_s`, EndpointError when the call fails.
    """

    def __init__(self, classes: dict[str, Any]):
        self._classes = dict(classes)

    async def predict(self, endpoint: str, inputs: list[Any], *, timeout_s: float) -> list[Any]:
        obj = self._classes[endpoint]()
        calls = [obj.predict.remote.aio(item) for item in inputs]
        try:
            # On timeout wait_for cancels the gather, which cancels the pending Modal inputs.
            return list(await asyncio.wait_for(asyncio.gather(*calls), timeout_s))
        except (TimeoutError, modal.exception.TimeoutError) as e:
            raise TimeoutError(f"endpoint {endpoint!r} did not answer within {timeout_s:g} s") \
                from e
        except FloodwayError:
            raise
        except Exception as e:
            raise EndpointError(f"endpoint {endpoint!r} failed on Modal: "
                                f"{type(e).__name__}: {e}") from e

    def readiness(self) -> dict[str, Any]:
        # Modal queues inputs and starts containers on demand, so the router can always accept.
        return {"ready": True, "backend": "modal"}


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

        @modal.enter(snap=True)
        def load(self) -> None:
            """Before the memory snapshot: imports and the CPU-side load of the latest build.

            Runs without a GPU; a new build reaches containers on the next `modal deploy`
            (which also retakes the snapshot). Raises ArtifactError when there is no build.
            """
            from floodway.build.loader import load
            from floodway.build.store import ArtifactStore

            t0 = time.perf_counter()
            self.model = load(ArtifactStore(_store_root(artifacts_path)).latest(ep.name))
            self.model.timings_s["enter_snap"] = time.perf_counter() - t0
            self.hooks_ran = (*self.hooks_ran, "snap")

        @modal.enter(snap=False)
        def to_gpu(self) -> None:
            """After restore, with the GPU attached: move the session to CUDA when possible."""
            t0 = time.perf_counter()
            _move_to_cuda(self.model)
            self.model.timings_s["enter_gpu"] = time.perf_counter() - t0
            self.hooks_ran = (*self.hooks_ran, "gpu")

        @modal.batched(max_batch_size=batching.max_batch_rows, wait_ms=int(batching.wait_ms))
        def predict(self, inputs: list) -> list:
            """A batch of N input rows -> N outputs, in order (callers send one row each)."""
            outputs = ep.fn(self.model, inputs)
            if len(outputs) != len(inputs):
                raise EndpointError(f"endpoint {ep.name!r} returned {len(outputs)} outputs for "
                                    f"{len(inputs)} inputs")
            return outputs

    return Worker


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
             module: str | None = None) -> modal.App:
    """Build the Modal App for every endpoint of `fw_app` (see the module doc).

    Call it at the top level of the module that `modal deploy` runs: the generated class per
    endpoint and the ``router`` function become globals of that module. Raises FloodwayError
    when one of those names is already taken by something else, or two endpoint names map to
    one class name (``a-b`` and ``a_b``). `module`: the module to install into (default: the
    caller's).
    """
    if module is None:
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        module = caller.f_globals["__name__"]
    image = image or default_image(gpu=any(ep.gpu for ep in fw_app))
    volume = modal.Volume.from_name(volume_name, create_if_missing=True) \
        .with_mount_options(read_only=True)
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

    def router():
        from floodway.runtime.http import make_asgi_app

        return make_asgi_app(fw_app, ModalBackend(classes))

    _make_global(router, ROUTER_NAME, module)
    # Keep a router warm when any endpoint keeps a GPU warm, else the router's cold start
    # would sit in front of the warm GPU.
    router_min = 1 if any(ep.warm.min_containers > 0 for ep in fw_app) else 0
    web = app.function(image=image, min_containers=router_min)(
        modal.concurrent(max_inputs=ROUTER_MAX_INPUTS)(modal.asgi_app()(router)))
    _install(module, ROUTER_NAME, web)
    return app
