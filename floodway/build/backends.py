"""Opening one load path of a build: the device-dependent half of the cold-start loader.

    choice, runner, attempts = first_working(folder, manifest, choices, pool, verify=...,
                                             threads=..., mode=..., prefetch=None,
                                             digests={}, buffers={})

`first_working` walks the choices of `floodway.build.loader.plan` in order: it checks each
usable path's file sizes, opens it (a TensorRT engine, an ONNX Runtime session on CUDA or on
the CPU, or PyTorch), checks its files' sha256 (from `digests` computed earlier, else hashed on
a thread while the session is created) and its input names against the manifest, and takes
the first that works. A failing path is logged with its reason and the next is tried; when
none works, ArtifactError lists every reason.

`Tasks` runs calls on threads (hashlib and ONNX Runtime release the GIL). Nothing here imports
torch unless the PyTorch path is opened.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from floodway.build.manifest_view import ManifestView
from floodway.build.prefetch import ONNX_FILE, Prefetch, ort_runner, sha256_path
from floodway.errors import ArtifactError

LOGGER = "floodway.loader"
INFO, WARNING = 20, 30   # logging's levels

Runner = Callable[[Any], dict[str, Any]]


def log(level: int, msg: str, *args: object) -> None:
    """Log on ``floodway.loader``. Below WARNING only where logging is imported already:
    importing it costs ~5 ms of a container's cold start, and where nothing imported it,
    nothing configured a handler or level, so the record would be dropped anyway (the
    last-resort handler shows WARNING and above)."""
    if level < WARNING and "logging" not in sys.modules:
        return
    import logging

    logging.getLogger(LOGGER).log(level, msg, *args)


class Task:
    """A call running on its own thread; `result()` waits, then returns or raises."""

    def __init__(self, fn: Callable[..., Any] | None = None, *args: Any):
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True) \
            if fn is not None else None
        if self._thread:
            self._thread.start()

    @classmethod
    def done(cls, value: Any) -> Task:
        task = cls()
        task._value = value
        return task

    def _run(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised by result()
            self._error = e

    def wait(self) -> None:
        if self._thread:
            self._thread.join()

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Tasks:
    """`submit` starts a `Task`; leaving the `with` block waits for all of them. Used instead of
    concurrent.futures, whose import (with logging) costs ~10 ms of a container's cold start."""

    def __init__(self) -> None:
        self._tasks: list[Task] = []

    def __enter__(self) -> Tasks:
        return self

    def __exit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.wait()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Task:
        self._tasks.append(Task(fn, *args))
        return self._tasks[-1]


def verify_files(artifact_dir: Path, manifest: ManifestView, *, verify: str = "size",
                 only: Sequence[str] | None = None) -> None:
    """Check artifacts named by the manifest exist with their recorded size (and hash).

    `verify`: "size" or "sha256". `only`: check just these relative paths. Raises
    ArtifactError naming the first file missing, of another size, or (sha256) altered.
    """
    for rel, entry in manifest.artifacts.items():
        if only is not None and rel not in only:
            continue
        path = artifact_dir / rel
        if not path.is_file():
            raise ArtifactError(f"{path} is missing (listed in the manifest)")
        size = path.stat().st_size
        if size != entry.bytes:
            raise ArtifactError(f"{path} has {size} bytes, the manifest says {entry.bytes} "
                                "(truncated or altered)")
        if verify == "sha256" and sha256_path(path) != entry.sha256:
            raise ArtifactError(f"{path} does not match its manifest sha256 (altered)")


def ort_trt_cache_root() -> Path:
    """Where ONNX Runtime's TensorRT provider keeps its engines: a local, writable folder (the
    artifact store may be a read-only Volume). ``FLOODWAY_TRT_CACHE`` overrides."""
    env = os.environ.get("FLOODWAY_TRT_CACHE")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "floodway"


def open_runner(folder: Path, manifest: ManifestView, backend: str, files: tuple[str, ...], *,
                threads: int, mode: str, buffers: Mapping[str, Any]) -> Runner:
    """Open `backend` over `files` (the first is the engine or graph) -> its runner.
    `buffers`: files already read into memory (rel -> bytes), used instead of reading them.
    Raises whatever the backend raises."""
    if backend == "tensorrt":
        from floodway.build import trt

        return trt.engine_runner(folder / files[0], manifest, data=buffers.get(files[0]))
    if backend == "torch":
        from floodway.build import torch_runner

        return torch_runner.runner(folder, manifest, mode=mode)
    trt_provider = None
    if backend == "onnxruntime-tensorrt":
        from floodway.build import trt

        specs = [(i.name, i.shape) for i in manifest.input_specs] or list(manifest.inputs)
        shapes = trt.profile_shapes(specs, manifest.max_batch_rows, manifest.max_seq_len,
                                    manifest.max_batch_rows)
        trt_provider = trt.ort_trt_provider(ort_trt_cache_root(),
                                            manifest.artifacts[ONNX_FILE].sha256, shapes,
                                            fp16=manifest.passed("fp16", "gpu") is not None)
    return ort_runner(folder, files[0], files, cuda=backend != "onnxruntime-cpu",
                      threads=threads, mode=mode, trt_provider=trt_provider)


def mismatched(folder: Path, manifest: ManifestView, files: Sequence[str], mode: str
               ) -> list[str]:
    """The files of `files` whose sha256 is not the manifest's (hashed now)."""
    return [rel for rel in files
            if sha256_path(folder / rel, mode) != manifest.artifacts[rel].sha256]


def _open_checked(folder: Path, manifest: ManifestView, backend: str, files: tuple[str, ...],
                  *, early: Any, hashed: Task | None, verify: str, threads: int, mode: str,
                  buffers: Mapping[str, Any]) -> Runner:
    """Open the path (or take the prefetch's session `early`), then check its files' digests
    and its input names against the manifest. Raises on any failure."""
    if early:
        runner, digests = early
        bad = [r for r in files
               if verify == "sha256" and digests.get(r) != manifest.artifacts[r].sha256]
    else:
        runner = open_runner(folder, manifest, backend, files, threads=threads, mode=mode,
                             buffers=buffers)
        bad = hashed.result() if hashed else []
    if bad:
        raise ArtifactError(f"{', '.join(bad)} do(es) not match the manifest sha256")
    names = getattr(runner, "input_names", manifest.inputs)
    if tuple(names) != manifest.inputs:
        raise ArtifactError(f"{files[0]} takes inputs {tuple(names)}, the "
                            f"manifest says {manifest.inputs}")
    return runner


def first_working(folder: Path, manifest: ManifestView, choices: Sequence[Any], pool: Tasks, *,
                  verify: str, threads: int, mode: str, prefetch: Prefetch | None,
                  digests: Mapping[str, str], buffers: Mapping[str, Any],
                  ) -> tuple[Any, Runner, list[str]]:
    """The first of `choices` (`floodway.build.loader.Choice`, in preference order) that opens
    and checks out -> (choice, runner, what happened to each path tried). `digests`: sha256
    of files hashed earlier (rel -> hex), not hashed again. Raises ArtifactError listing every
    reason when none does."""
    attempts: list[str] = []
    for choice in choices:
        label = f"{choice.backend}[{', '.join(choice.files) or '-'}]"
        if not choice.usable:
            attempts.append(f"{label}: skipped ({choice.reason})")
            continue
        try:
            verify_files(folder, manifest, verify="size", only=choice.files)
        except ArtifactError as e:
            attempts.append(f"{label}: failed ({e})")
            log(WARNING, "load %s: %s failed (%s); falling back", folder.name, label, e)
            continue
        sha = verify == "sha256"
        known_bad = [r for r in choice.files
                     if sha and r in digests and digests[r] != manifest.artifacts[r].sha256]
        if known_bad:       # hashed ahead: never open altered bytes
            attempts.append(f"{label}: failed ({', '.join(known_bad)} do(es) not match the "
                            f"manifest sha256)")
            log(WARNING, "load %s: %s altered; falling back", folder.name, label)
            continue
        early = (prefetch.take(choice.files, threads=threads, mode=mode)
                 if prefetch and choice.backend == "onnxruntime-cpu" else None)
        prefetch = None   # only the first ONNX Runtime CPU choice may use it
        todo = [r for r in choice.files if r not in digests]
        hashed = (pool.submit(mismatched, folder, manifest, todo, mode)
                  if sha and todo and not early else None)
        try:
            runner = _open_checked(folder, manifest, choice.backend, choice.files, early=early,
                                   hashed=hashed, verify=verify, threads=threads, mode=mode,
                                   buffers=buffers)
        except Exception as e:  # noqa: BLE001 - any failure means: try the next path
            if hashed:
                hashed.wait()
            attempts.append(f"{label}: failed ({type(e).__name__}: {e})")
            log(WARNING, "load %s: %s failed (%s); falling back", folder.name, label, e)
            continue
        attempts.append(f"{label}: loaded ({choice.reason})")
        return choice, runner, attempts
    raise ArtifactError(f"no way to load {folder}:\n  " + "\n  ".join(attempts))


__all__ = ["INFO", "LOGGER", "WARNING", "Runner", "Task", "Tasks", "first_working", "log",
           "mismatched", "open_runner", "ort_trt_cache_root", "verify_files"]
