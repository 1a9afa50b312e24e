"""A stand-in TensorRT engine and GPU, so that the TensorRT load path runs without a GPU.

Three pieces, usable in this process or by a subprocess (e.g. a Modal container entrypoint):

- ``standin_trt/`` (`STANDIN_DIR`): a ``tensorrt`` package and a ``cuda.bindings.runtime``
  module implementing what `floodway.build.trt.engine_runner` calls, over ONNX Runtime on the
  CPU and host memory. Put it first on ``PYTHONPATH`` (or ``sys.path``).
- ``standin_trt/bin/nvidia-smi`` (`STANDIN_BIN`): answers floodway's hardware query with one
  NVIDIA L4 (compute capability 8.9). Put its folder first on ``PATH``; with
  ``FLOODWAY_STANDIN_GPU_WHEN=<path>`` the GPU is there only while ``<path>`` exists.
- `add_standin_engine(build_dir)`: adds a stand-in engine, stamped for that GPU and the
  stand-in's TensorRT version, to a copy of a build (file and manifest entries).

With all three, `floodway.build.hardware.detect` finds an L4 with TensorRT 10.13.0 and the
loader's plan puts the engine first: `load`/`finish` return ``backend == "tensorrt"``, and the
stand-in's ``tensorrt.DESERIALIZED`` / ``EXECUTIONS`` show that the engine ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

STANDIN_DIR = Path(__file__).resolve().parent / "standin_trt"
STANDIN_BIN = STANDIN_DIR / "bin"
STANDIN_TRT_VERSION = "10.13.0"          # the stand-in tensorrt's __version__
STANDIN_GPU = ("NVIDIA L4", "8.9")       # what the stand-in nvidia-smi reports
GPU_WHEN_ENV = "FLOODWAY_STANDIN_GPU_WHEN"


def _executable() -> None:
    exe = STANDIN_BIN / "nvidia-smi"
    mode = exe.stat().st_mode
    if not mode & stat.S_IXUSR:            # a checkout may drop the bit
        exe.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def standin_env(environ: Mapping[str, str] | None = None, *, trt: bool = True,
                gpu: bool = True, gpu_when: Path | None = None) -> dict[str, str]:
    """`environ` (default: this process's) with the stand-ins first: `trt` puts `STANDIN_DIR`
    on ``PYTHONPATH``, `gpu` puts `STANDIN_BIN` on ``PATH``; `gpu_when`: the GPU is there only
    while that path exists (``FLOODWAY_STANDIN_GPU_WHEN``)."""
    env = dict(os.environ if environ is None else environ)
    if trt:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(STANDIN_DIR), env.get("PYTHONPATH", "")) if p)
    if gpu:
        _executable()
        env["PATH"] = os.pathsep.join(p for p in (str(STANDIN_BIN), env.get("PATH", "")) if p)
    if gpu_when is not None:
        env[GPU_WHEN_ENV] = str(gpu_when)
    return env


def add_standin_engine(build_dir: Path) -> str:
    """Add a stand-in engine to the build in `build_dir` (a copy: the manifest is rewritten)
    -> its path relative to the build. It points at the build's own ``model.onnx``, so it
    computes what the CPU path computes; its stamp is `STANDIN_GPU` and
    `STANDIN_TRT_VERSION`, as a build on that GPU would write it."""
    build_dir = Path(build_dir)
    manifest_path = build_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    gpu_name, cc = STANDIN_GPU
    rel = f"engines/trt-{STANDIN_TRT_VERSION}/sm{cc.replace('.', '')}/standin/model.plan"
    data = json.dumps({"standin_engine": 1,
                       "onnx": str((build_dir / "model.onnx").resolve())}).encode()
    (build_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (build_dir / rel).write_bytes(data)
    manifest["artifacts"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    inputs = [t["name"] for t in manifest["io"]["inputs"]]
    rows, seq = manifest["build"]["max_batch_rows"], manifest["max_seq_len"]
    manifest["engines"] = [{"path": rel, "tensorrt_version": STANDIN_TRT_VERSION,
                            "compute_capability": cc, "gpu_name": gpu_name,
                            "profile": {n: [1, 1, rows, seq // 2, rows, seq] for n in inputs}}]
    manifest.get("skipped", {}).pop("compile", None)
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return rel


STANDIN_MODULES = ("tensorrt", "cuda", "cuda.bindings", "cuda.bindings.runtime")


@contextmanager
def standin_in_process(*, gpu_when: Path | None = None) -> Iterator[object]:
    """The stand-ins in this process for the block: `STANDIN_DIR` on ``sys.path``,
    `STANDIN_BIN` on ``PATH`` (`gpu_when` as for `standin_env`), hardware detection's cache
    cleared on entry and exit; yields the stand-in ``tensorrt`` module. On exit the stand-in
    modules are forgotten, so later detection sees this machine again."""
    from floodway.build.hardware import detect

    saved_path, saved_env = list(sys.path), {k: os.environ.get(k)
                                             for k in ("PATH", GPU_WHEN_ENV)}
    os.environ.update({k: v for k, v in standin_env(trt=False, gpu_when=gpu_when).items()
                       if k in ("PATH", GPU_WHEN_ENV)})
    sys.path.insert(0, str(STANDIN_DIR))
    detect.cache_clear()
    try:
        import tensorrt

        yield tensorrt
    finally:
        sys.path[:] = saved_path
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for name in STANDIN_MODULES:
            sys.modules.pop(name, None)
        detect.cache_clear()


def store_with_standin_engine(built_store: Path, dest: Path, endpoint: str = "embed") -> Path:
    """A copy of `built_store`'s `endpoint` builds under `dest` (a store root), its latest
    build given a stand-in engine (`add_standin_engine`) -> `dest`."""
    from floodway.build.store import ArtifactStore

    shutil.copytree(Path(built_store) / endpoint, Path(dest) / endpoint)
    add_standin_engine(ArtifactStore(dest).latest(endpoint))
    return Path(dest)


__all__ = ["GPU_WHEN_ENV", "STANDIN_BIN", "STANDIN_DIR", "STANDIN_GPU", "STANDIN_TRT_VERSION",
           "add_standin_engine", "standin_env", "standin_in_process", "store_with_standin_engine"]
