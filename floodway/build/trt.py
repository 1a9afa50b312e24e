"""TensorRT: compile an engine from the ONNX graph, and run one (GPU machines only).

Written for both TensorRT Python APIs in use: 10.x, where reduced precision is a builder flag
(``BuilderFlag.FP16``), and 11.x, which removed the precision flags: networks are strongly
typed and precision comes from the graph's own dtypes (TensorRT 11 release notes).
Engines only run on the TensorRT version and GPU compute capability that built them, so each
is stamped with both and kept under ``engines/trt-<ver>/sm<XY>/<profile>/``. The timing cache
is persisted beside it so rebuilds for the same GPU are fast.

No torch: device memory goes through cuda-python (``cuda.bindings.runtime``).
Nothing here runs on a machine without a CUDA GPU and the tensorrt wheel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from floodway.errors import ArtifactError, BuildError

WORKSPACE_BYTES = 4 << 30


def trt_major(trt: Any) -> int:
    return int(str(trt.__version__).split(".")[0])


def profile_shapes(inputs: Sequence[str | tuple[str, Sequence[int | str]]], max_rows: int,
                   max_seq: int, opt_rows: int) -> dict[str, list[int]]:
    """Optimization profile per input: its min, opt and max shapes, flattened
    ([min dims..., opt dims..., max dims...]; for (batch, seq) inputs:
    [min_rows, min_seq, opt_rows, opt_seq, max_rows, max_seq]).

    `inputs`: (name, shape) pairs, a str in a shape naming a dynamic axis; a bare name is a
    (batch, seq) input. The batch axis runs from 1, with its opt at the dynamic batcher's
    batch size, to the build cap (Build.max_batch_rows); any other dynamic axis from 1, opt
    at half, to Build.max_seq_len; a fixed axis is its size throughout.
    """
    def axis(d: int | str) -> tuple[int, int, int]:
        if d == "batch":
            return 1, min(opt_rows, max_rows), max_rows
        if isinstance(d, str):
            return 1, max(1, max_seq // 2), max_seq
        return int(d), int(d), int(d)

    out = {}
    for spec in inputs:
        name, shape = (spec, ("batch", "seq")) if isinstance(spec, str) else spec
        lo, opt, hi = zip(*(axis(d) for d in shape), strict=True)
        out[name] = [*lo, *opt, *hi]
    return out


def split_profile(flat: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...],
                                                  tuple[int, ...]]:
    """A `profile_shapes` entry -> its (min, opt, max) shapes."""
    n = len(flat) // 3
    return tuple(flat[:n]), tuple(flat[n:2 * n]), tuple(flat[2 * n:])


def profile_id(shapes: dict[str, list[int]]) -> str:
    """A folder name for a profile: ``b<max rows>-s<max seq>-o<opt rows>x<opt seq>`` for
    (batch, seq) inputs, ``b<max rows>-<other max dims>-o<opt dims>`` otherwise."""
    _, opt, hi = split_profile(next(iter(shapes.values())))
    if len(hi) == 2:
        return f"b{hi[0]}-s{hi[1]}-o{opt[0]}x{opt[1]}"
    return f"b{hi[0]}-{'x'.join(map(str, hi[1:])) or 'row'}-o{'x'.join(map(str, opt))}"


def compile_engine(onnx_path: Path, plan_path: Path, shapes: dict[str, list[int]], *,
                   precision: str = "fp32") -> dict[str, Any]:
    """Build and serialize an engine; returns {"tensorrt_version", "seconds", "precision"}.

    `precision` "fp16" / "bf16": TensorRT 10 sets the builder flag; TensorRT 11 (strongly
    typed, no precision flags) parses the graph converted to that type
    (`floodway.build.quantize.convert_float`). Raises BuildError('compile') when parsing or
    building fails.
    """
    import time

    import tensorrt as trt

    t0 = time.perf_counter()
    major = trt_major(trt)
    if precision != "fp32" and major >= 11:
        from floodway.build.quantize import convert_float

        typed = plan_path.parent.parent / f"typed-{precision}.onnx"
        typed.parent.mkdir(parents=True, exist_ok=True)
        convert_float(onnx_path.parent, onnx_path.name, onnx_path.name + ".data", typed,
                      precision)
        onnx_path = typed
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if major >= 11:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError("compile", f"TensorRT could not parse {onnx_path.name}: {errs}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if precision != "fp32" and major < 11:
        config.set_flag(trt.BuilderFlag.FP16 if precision == "fp16" else trt.BuilderFlag.BF16)
    profile = builder.create_optimization_profile()
    for name, s in shapes.items():
        profile.set_shape(name, *split_profile(s))
    config.add_optimization_profile(profile)
    cache_path = plan_path.parent / "timing.cache"
    cache = config.create_timing_cache(cache_path.read_bytes() if cache_path.exists() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BuildError("compile", "TensorRT returned no engine (see its log above)")
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_bytes(bytes(serialized))
    cache_path.write_bytes(bytes(config.get_timing_cache().serialize()))
    if onnx_path.name.startswith("typed-"):
        onnx_path.unlink(missing_ok=True)
        (onnx_path.parent / (onnx_path.name + ".data")).unlink(missing_ok=True)
    return {"tensorrt_version": str(trt.__version__), "seconds": time.perf_counter() - t0,
            "precision": precision}


def _check(err: Any) -> None:
    code = err[0] if isinstance(err, tuple) else err
    if int(code) != 0:
        raise ArtifactError(f"CUDA error {code}")


def engine_runner(plan_path: Path, manifest: Any, data: bytes | None = None):
    """Deserialize an engine and return a runner (named int64 arrays -> named outputs).

    `data`: the engine file's bytes when already read (e.g. before a memory snapshot; None:
    read `plan_path` now). Needs the CUDA device: call it where the GPU is attached. The
    runner may be called from several threads (a Modal class with input concurrency runs
    its batches on threads): calls take turns, since they share one execution context and
    stream. Raises ArtifactError when TensorRT cannot deserialize the engine.
    """
    import threading

    import tensorrt as trt
    from cuda.bindings import runtime as cudart

    logger = trt.Logger(trt.Logger.WARNING)
    engine = trt.Runtime(logger).deserialize_cuda_engine(
        bytes(data) if data is not None else plan_path.read_bytes())
    if engine is None:
        raise ArtifactError(f"TensorRT could not deserialize {plan_path}")
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = tuple(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
    outputs = [n for n in names if n not in inputs]
    err, stream = cudart.cudaStreamCreate()
    _check(err)
    turn = threading.Lock()

    def run(feeds):
        with turn:
            return _run_once(feeds)

    def _run_once(feeds):
        ptrs = []
        try:
            for n in inputs:
                arr = np.ascontiguousarray(feeds[n], dtype=trt.nptype(engine.get_tensor_dtype(n)))
                context.set_input_shape(n, arr.shape)
                err, ptr = cudart.cudaMalloc(arr.nbytes)
                _check(err)
                ptrs.append(ptr)
                _check(cudart.cudaMemcpyAsync(ptr, arr.ctypes.data, arr.nbytes,
                                              cudart.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                              stream))
                context.set_tensor_address(n, ptr)
            host = {}
            for n in outputs:
                shape = tuple(context.get_tensor_shape(n))
                host[n] = np.empty(shape, dtype=trt.nptype(engine.get_tensor_dtype(n)))
                err, ptr = cudart.cudaMalloc(host[n].nbytes)
                _check(err)
                ptrs.append(ptr)
                context.set_tensor_address(n, ptr)
            if not context.execute_async_v3(stream):
                raise ArtifactError("TensorRT execution failed")
            for n, ptr in zip(outputs, ptrs[len(inputs):], strict=True):
                _check(cudart.cudaMemcpyAsync(host[n].ctypes.data, ptr, host[n].nbytes,
                                              cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                              stream))
            _check(cudart.cudaStreamSynchronize(stream))
            return {n: host[n].astype(np.float32) for n in outputs}
        finally:
            for ptr in ptrs:
                cudart.cudaFree(ptr)

    run.input_names = inputs  # type: ignore[attr-defined]
    return run


def ort_trt_provider(cache_root: Path, model_sha256: str, shapes: dict[str, list[int]],
                     fp16: bool = False) -> tuple[str, dict[str, str]]:
    """ONNX Runtime's TensorRT execution provider options, its engine cache keyed by the
    model's hash (from the manifest), so a changed model never reuses a stale engine
    (ORT docs: TensorRT EP ``trt_engine_cache_path``, ``trt_profile_*_shapes``). `fp16`:
    only where the build's fp16 artifact passed its accuracy gate (the loader decides)."""
    cache = cache_root / "ort-trt" / (model_sha256[:16] + ("-fp16" if fp16 else ""))
    cache.mkdir(parents=True, exist_ok=True)

    def fmt(i: int) -> str:
        return ",".join(f"{n}:{'x'.join(map(str, split_profile(s)[i]))}"
                        for n, s in shapes.items())

    return "TensorrtExecutionProvider", {
        "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache),
        "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(cache),
        "trt_fp16_enable": str(fp16), "trt_profile_min_shapes": fmt(0),
        "trt_profile_opt_shapes": fmt(1), "trt_profile_max_shapes": fmt(2)}
