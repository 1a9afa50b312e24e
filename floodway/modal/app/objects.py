"""`to_modal(fw_app) -> modal.App`: the same endpoints as Modal classes on GPUs, plus a router.

    app = to_modal(endpoints)     # last line of modal_app.py; then `modal deploy modal_app.py`

For each endpoint: a Modal class (named in CamelCase, ``embed`` -> ``Embed``) on the endpoint's
GPU (an endpoint with `Route.lanes`: one class per lane, ``embed:short`` -> ``EmbedShort``,
each with the lane's own autoscaler bounds, input queue and concurrency, so a short request
never waits in one Modal input queue behind long ones; every lane runs the endpoint's
build), memory-snapshotted (and its GPU memory too with ``gpu_memory_snapshot=True``:
``experimental_options={"enable_gpu_snapshot": True}``), with the warm pool as its autoscaler
settings, ``@modal.concurrent(max_inputs=container_slots(ep))`` as its input concurrency (the
batches one container runs at once, which `ModalBackend` models exactly), the artifact Volume
mounted read-only, and one `@modal.batched` method ``predict(inputs: list) -> list``
(a streaming endpoint: the generator method ``stream(item)`` instead, its input concurrency
``Generation.max_sequences``; `floodway.modal.worker.stream`) (`floodway.modal.worker.
gpu_class`: the build is prepared before the memory snapshot and its backend opened where
the GPU is attached). Its image is the serving image, plus TensorRT when
the endpoint's build makes engines on a GPU (unless an `image` is given: that one is used as
it is). Then one CPU function ``router`` serving
`make_asgi_app` (the local router's HTTP surface) with `ModalBackend`
(`floodway.modal.router.backend`: the same `decide()`, fed by Modal's stats) and `ModalJobs`,
reading its API keys from the named Secret ``floodway-router-keys`` (a deploy fails while
it is missing; or public, with ``public_router=True``), with the artifact Volume mounted
read-only for the response cache's build keys and the ``floodway-cache`` Dict as its shared
tier when an endpoint asks (`floodway.modal.router.cache`), and one CPU function
``run_job(endpoint, inputs) -> outputs`` that async jobs are spawned on (a class with a
batched method may have no other method).
Constructing all this is offline: no Modal token, no network.

Builds on Modal (`floodway.modal.app.build`): one build function per GPU type
(``build_l4``, ``build_cpu``, ...) running the `floodway build` pipeline into the Volume, on
an App of their own that this App includes; `build_functions(app)` maps each endpoint GPU type
to its build function; `run_builds_on_modal` runs the build App alone (`floodway build APP
--on-modal`). Images: `floodway.modal.app.images`.

Warm pools over time (`floodway.modal.warmers`): for each plan entry of `warmer_plan`, a
CPU function (``warm_cron_<i>`` at window edges, ``warm_tick`` every minute for predictive
endpoints) scheduled with ``modal.Cron(cron, timezone=...)`` that re-applies `desired()` through
the autoscaler (`floodway.modal.autoscaler.update_class_autoscaler`); the router records
per-minute arrivals for them (`ArrivalRecorder`).

Every generated object becomes a global of the module that called `to_modal`, where Modal
looks it up in a container (`floodway.modal.app.install`).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Sequence
from typing import Any

import modal

from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.functions.lanes import served_units
from floodway.modal.app.build import add_build_functions
from floodway.modal.app.images import default_image
from floodway.modal.app.install import claim, install, make_global
from floodway.modal.contract import class_name, container_slots
from floodway.modal.deploy import ROUTER_KEYS_SECRET, record_router_keys
from floodway.modal.jobs import JOB_TIMEOUT_S, run_job_rows
from floodway.modal.router.backend import PUBLIC_ROUTER_ENV, ModalBackend
from floodway.modal.warmers.apply import WARMER_TIMEOUT_S, capped_buffer, warmer_function
from floodway.modal.warmers.plan import warmer_plan
from floodway.modal.worker.gpu_class import worker_class
from floodway.routers.admission import API_KEYS_ENV

ROUTER_NAME = "router"
JOB_FUNCTION_NAME = "run_job"
# Requests one router container serves at once; each is mostly awaiting GPU classes.
ROUTER_MAX_INPUTS = 256


def to_modal(fw_app: App, *, volume_name: str = "floodway-artifacts",
             artifacts_path: str = "/artifacts", image: modal.Image | None = None,
             build_image: modal.Image | None = None, secrets: Sequence[modal.Secret] = (),
             router_secrets: Sequence[modal.Secret] = (),
             router_keys_secret: str | None = ROUTER_KEYS_SECRET, public_router: bool = False,
             module: str | None = None) -> modal.App:
    """Build the Modal App for every endpoint of `fw_app` (see the module doc).

    Call it at the top level of the module that `modal deploy` runs: the generated class per
    endpoint, the ``router`` function, the ``build_*`` functions and the warmers
    (``warm_cron_<i>``, ``warm_tick``; `warmer_plan`) become globals of that
    module. Raises FloodwayError when one of those names is already taken by something else,
    or two endpoint names (or lanes) map to one class name (``a-b`` and ``a_b``; an endpoint
    ``embed_short`` and the lane ``short`` of ``embed``). `module`: the module to
    install into (default: the caller's).

    `image`: the serving image of every function and class (default `default_image`, with
    `TENSORRT_SERVING_PACKAGES` for the classes whose builds make engines; a given image must
    hold those itself). `build_image`: the build functions' image (default:
    `default_build_image`, or `image` plus `with_build_extras` when `image` is given).
    `secrets`: given to the build functions only, e.g.
    ``[modal.Secret.from_name("huggingface")]`` providing ``HF_TOKEN`` for gated models.

    The router refuses to start without API keys (`router_api_keys`), so it gets
    the named Secret `router_keys_secret` (default ``floodway-router-keys``) holding
    ``FLOODWAY_API_KEYS``: a deploy fails while that Secret does not exist (Modal answers
    NOT_FOUND), and `floodway deploy` checks it first and says how to create it. None: no
    named Secret (give the keys through `router_secrets`). `public_router=True`: serve without
    authentication instead (``FLOODWAY_PUBLIC_ROUTER=1`` in the router; no keys Secret).
    `router_secrets`: more Secrets for the router.
    """
    if module is None:
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        module = caller.f_globals["__name__"]
    _check_names(fw_app, volume_name, router_keys_secret, public_router)
    claim(module, fw_app.name)
    serving_gpu = any(ep.gpu for ep in fw_app)
    serving_image = image or default_image(gpu=serving_gpu)
    rw_volume = modal.Volume.from_name(volume_name, create_if_missing=True)
    app = modal.App(fw_app.name)
    classes = _add_classes(app, fw_app, module, image, serving_image,
                           rw_volume.with_mount_options(read_only=True), artifacts_path)
    job_fn = _add_job_function(app, fw_app, module, serving_image, classes)
    keys_secret = None if public_router else router_keys_secret
    _add_router(app, fw_app, module, serving_image, classes, job_fn,
                _router_secrets(keys_secret, public_router, router_secrets),
                rw_volume.with_mount_options(read_only=True), artifacts_path)
    record_router_keys(app, keys_secret)
    for spec in warmer_plan(fw_app):
        warmer = warmer_function(fw_app, spec, classes)
        make_global(warmer, spec.name, module)
        install(module, spec.name, app.function(
            image=serving_image, timeout=WARMER_TIMEOUT_S,
            schedule=modal.Cron(spec.cron, timezone=spec.timezone))(warmer))
    add_build_functions(app, fw_app, module, serving_gpu=serving_gpu, user_image=image,
                        build_image=build_image, volume=rw_volume,
                        artifacts_path=artifacts_path, secrets=secrets)
    return app


def _router_secrets(keys_secret: str | None, public_router: bool,
                    extra: Sequence[modal.Secret]) -> list[modal.Secret]:
    """The router's Secrets: the named keys Secret (its ``FLOODWAY_API_KEYS`` required, so a
    deploy without it fails at once), or the public flag, then `extra`."""
    out: list[modal.Secret] = []
    if public_router:
        out.append(modal.Secret.from_dict({PUBLIC_ROUTER_ENV: "1"}))
    elif keys_secret is not None:
        out.append(modal.Secret.from_name(keys_secret, required_keys=[API_KEYS_ENV]))
    return [*out, *extra]


def class_options(ep: Endpoint) -> dict[str, Any]:
    """The ``app.cls`` settings of an endpoint's class besides image and volumes: GPU, memory
    snapshots, the warm pool as autoscaler settings (see the module doc). A lane's class
    (`ep` a lane's endpoint, `served_units`): the lane's ``min_containers`` /
    ``max_containers``, its buffer capped to them."""
    warm = ep.warm
    return {
        "gpu": ep.gpu, "enable_memory_snapshot": True,
        "experimental_options": {"enable_gpu_snapshot": True} if ep.gpu_memory_snapshot
        else None,
        "min_containers": warm.min_containers,
        "buffer_containers": capped_buffer(ep, warm.min_containers),
        "scaledown_window": round(warm.scaledown_window_s),
        "max_containers": warm.max_containers,
        "startup_timeout": round(ep.route.start_timeout_s),
    }


def _add_classes(app: modal.App, fw_app: App, module: str, user_image: modal.Image | None,
                 serving_image: modal.Image, volume: modal.Volume, artifacts_path: str,
                 ) -> dict[str, Any]:
    """One Modal class per unit (see the module doc): per endpoint, or per lane of an
    endpoint with `Route.lanes` (`served_units`: the lane's endpoint, with its own warm-pool
    bounds, runs the endpoint's build), installed in `module`; unit key -> class. Raises
    FloodwayError when two units map to one class name."""
    classes: dict[str, Any] = {}
    engine_image: modal.Image | None = None
    for unit, ep in served_units(fw_app).items():
        name = class_name(unit)
        taken = [other for other in classes if class_name(other) == name]
        if taken:
            raise FloodwayError(f"endpoints {taken[0]!r} and {unit!r} would both become Modal "
                                f"class {name!r}; rename one")
        image = serving_image
        if user_image is None and ep.gpu and ep.build.tensorrt:
            engine_image = engine_image or default_image(gpu=True, tensorrt=True)
            image = engine_image
        user_cls = worker_class(ep, artifacts_path)
        make_global(user_cls, name, module)
        cls = app.cls(image=image, volumes={artifacts_path: volume}, **class_options(ep))(
            modal.concurrent(max_inputs=container_slots(ep))(user_cls))
        install(module, user_cls.__name__, cls)
        classes[unit] = cls
    return classes


# Modal's rule for App, Secret, Volume and Dict names (modal._utils.name_utils
# ``is_valid_object_name``): checked here so a bad name fails when the deploy file is
# imported, with the option named, not halfway through a deploy.
_OBJECT_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_APP_ID = re.compile(r"^ap-[A-Za-z0-9]{22}$")


def _check_names(fw_app: App, volume_name: str, router_keys_secret: str | None,
                 public_router: bool) -> None:
    """Raise FloodwayError naming the option when a name Modal would refuse is given, or a
    keys Secret other than the default is given together with ``public_router=True``."""
    for what, name in (("the App name (fw.App(...))", fw_app.name),
                       ("volume_name", volume_name), ("router_keys_secret", router_keys_secret)):
        if name is not None and (not isinstance(name, str) or not _OBJECT_NAME.match(name)
                                 or _APP_ID.match(name)):
            raise FloodwayError(f"to_modal: {what} = {name!r} is not a name Modal accepts: "
                                f"1-64 letters, digits, '-', '_' or '.'")
    if public_router and router_keys_secret not in (None, ROUTER_KEYS_SECRET):
        raise FloodwayError(f"to_modal: public_router=True serves without keys, but "
                            f"router_keys_secret={router_keys_secret!r} asks for them; "
                            f"give one or the other")


def _add_job_function(app: modal.App, fw_app: App, module: str, image: modal.Image,
                      classes: dict[str, Any]) -> modal.Function:
    """The ``run_job`` CPU function that async jobs are spawned on, installed in `module`."""

    async def run_job(endpoint: str, inputs: list) -> list:
        """One async job: its rows through the endpoint's class -> outputs, in order.
        Raises EndpointError naming the first failed row (the job fails)."""
        return await run_job_rows(ModalBackend(fw_app, classes), endpoint, inputs)

    make_global(run_job, JOB_FUNCTION_NAME, module)
    job_fn = app.function(image=image, timeout=JOB_TIMEOUT_S)(
        modal.concurrent(max_inputs=ROUTER_MAX_INPUTS)(run_job))
    install(module, JOB_FUNCTION_NAME, job_fn)
    return job_fn


def _add_router(app: modal.App, fw_app: App, module: str, image: modal.Image,
                classes: dict[str, Any], job_fn: modal.Function,
                router_secrets: Sequence[modal.Secret], volume: modal.Volume,
                artifacts_path: str) -> None:
    """The ``router`` web endpoint (`make_asgi_app` over `ModalBackend` and `ModalJobs`),
    installed in `module`; the artifact Volume mounted read-only, where the response cache
    reads the build keys (`floodway.modal.router.cache`)."""

    def router():
        from floodway.http.app import make_asgi_app
        from floodway.modal.contract import store_root
        from floodway.modal.jobs import ModalJobs
        from floodway.modal.kv import ModalDictKV
        from floodway.modal.router.backend import router_api_keys
        from floodway.modal.router.cache import DeployedBuilds, shared_cache
        from floodway.modal.traffic import TRAFFIC_DICT, ArrivalRecorder

        arrivals = ArrivalRecorder(fw_app.name, ModalDictKV(TRAFFIC_DICT))
        builds = DeployedBuilds(store_root(artifacts_path))
        backend = ModalBackend(fw_app, classes, store=store_root(artifacts_path))
        return make_asgi_app(fw_app, backend, jobs=ModalJobs(job_fn),
                             api_keys=router_api_keys(), on_arrival=arrivals.record,
                             build_key=builds.key, shared_cache=shared_cache(fw_app),
                             # /metrics and /readyz's detail behind a key unless a router
                             # secret sets FLOODWAY_PRIVATE_DETAIL=0: the router is public.
                             private_detail=os.environ.get("FLOODWAY_PRIVATE_DETAIL") != "0")

    make_global(router, ROUTER_NAME, module)
    # Keep a router warm when any endpoint keeps a GPU warm, else the router's cold start
    # would sit in front of the warm GPU.
    router_min = 1 if any(ep.warm.min_containers > 0
                          for ep in served_units(fw_app).values()) else 0
    web = app.function(image=image, min_containers=router_min, secrets=list(router_secrets),
                       volumes={artifacts_path: volume})(
        modal.concurrent(max_inputs=ROUTER_MAX_INPUTS)(modal.asgi_app()(router)))
    install(module, ROUTER_NAME, web)


__all__ = ["JOB_FUNCTION_NAME", "ROUTER_MAX_INPUTS", "ROUTER_NAME", "class_options", "to_modal"]
