"""Start the expensive native part of a cold start while Python is still importing.

A container's cold start is mostly imports (the user's module, floodway, pydantic: the GIL is
held) and ONNX Runtime building a session plus hashing artifact files (native code: the GIL is
released). `Prefetch` runs the second kind on a thread, started before the first kind begins,
so they overlap on two cores. It only speculates: `floodway.build.loader.load` validates the
manifest, makes its own plan, and uses the prefetched session and digests only if its first
choice is exactly the one prefetched (else they are dropped).

This module imports nothing heavy at import time (no pydantic, no numpy), by design.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import threading
from pathlib import Path
from typing import Any

ONNX_FILE = "model.onnx"
ONNX_DATA = "model.onnx.data"
OPT_FILE = "model.opt.onnx"
OPT_DATA = "model.opt.onnx.data"
INT8_FILE = "model.int8.onnx"   # floodway.build.precision.INT8_FILE (not imported: cold start)


def sha256_path(path: Path, mode: str = "read") -> str:
    """Hex sha256 of a file's bytes. `mode` as `floodway.build.netfs.read_mode`: "mmap" hashes
    the mapped file in one call (no copy: 90 MB in ~65 ms vs ~145 ms for 16 MiB reads into
    fresh buffers, measured on 2 cores); "read" reads sequentially into one reused buffer."""
    h = hashlib.sha256()
    with path.open("rb", buffering=0) as f:
        if mode == "mmap" and os.fstat(f.fileno()).st_size:   # an empty file cannot be mapped
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                h.update(m)
            return h.hexdigest()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


THREADS_ENV = "FLOODWAY_ORT_THREADS"


def ort_threads() -> int:
    """ONNX Runtime intra-op threads from ``FLOODWAY_ORT_THREADS`` (0: ORT's default). The
    local pool sets it so that its containers share the machine's cores."""
    return int(os.environ.get(THREADS_ENV) or 0)


def make_tokenizer(folder: Path, max_seq_len: int):  # -> tokenizers.Tokenizer
    """A fast tokenizer from ``tokenizer.json`` that truncates at `max_seq_len` and pads."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=max_seq_len)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=pad_id if pad_id is not None else 0,
                       pad_token="[PAD]" if pad_id is not None else "<pad>")
    return tok


def ort_runner(folder: Path, graph_file: str, files: tuple[str, ...], *, cuda: bool,
               threads: int, mode: str, trt_provider: tuple[str, dict] | None = None):
    """An ONNX Runtime session over `files` (graph first) wrapped as a runner.

    `mode` "read" reads every file sequentially into memory and hands ONNX Runtime the bytes
    (network filesystems); "mmap" lets it open and map them. The pre-optimized graph runs with
    graph optimizations off (they were applied at build time).
    """
    import onnxruntime as ort

    from floodway.build.weights import read_into_memory

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    if graph_file == OPT_FILE:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers: list = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda \
        else ["CPUExecutionProvider"]
    if trt_provider is not None:
        providers.insert(0, trt_provider)
    if mode == "read":
        buffers = {rel: read_into_memory(folder / rel) for rel in files}
        data = [rel for rel in files if rel != graph_file]
        if data:
            opts.add_external_initializers_from_files_in_memory(
                data, [buffers[r] for r in data], [len(buffers[r]) for r in data])
        session = ort.InferenceSession(bytes(buffers[graph_file]), sess_options=opts,
                                       providers=providers)
    else:
        session = ort.InferenceSession(str(folder / graph_file), sess_options=opts,
                                       providers=providers)
    want = "TensorrtExecutionProvider" if trt_provider else "CUDAExecutionProvider"
    if cuda and session.get_providers()[0] != want:
        raise RuntimeError(f"ONNX Runtime did not place the graph on {want}")
    out_names = [o.name for o in session.get_outputs()]

    def run(feeds):
        return dict(zip(out_names, session.run(out_names, dict(feeds)), strict=True))

    run.input_names = tuple(i.name for i in session.get_inputs())  # type: ignore[attr-defined]
    return run


class Prefetch:
    """On threads: sha256 of the optimized graph's files and of the preprocessing files
    (``tokenizer/``, ``processor/``; started at construction); the CPU session on that graph
    (`start_session`) and the tokenizer, where the build has one (`start_tokenizer`)."""

    def __init__(self, folder: Path, *, threads: int, mode: str):
        self.folder, self.threads, self.mode = Path(folder), threads, mode
        self.files: tuple[str, ...] = ()
        self.runner: Any = None
        self.digests: dict[str, str] = {}
        self.tokenizer: Any = None
        self.max_seq_len = 0
        self.tok_files: tuple[str, ...] = ()
        self.has_tokenizer = False
        self.error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        try:
            raw = json.loads((self.folder / "manifest.json").read_bytes())
            arts = raw.get("artifacts", {})
            self.max_seq_len = int(raw.get("max_seq_len", 0))
            self.tok_files = tuple(r for r in arts if r.startswith(("tokenizer/", "processor/")))
            self.has_tokenizer = "tokenizer/tokenizer.json" in arts
            if INT8_FILE in arts and any(
                    r.get("precision") == "int8" and r.get("device") == "cpu"
                    and r.get("passed") is True for r in raw.get("precisions", [])):
                files: tuple[str, ...] = (INT8_FILE,)   # what the loader plans first on CPU
            else:
                files = tuple(f for f in (OPT_FILE, OPT_DATA) if f in arts)
            if files:
                # a short file would make ORT fail: leave it to load() to report
                if all((self.folder / r).stat().st_size == arts[r]["bytes"] for r in files):
                    self.files = files
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            self.error = e
        if self.files:
            # Hashing imports nothing and releases the GIL: it overlaps whatever the caller
            # imports next (ONNX Runtime, numpy) on an otherwise idle core.
            self._start(self._hash)

    def start_session(self) -> None:
        """Start the session thread. Import onnxruntime on the calling thread first."""
        if self.files:
            self._start(self._session)

    def start_tokenizer(self) -> None:
        """Start the tokenizer thread. Import tokenizers on the calling thread first."""
        if self.files and self.has_tokenizer:
            self._start(self._tokenizer)

    def _start(self, fn) -> None:
        t = threading.Thread(target=self._guard, args=(fn,), daemon=True,
                             name=f"floodway-prefetch-{fn.__name__}")
        self._threads.append(t)
        t.start()

    def _guard(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - speculation: load() redoes it and reports
            self.error = e

    def _session(self) -> None:
        self.runner = ort_runner(self.folder, self.files[0], self.files, cuda=False,
                                 threads=self.threads, mode=self.mode)

    def _hash(self) -> None:
        # sha256 releases the GIL on large blocks: this runs while imports hold it
        self.digests = {rel: sha256_path(self.folder / rel, self.mode)
                        for rel in (*self.files, *self.tok_files)}

    def _tokenizer(self) -> None:
        self.tokenizer = make_tokenizer(self.folder / "tokenizer", self.max_seq_len)

    def join(self) -> None:
        """Wait for the threads (a process must not exit while ONNX Runtime builds a session
        on one: its C++ runtime aborts)."""
        for t in self._threads:
            t.join()

    def take(self, files: tuple[str, ...], *, threads: int, mode: str):
        """(runner, digests) if the prefetched session is the one asked for, else None."""
        self.join()
        if (self.error is None and self.runner is not None and files == self.files
                and threads == self.threads and mode == self.mode):
            return self.runner, self.digests
        return None


def start_prefetch(artifact_dir: str | Path, *, threads: int | None = None) -> Prefetch | None:
    """Start hashing, then building the likely session, on threads; None where a GPU path
    would be planned first (nothing to speculate on). `threads` as for
    `floodway.build.loader.load`."""
    from floodway.build.netfs import read_mode

    if which("nvidia-smi"):
        return None
    folder = Path(artifact_dir)
    threads = threads if threads is not None else ort_threads()
    pre = Prefetch(folder, threads=threads, mode=read_mode(folder))
    if not pre.files:   # no optimized graph (e.g. an endpoint with its own runtime)
        return pre
    # Import the extension modules here, on the calling thread, before the threads that use
    # them start: numpy's C extension fails to initialize when two threads import it at once
    # ("partially initialized module numpy._core._multiarray_umath"), seen here.
    import onnxruntime  # noqa: F401

    pre.start_session()   # the session takes longest: it overlaps the tokenizers import
    if pre.has_tokenizer:
        import tokenizers  # noqa: F401

        pre.start_tokenizer()
    return pre


def which(exe: str) -> str | None:
    """The path of executable `exe` on PATH, or None: `shutil.which` without importing shutil,
    which pulls in the compression modules (~4 ms of a container's start, measured)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        p = os.path.join(d or ".", exe)
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return p
    return None
