"""The cold-start loader: built artifacts -> a `Loaded` model.

`plan()` orders the artifact paths for the hardware found (a pure function of the manifest
and a `HardwareInfo`):

    TensorRT engine whose stamp matches  ->  ONNX Runtime CUDA  ->  ONNX Runtime CPU
    (offline-optimized graph)  ->  PyTorch from the safetensors snapshot

`load()` tries them in that order. Before deserializing anything it validates the manifest and
checks every file's size; each path's files are also sha256-hashed in a thread while the
session is created (hashlib and ONNX Runtime both release the GIL, so this costs little
wall time). A mismatch, a stamp for another GPU or TensorRT version, or a failing backend is
logged with its reason and the next path is taken; when none works, ArtifactError lists
every reason, so the pool backs off instead of crash-looping. The ONNX Runtime and TensorRT
paths import no torch.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floodway.build.hardware import EngineStamp, HardwareInfo, detect, engine_usable
from floodway.build.manifest_view import ManifestView
from floodway.build.netfs import read_mode
from floodway.build.prefetch import (
    ONNX_DATA,
    ONNX_FILE,
    OPT_DATA,
    OPT_FILE,
    Prefetch,
    make_tokenizer,
    ort_runner,
    ort_threads,
    sha256_path,
)
from floodway.errors import ArtifactError
from floodway.functions.loaded import Loaded

LOGGER = "floodway.loader"
WEIGHTS_FILE = "weights/model.safetensors"
TOKENIZER_DIR = "tokenizer"

Runner = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Choice:
    """One way to load the model: a backend, the files it reads, and whether/why it applies."""

    backend: str
    files: tuple[str, ...]
    usable: bool
    reason: str


def read_manifest(artifact_dir: Path) -> ManifestView:
    """The build's manifest, checked (`ManifestView.parse`). Raises ArtifactError."""
    path = Path(artifact_dir) / "manifest.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{artifact_dir} has no manifest.json (incomplete build)") from None
    try:
        return ManifestView.parse(raw)
    except ArtifactError as e:
        raise ArtifactError(f"{path} is invalid: {e}") from None


def verify_files(artifact_dir: Path, manifest: ManifestView, *, verify: str = "size",
                 only: tuple[str, ...] | None = None) -> None:
    """Check artifacts named by the manifest exist with their recorded size (and hash).

    `verify`: "size" or "sha256". `only`: check just these relative paths.
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


def plan(manifest: ManifestView, hw: HardwareInfo) -> list[Choice]:
    """Every load path in preference order, each marked usable or not with the reason."""
    have = set(manifest.artifacts)
    out: list[Choice] = []
    for e in manifest.engines:
        ok, why = engine_usable(EngineStamp(e.tensorrt_version, e.compute_capability,
                                            e.gpu_name), hw)
        out.append(Choice("tensorrt", (e.path,), ok and e.path in have, why))
    if not manifest.engines:
        out.append(Choice("tensorrt", (), False,
                          manifest.skipped.get("compile", "no TensorRT engine was built")))
    graph = tuple(f for f in (ONNX_FILE, ONNX_DATA) if f in have)
    if "TensorrtExecutionProvider" in hw.ort_providers:
        ok = hw.has_cuda and ONNX_FILE in have
        out.append(Choice("onnxruntime-tensorrt", graph, ok,
                          "ONNX Runtime's TensorRT provider" if ok else "no CUDA GPU"))
    cuda_ok = hw.has_cuda and ONNX_FILE in have
    out.append(Choice("onnxruntime-cuda", graph, cuda_ok,
                      "CUDA provider available" if cuda_ok else "no CUDA GPU or provider"))
    # The offline-optimized graph holds CPU-specific fusions: use it on the CPU provider only.
    opt = tuple(f for f in (OPT_FILE, OPT_DATA) if f in have)
    if OPT_FILE in have:
        out.append(Choice("onnxruntime-cpu", opt, True, "offline-optimized graph"))
    out.append(Choice("onnxruntime-cpu", graph, ONNX_FILE in have,
                      "unoptimized graph" if ONNX_FILE in have else "no ONNX graph"))
    out.append(Choice("torch", (WEIGHTS_FILE,), WEIGHTS_FILE in have,
                      "safetensors snapshot" if WEIGHTS_FILE in have else "no weights"))
    return out


def _open(folder: Path, manifest: ManifestView, choice: Choice, *, threads: int,
          mode: str) -> Runner:
    if choice.backend == "tensorrt":
        from floodway.build import trt

        return trt.engine_runner(folder / choice.files[0], manifest)
    if choice.backend == "torch":
        from floodway.build import torch_runner

        return torch_runner.runner(folder, manifest, mode=mode)
    trt_provider = None
    if choice.backend == "onnxruntime-tensorrt":
        from floodway.build import trt

        shapes = trt.profile_shapes(manifest.inputs, manifest.max_batch_rows,
                                    manifest.max_seq_len, manifest.max_batch_rows)
        trt_provider = trt.ort_trt_provider(ort_trt_cache_root(),
                                            manifest.artifacts[ONNX_FILE].sha256, shapes)
    return ort_runner(folder, choice.files[0], choice.files,
                      cuda=choice.backend != "onnxruntime-cpu", threads=threads, mode=mode,
                      trt_provider=trt_provider)


def ort_trt_cache_root() -> Path:
    """Where ONNX Runtime's TensorRT provider keeps its engines: a local, writable folder (the
    artifact store may be a read-only Volume). ``FLOODWAY_TRT_CACHE`` overrides."""
    env = os.environ.get("FLOODWAY_TRT_CACHE")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "floodway"


class _Task:
    """A call running on its own thread; `result()` waits, then returns or raises."""

    def __init__(self, fn: Callable[..., Any] | None = None, *args: Any):
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True) \
            if fn is not None else None
        if self._thread:
            self._thread.start()

    @classmethod
    def done(cls, value: Any) -> _Task:
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


class _Tasks:
    """`submit` starts a `_Task`; leaving the `with` block waits for all of them. Used instead of
    concurrent.futures, whose import (with logging) costs ~10 ms of a container's cold start."""

    def __init__(self) -> None:
        self._tasks: list[_Task] = []

    def __enter__(self) -> _Tasks:
        return self

    def __exit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.wait()

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Task:
        self._tasks.append(_Task(fn, *args))
        return self._tasks[-1]


INFO, WARNING = 20, 30   # logging's levels


def _log(level: int, msg: str, *args: object) -> None:
    # Below WARNING only where logging is imported already: importing it costs ~5 ms of a
    # container's cold start, and where nothing imported it, nothing configured a handler or
    # level, so the record would be dropped anyway (the last-resort handler shows WARNING+).
    if level < WARNING and "logging" not in sys.modules:
        return
    import logging

    logging.getLogger(LOGGER).log(level, msg, *args)


def _hash_files(folder: Path, manifest: ManifestView, files: tuple[str, ...],
                mode: str) -> list[str]:
    return [rel for rel in files
            if sha256_path(folder / rel, mode) != manifest.artifacts[rel].sha256]


def _tok_hash(folder: Path, manifest: ManifestView, tok_files: tuple[str, ...], pool: _Tasks,
              pre: Prefetch | None, *, verify: str, mode: str) -> _Task | None:
    """The tokenizer files whose sha256 does not match, as a task (None: not verified); from
    the prefetch's digests when it hashed them all."""
    if verify != "sha256":
        return None
    if pre is not None and all(r in pre.digests for r in tok_files):
        return _Task.done([r for r in tok_files
                           if pre.digests[r] != manifest.artifacts[r].sha256])
    return pool.submit(_hash_files, folder, manifest, tok_files, mode)


def _open_checked(folder: Path, manifest: ManifestView, choice: Choice, *, early: Any,
                  hashed: _Task | None, verify: str, threads: int, mode: str) -> Runner:
    """Open `choice` (or take the prefetch's session `early`), then check its files' digests
    and its input names against the manifest. Raises on any failure."""
    if early:
        runner, digests = early
        bad = [r for r in choice.files
               if verify == "sha256" and digests.get(r) != manifest.artifacts[r].sha256]
    else:
        runner = _open(folder, manifest, choice, threads=threads, mode=mode)
        bad = hashed.result() if hashed else []
    if bad:
        raise ArtifactError(f"{', '.join(bad)} do(es) not match the manifest sha256")
    names = getattr(runner, "input_names", manifest.inputs)
    if tuple(names) != manifest.inputs:
        raise ArtifactError(f"{choice.files[0]} takes inputs {tuple(names)}, the "
                            f"manifest says {manifest.inputs}")
    return runner


def _first_working(folder: Path, manifest: ManifestView, hw: HardwareInfo, pool: _Tasks, *,
                   verify: str, threads: int, mode: str,
                   prefetch: Prefetch | None) -> tuple[Choice, Runner, list[str]]:
    """The first path of `plan` that opens and checks out -> (choice, runner, what happened
    to each path tried). Raises ArtifactError listing every reason when none does."""
    attempts: list[str] = []
    for choice in plan(manifest, hw):
        label = f"{choice.backend}[{', '.join(choice.files) or '-'}]"
        if not choice.usable:
            attempts.append(f"{label}: skipped ({choice.reason})")
            continue
        try:
            verify_files(folder, manifest, verify="size", only=choice.files)
        except ArtifactError as e:
            attempts.append(f"{label}: failed ({e})")
            _log(WARNING, "load %s: %s failed (%s); falling back", folder.name, label, e)
            continue
        early = (prefetch.take(choice.files, threads=threads, mode=mode)
                 if prefetch and choice.backend == "onnxruntime-cpu" else None)
        prefetch = None   # only the first ONNX Runtime CPU choice may use it
        hashed = (pool.submit(_hash_files, folder, manifest, choice.files, mode)
                  if verify == "sha256" and not early else None)
        try:
            runner = _open_checked(folder, manifest, choice, early=early, hashed=hashed,
                                   verify=verify, threads=threads, mode=mode)
        except Exception as e:  # noqa: BLE001 - any failure means: try the next path
            if hashed:
                hashed.result()
            attempts.append(f"{label}: failed ({type(e).__name__}: {e})")
            _log(WARNING, "load %s: %s failed (%s); falling back", folder.name, label, e)
            continue
        attempts.append(f"{label}: loaded ({choice.reason})")
        return choice, runner, attempts
    raise ArtifactError(f"no way to load {folder}:\n  " + "\n  ".join(attempts))


def load(artifact_dir: str | Path, *, verify: str = "sha256", threads: int | None = None,
         hardware: HardwareInfo | None = None, mode: str | None = None,
         prefetch: Prefetch | None = None) -> Loaded:
    """Load a published build. Raises ArtifactError when no path works (reasons listed).

    `verify`: "sha256" (default; hashed in parallel with session creation) or "size".
    `threads`: ONNX Runtime intra-op threads (None: ``FLOODWAY_ORT_THREADS`` or ORT's
    default). `hardware`: what to plan for (default: detected). `mode`: "read" or "mmap"
    (default: by filesystem, `floodway.build.netfs.read_mode`). `prefetch`: a session and
    digests started earlier on a thread (`start_prefetch`), used if they match the plan.
    """
    t0 = time.perf_counter()
    folder = Path(artifact_dir)
    manifest = read_manifest(folder)
    tok_files = tuple(r for r in manifest.artifacts if r.startswith(TOKENIZER_DIR + "/"))
    verify_files(folder, manifest, verify="size", only=tok_files)
    hw = hardware or detect()
    threads = threads if threads is not None else ort_threads()
    mode = mode or read_mode(folder)
    pre = prefetch
    if pre is not None:
        pre.join()
    with _Tasks() as pool:
        tok_hash = _tok_hash(folder, manifest, tok_files, pool, pre, verify=verify, mode=mode)
        choice, runner, attempts = _first_working(folder, manifest, hw, pool, verify=verify,
                                                  threads=threads, mode=mode,
                                                  prefetch=prefetch)
        bad_tok = tok_hash.result() if tok_hash else []
    if bad_tok:
        raise ArtifactError(f"{', '.join(bad_tok)} do(es) not match the manifest sha256 (altered)")
    _log(INFO, "loaded %s with %s (%s)", folder.name, choice.backend, "; ".join(attempts))
    tokenizer = (pre.tokenizer if pre is not None and pre.tokenizer is not None
                 and pre.max_seq_len == manifest.max_seq_len
                 else make_tokenizer(folder / TOKENIZER_DIR, manifest.max_seq_len))
    return Loaded(backend=choice.backend, tokenizer=tokenizer, runner=runner,
                  input_names=manifest.inputs, max_seq_len=manifest.max_seq_len,
                  artifact_dir=folder, manifest=manifest, path_taken=tuple(attempts),
                  timings_s={"artifact_load": time.perf_counter() - t0})
