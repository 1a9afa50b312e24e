"""The cold-start loader: built artifacts -> a `Loaded` model, in two phases.

    model = load(folder)                          # both phases at once (local workers)
    ready = prepare(folder, expect="gpu")         # before the device is known ...
    model = finish(ready, hardware=fresh_detect())   # ... and once it is attached

`plan()` orders the artifact paths for the hardware found (a pure function of the manifest
and a `HardwareInfo`):

    TensorRT engine whose stamp matches  ->  ONNX Runtime CUDA (the fp16 graph, then the
    float32 one)  ->  ONNX Runtime CPU (the int8 graph, then the offline-optimized one)
    ->  PyTorch from the safetensors snapshot

A reduced-precision artifact (`Build.precision`) is planned only on the device it serves
on (int8 on the CPU, fp16/bf16 on a GPU) and only where the manifest records its accuracy
gate as passed (`ManifestView.passed`); otherwise float32 is.

`prepare()` does everything that needs no device, so that it can run before a memory
snapshot (a Modal container takes its snapshot without a GPU): read and validate the
manifest, check and hash the preprocessing files (``tokenizer/`` for text tasks,
``processor/`` for image tasks), build the tokenizer or image processor, import ONNX Runtime (and
TensorRT where engines were built), and, with `expect`, hash ahead the files of the paths that
device would take and read the TensorRT engines into memory. `finish()` does the rest where
the device is attached: detect the hardware, plan, and open the first path that works
(`floodway.build.backends.first_working`). Files not hashed ahead are sha256-hashed on a thread
while the session is created (hashlib and ONNX Runtime both release the GIL). A mismatch, a
stamp for another GPU or TensorRT version, or a failing backend is logged with its reason and
the next path is taken; when none works, ArtifactError lists every reason, so the pool backs
off instead of crash-looping. The ONNX Runtime and TensorRT paths import no torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floodway.build.backends import (
    INFO,
    Tasks,
    first_working,
    log,
    mismatched,
    ort_trt_cache_root,
    verify_files,
)
from floodway.build.hardware import EngineStamp, HardwareInfo, detect, engine_usable
from floodway.build.manifest_view import ManifestView
from floodway.build.netfs import read_mode
from floodway.build.precision import FP16, FP16_FILE, FP32, GRAPH_FILES, INT8, INT8_FILE
from floodway.build.prefetch import (
    ONNX_DATA,
    ONNX_FILE,
    OPT_DATA,
    OPT_FILE,
    Prefetch,
    make_tokenizer,
    ort_threads,
)
from floodway.errors import ArtifactError
from floodway.functions.loaded import Loaded

WEIGHTS_FILE = "weights/model.safetensors"
TOKENIZER_DIR = "tokenizer"
PROCESSOR_DIR = "processor"
PREP_DIRS = (TOKENIZER_DIR + "/", PROCESSOR_DIR + "/")   # a task's preprocessing files
# What `prepare(expect=...)` may be told the device will be.
EXPECT = ("cpu", "gpu")


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


def plan(manifest: ManifestView, hw: HardwareInfo) -> list[Choice]:
    """Every load path in preference order, each marked usable or not with the reason."""
    have = set(manifest.artifacts)
    out: list[Choice] = []
    for e in manifest.engines:
        ok, why = engine_usable(EngineStamp(e.tensorrt_version, e.compute_capability,
                                            e.gpu_name), hw)
        if ok and e.precision != FP32:
            gate = manifest.passed(e.precision, "gpu")
            ok = gate is not None and gate.artifact == e.path
            why = (f"{why}; {e.precision} gate passed: {gate.summary}" if ok
                   else f"{e.precision} engine without a passed accuracy gate")
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
    fp16 = manifest.passed(FP16, "gpu")
    if fp16 is not None and FP16_FILE in have:
        out.append(Choice("onnxruntime-cuda", tuple(f for f in GRAPH_FILES[FP16] if f in have),
                          hw.has_cuda, f"fp16 graph, gate passed: {fp16.summary}"
                          if hw.has_cuda else "no CUDA GPU or provider"))
    out.append(Choice("onnxruntime-cuda", graph, cuda_ok,
                      "CUDA provider available" if cuda_ok else "no CUDA GPU or provider"))
    # The offline-optimized graph holds CPU-specific fusions: use it on the CPU provider only.
    opt = tuple(f for f in (OPT_FILE, OPT_DATA) if f in have)
    int8 = manifest.passed(INT8, "cpu")
    if int8 is not None and INT8_FILE in have:
        out.append(Choice("onnxruntime-cpu", (INT8_FILE,), True,
                          f"int8 graph, gate passed: {int8.summary}"))
    if OPT_FILE in have:
        out.append(Choice("onnxruntime-cpu", opt, True, "offline-optimized graph"))
    out.append(Choice("onnxruntime-cpu", graph, ONNX_FILE in have,
                      "unoptimized graph" if ONNX_FILE in have else "no ONNX graph"))
    out.append(Choice("torch", (WEIGHTS_FILE,), WEIGHTS_FILE in have,
                      "safetensors snapshot" if WEIGHTS_FILE in have else "no weights"))
    return out


@dataclass
class Prepared:
    """A build read and checked before its device is known (`prepare`), for `finish`.

    `digests`: sha256 (hex) of the files hashed ahead, by relative path; `buffers`: files read
    into memory ahead (the TensorRT engines), by relative path, dropped once opened.
    `tokenizer` (text tasks) and `image_processor` (image tasks): the build's preprocessing,
    None where its task has none.
    `seconds`: how long `prepare` took.
    """

    folder: Path
    manifest: ManifestView
    verify: str
    mode: str
    tokenizer: Any
    digests: dict[str, str] = field(default_factory=dict)
    buffers: dict[str, bytes] = field(default_factory=dict)
    prefetch: Prefetch | None = None
    seconds: float = 0.0
    image_processor: Any = None


def ahead_files(manifest: ManifestView, expect: str | None) -> tuple[str, ...]:
    """The files the paths for the `expect`ed device would read: on "gpu", every engine, the
    fp16 graph where its gate passed and the ONNX graph (for ONNX Runtime CUDA); on "cpu",
    the int8 graph where its gate passed, the optimized and the plain graph; on None, none."""
    have = set(manifest.artifacts)
    if expect == "gpu":
        fp16 = GRAPH_FILES[FP16] if manifest.passed(FP16, "gpu") else ()
        names: tuple[str, ...] = (*(e.path for e in manifest.engines), *fp16, ONNX_FILE,
                                  ONNX_DATA)
    elif expect == "cpu":
        int8 = GRAPH_FILES[INT8] if manifest.passed(INT8, "cpu") else ()
        names = (*int8, OPT_FILE, OPT_DATA, ONNX_FILE, ONNX_DATA)
    else:
        names = ()
    return tuple(dict.fromkeys(n for n in names if n in have))


def _read_and_hash(path: Path) -> tuple[bytes, str]:
    import hashlib

    data = path.read_bytes()
    return data, hashlib.sha256(data).hexdigest()


def _import_runtimes(manifest: ManifestView, expect: str | None) -> None:
    """Import the native runtimes now, so their import cost lands before a memory snapshot.
    Importing loads libraries but creates no CUDA context, which needs the GPU."""
    if expect is None:
        return
    import onnxruntime  # noqa: F401

    if expect == "gpu" and manifest.engines:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            pass    # finish() plans without TensorRT and says why


def prepare(artifact_dir: str | Path, *, verify: str = "sha256", mode: str | None = None,
            expect: str | None = None, prefetch: Prefetch | None = None) -> Prepared:
    """Phase one of `load`, with no device needed (see the module doc).

    `expect`: the device `finish` will most likely find, "gpu" or "cpu" (its paths' files are
    hashed now, the engines read into memory); None: hash nothing ahead. `verify`, `mode`,
    `prefetch`: as for `load`. Raises ArtifactError for a missing or invalid manifest, or a
    tokenizer file missing, truncated or (sha256) altered.
    """
    if expect is not None and expect not in EXPECT:
        raise ValueError(f"expect must be one of {EXPECT} or None, got {expect!r}")
    t0 = time.perf_counter()
    folder = Path(artifact_dir)
    manifest = read_manifest(folder)
    if manifest.runtime == "own":
        raise ArtifactError(f"{folder} was built for an endpoint that brings its own runtime "
                            "(load=, or no model source): it holds no graph to open; run "
                            "`floodway build` again if the endpoint changed since")
    tok_files = tuple(r for r in manifest.artifacts if r.startswith(PREP_DIRS))
    verify_files(folder, manifest, verify="size", only=tok_files)
    mode = mode or read_mode(folder)
    if prefetch is not None:
        prefetch.join()
    engines = {e.path for e in manifest.engines}
    ahead = ahead_files(manifest, expect)
    digests: dict[str, str] = {}
    buffers: dict[str, bytes] = {}
    with Tasks() as pool:
        reads = {rel: pool.submit(_read_and_hash, folder / rel)
                 for rel in ahead if rel in engines}
        hashes = {rel: pool.submit(mismatched, folder, manifest, (rel,), mode)
                  for rel in ahead if rel not in engines and verify == "sha256"}
        bad_tok = _bad_tokenizer_files(folder, manifest, tok_files, prefetch, verify, mode)
        _import_runtimes(manifest, expect)
        tokenizer, processor = _preprocessing(folder, manifest, prefetch)
    if bad_tok:
        raise ArtifactError(f"{', '.join(bad_tok)} do(es) not match the manifest sha256 (altered)")
    for rel, task in reads.items():
        try:
            buffers[rel], digests[rel] = task.result()
        except OSError:
            pass    # finish() checks the file again and reports it
    for rel, task in hashes.items():
        try:
            digests[rel] = "" if task.result() else manifest.artifacts[rel].sha256
        except OSError:
            pass
    if verify != "sha256":
        digests = {}
    return Prepared(folder, manifest, verify, mode, tokenizer, digests, buffers, prefetch,
                    time.perf_counter() - t0, processor)


def _preprocessing(folder: Path, manifest: ManifestView, pre: Prefetch | None
                   ) -> tuple[Any, Any]:
    """The build's (tokenizer, image processor), each None where its task has none."""
    if f"{TOKENIZER_DIR}/tokenizer.json" in manifest.artifacts:
        if pre is not None and pre.tokenizer is not None \
                and pre.max_seq_len == manifest.max_seq_len:
            return pre.tokenizer, None
        return make_tokenizer(folder / TOKENIZER_DIR, manifest.max_seq_len), None
    config = f"{PROCESSOR_DIR}/preprocessor_config.json"
    if config in manifest.artifacts:
        from floodway.tasks.image_processing import ImageProcessor

        return None, ImageProcessor.from_file(folder / config)
    return None, None


def _bad_tokenizer_files(folder: Path, manifest: ManifestView, tok_files: tuple[str, ...],
                         pre: Prefetch | None, verify: str, mode: str) -> list[str]:
    """The tokenizer files whose sha256 is not the manifest's ([] unless `verify` is
    "sha256"); from the prefetch's digests when it hashed them all."""
    if verify != "sha256":
        return []
    if pre is not None and all(r in pre.digests for r in tok_files):
        return [r for r in tok_files if pre.digests[r] != manifest.artifacts[r].sha256]
    return mismatched(folder, manifest, tok_files, mode)


def finish(ready: Prepared, *, hardware: HardwareInfo | None = None,
           threads: int | None = None) -> Loaded:
    """Phase two of `load`, where the device is attached: plan for `hardware` (default:
    `detect()`) and open the first path that works (see the module doc). `threads`: as for
    `load`. Raises ArtifactError listing every path's reason when none works."""
    t0 = time.perf_counter()
    folder, manifest = ready.folder, ready.manifest
    hw = hardware or detect()
    threads = threads if threads is not None else ort_threads()
    with Tasks() as pool:
        choice, runner, attempts = first_working(
            folder, manifest, plan(manifest, hw), pool, verify=ready.verify, threads=threads,
            mode=ready.mode, prefetch=ready.prefetch, digests=ready.digests,
            buffers=ready.buffers)
    ready.buffers = {}      # deserialized: the engine bytes are not needed any more
    ready.prefetch = None
    log(INFO, "loaded %s with %s (%s)", folder.name, choice.backend, "; ".join(attempts))
    return Loaded(backend=choice.backend, tokenizer=ready.tokenizer, runner=runner,
                  input_names=manifest.inputs, max_seq_len=manifest.max_seq_len,
                  artifact_dir=folder, manifest=manifest, path_taken=tuple(attempts),
                  task=manifest.task, image_processor=ready.image_processor,
                  labels=manifest.labels,
                  timings_s={"artifact_load": ready.seconds + time.perf_counter() - t0,
                             "prepare": ready.seconds, "open": time.perf_counter() - t0})


def load(artifact_dir: str | Path, *, verify: str = "sha256", threads: int | None = None,
         hardware: HardwareInfo | None = None, mode: str | None = None,
         prefetch: Prefetch | None = None) -> Loaded:
    """Load a published build: `prepare`, then `finish`, at once. Raises ArtifactError when
    no path works (reasons listed).

    `verify`: "sha256" (default; hashed in parallel with session creation) or "size".
    `threads`: ONNX Runtime intra-op threads (None: ``FLOODWAY_ORT_THREADS`` or ORT's
    default). `hardware`: what to plan for (default: detected). `mode`: "read" or "mmap"
    (default: by filesystem, `floodway.build.netfs.read_mode`). `prefetch`: a session and
    digests started earlier on a thread (`start_prefetch`), used if they match the plan.
    """
    ready = prepare(artifact_dir, verify=verify, mode=mode, prefetch=prefetch)
    return finish(ready, hardware=hardware, threads=threads)


__all__ = ["EXPECT", "ONNX_FILE", "PROCESSOR_DIR", "TOKENIZER_DIR", "WEIGHTS_FILE", "Choice",
           "Prepared", "ahead_files", "finish", "load", "ort_trt_cache_root", "plan", "prepare",
           "read_manifest", "verify_files"]
