"""Builds on Modal: one build function per GPU type of an app's endpoints.

    build_function_name("L4") -> "build_l4"
    build_functions(modal_app) -> {endpoint GPU type: build function}
    build_app(modal_app) -> the modal.App holding only the build functions
    run_builds_on_modal(module_app, fw_app)      # `floodway build APP --on-modal`

For each distinct GPU type among the endpoints, one build function (``L4`` -> ``build_l4``,
``H100:2`` -> ``build_h100_2``, CPU -> ``build_cpu``) on that GPU type, because a TensorRT
engine only runs on the compute capability that built it. It runs the same pipeline as
`floodway build` (`build_endpoint`) with the store at the artifact Volume's mount path,
mounted read-write there, then commits the Volume; its image is the serving image plus the
build extras (`floodway.modal.app.images`). ``build(endpoint=None, force=False) ->
list[dict]``: one dict per endpoint built (see `_run_builds`).

The build functions are registered on an App of their own, ``<app>-build``, which the
served App includes (``App.include``: a deploy still carries them). `floodway build
--on-modal` runs that build App alone, ephemerally: only the build functions and the Volume
start, not the GPU classes (whose ``min_containers`` would start them, before any build
exists), the router or the warmers.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import modal

from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.modal.app.images import default_build_image, with_build_extras
from floodway.modal.app.install import install, make_global
from floodway.modal.contract import store_root

# Seconds one build function call may run: a cold build downloads the model and torch-exports.
BUILD_TIMEOUT_S = 3600


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
    root = store_root(artifacts_path)
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


# The modal.App that `to_modal` made -> (itself, the App of its build functions, endpoint
# GPU type -> build function). Keyed by the App object, not its name: importing the deploy
# file again (a second App of the same name) leaves the first one's entry usable.
_BUILD_FUNCTIONS: weakref.WeakKeyDictionary[
    modal.App, tuple[modal.App, modal.App, dict[str | None, modal.Function]]] = \
    weakref.WeakKeyDictionary()


def _made(modal_app: modal.App) -> tuple[modal.App, modal.App, dict[str | None, modal.Function]]:
    made = _BUILD_FUNCTIONS.get(modal_app)
    if made is None:
        raise FloodwayError(f"Modal app {modal_app.name!r} was not made by to_modal in this "
                            f"process; import the deploy file (e.g. modal_app.py) first")
    return made


def build_functions(modal_app: modal.App) -> dict[str | None, modal.Function]:
    """Each endpoint GPU type (``ep.gpu``; None: CPU) of `modal_app` -> its build function.

    `modal_app` must be what `to_modal` returned in this process (e.g. ``modal_app.app``); GPU
    strings that differ only in case share one function. Raises FloodwayError otherwise.
    """
    return dict(_made(modal_app)[2])


def build_app(modal_app: modal.App) -> modal.App:
    """The App holding only `modal_app`'s build functions (named ``<app>-build``; see the
    module doc). Raises FloodwayError as `build_functions` does."""
    return _made(modal_app)[1]


def run_builds_on_modal(module_app: modal.App, fw_app: App, endpoint: str | None = None,
                        force: bool = False) -> list[dict[str, Any]]:
    """`floodway build APP --on-modal`: run the build functions on Modal, one GPU type at a time.

    Needs Modal credentials (it starts an ephemeral run of `build_app(module_app)`, the build
    functions alone, with Modal's output shown). Builds every endpoint of `fw_app`, or just
    `endpoint`, on its own GPU type and returns the build functions' dicts (see
    `_run_builds`), in order. Raises FloodwayError for an unknown `endpoint` before contacting
    Modal.
    """
    functions = build_functions(module_app)
    gpus = [ep.gpu for ep in fw_app] if endpoint is None else [_endpoint(fw_app, endpoint).gpu]
    # One call per build function (GPU strings differing in case share one).
    calls = {build_function_name(gpu): functions[gpu] for gpu in gpus}
    results: list[dict[str, Any]] = []
    with modal.enable_output(), build_app(module_app).run():
        for fn in calls.values():
            results.extend(fn.remote(endpoint=endpoint, force=force))
    return results


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

    make_global(build, name, module)
    fn = app.function(image=image, gpu=gpu, volumes={artifacts_path: volume},
                      timeout=BUILD_TIMEOUT_S, secrets=list(secrets))(build)
    install(module, name, fn)
    return fn


def add_build_functions(app: modal.App, fw_app: App, module: str, *, serving_gpu: bool,
                        user_image: modal.Image | None, build_image: modal.Image | None,
                        volume: modal.Volume, artifacts_path: str,
                        secrets: Sequence[modal.Secret]) -> dict[str | None, modal.Function]:
    """One build function per GPU type of `fw_app` (shared by GPU strings that differ only in
    case), on an App of their own that `app` includes (see the module doc), installed in
    `module`, and recorded for `build_functions` and `build_app`. Its image: `build_image`,
    else `user_image` plus the build extras, else `default_build_image`."""
    builds = modal.App(f"{fw_app.name}-build")
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
            made[fn_name] = _build_function(builds, fw_app, ep.gpu, fn_name, module,
                                            image=fn_image, volume=volume,
                                            artifacts_path=artifacts_path, secrets=secrets)
        by_gpu[ep.gpu] = made[fn_name]
    app.include(builds)
    _BUILD_FUNCTIONS[app] = (app, builds, by_gpu)
    return by_gpu


__all__ = ["BUILD_TIMEOUT_S", "add_build_functions", "build_app", "build_function_name",
           "build_functions", "run_builds_on_modal"]
