"""The container images of a floodway app on Modal.

    default_image(gpu=)                    # the serving image: classes, router, warmers
    default_image(gpu=True, tensorrt=True) # a GPU class whose build made TensorRT engines
    default_build_image(gpu=, serving_gpu=)   # the build functions' image
    with_build_extras(image, gpu=)         # a user's image plus what building needs

The serving image holds the serving path only (`SERVING_PACKAGES`: no torch, which costs
seconds of cold start); a GPU class whose endpoint builds engines (``Build(tensorrt=True)``)
also gets TensorRT and the CUDA runtime bindings that run them (`TENSORRT_SERVING_PACKAGES`);
the build image adds the build extras (torch, transformers, ONNX and, on a GPU, TensorRT).
An engine only loads under the TensorRT version that built it, so both images install
TensorRT from the one spec, `TENSORRT_PACKAGE`. The floodway source is the last layer (Modal
refuses build steps after ``add_local_*`` layers).
"""

from __future__ import annotations

import modal

# The serving path only (no torch): what `floodway.build.loader` and the router import.
SERVING_PACKAGES = (
    "numpy", "tokenizers", "safetensors", "huggingface_hub", "pydantic",
    "starlette", "uvicorn", "httpx", "typer", "rich", "prometheus_client", "croniter", "orjson",
    "pillow", "jinja2",
)
PYTHON_VERSION = "3.11"
# The build extras (pyproject's ``build`` and ``tensorrt`` extras). torch is whichever wheel pip
# resolves on Modal's Linux (the CUDA build); ONNX Runtime GPU is in the same pip command so
# that one resolver picks CUDA/cuDNN libraries both accept.
BUILD_PACKAGES = ("torch>=2.4", "transformers>=4.44", "onnx>=1.16", "onnxscript>=0.1")
# pyproject's ``tensorrt`` extra: the engines' builder and runtime.
TENSORRT_PACKAGE = "tensorrt>=10"
GPU_BUILD_PACKAGES = (TENSORRT_PACKAGE, "onnxruntime-gpu[cuda,cudnn]>=1.18")
# Running an engine (`floodway.build.trt.engine_runner`): TensorRT, and device memory through
# cuda-python's ``cuda.bindings.runtime`` (which cuda-python 12.6 introduced).
TENSORRT_SERVING_PACKAGES = (TENSORRT_PACKAGE, "cuda-python>=12.6")


def default_image(*, gpu: bool = False, tensorrt: bool = False) -> modal.Image:
    """Debian slim with the serving dependencies and the floodway package (mounted at start).

    With `gpu`, ONNX Runtime's GPU wheel and the CUDA/cuDNN libraries it loads (its
    ``[cuda,cudnn]`` extras, per the ONNX Runtime install docs) replace the CPU wheel; it still
    has the CPU provider, so the router can share the image. With `tensorrt` too,
    `TENSORRT_SERVING_PACKAGES` on top (for the GPU classes of endpoints that build engines;
    the router does not need them). The module that calls `to_modal` is added by Modal itself
    (its entrypoint mount).
    """
    image = _base_image(gpu=gpu)
    if gpu and tensorrt:
        image = image.pip_install(*TENSORRT_SERVING_PACKAGES)
    return image.add_local_python_source("floodway")


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


__all__ = ["BUILD_PACKAGES", "GPU_BUILD_PACKAGES", "PYTHON_VERSION", "SERVING_PACKAGES",
           "TENSORRT_PACKAGE", "TENSORRT_SERVING_PACKAGES", "default_build_image",
           "default_image", "with_build_extras"]
