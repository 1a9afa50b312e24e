"""A stand-in for cuda-python's ``cuda.bindings.runtime``, for tests without a GPU: "device"
memory is host memory (ctypes buffers), copies are memmoves, streams do nothing. Calls
answer as cuda-python does, a tuple whose first item is the error code (0: success)."""

from __future__ import annotations

import ctypes

_BUFFERS: dict[int, ctypes.Array] = {}


class cudaMemcpyKind:  # noqa: N801 - cuda-python's name
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


def cudaStreamCreate() -> tuple[int, int]:  # noqa: N802 - cuda-python's names below too
    return 0, 1


def cudaMalloc(size: int) -> tuple[int, int]:  # noqa: N802
    buf = ctypes.create_string_buffer(max(1, int(size)))
    _BUFFERS[ctypes.addressof(buf)] = buf
    return 0, ctypes.addressof(buf)


def cudaMemcpyAsync(dst: int, src: int, size: int, kind: int,  # noqa: N802
                    stream: int) -> tuple[int]:
    ctypes.memmove(dst, src, size)
    return (0,)


def cudaStreamSynchronize(stream: int) -> tuple[int]:  # noqa: N802
    return (0,)


def cudaFree(ptr: int) -> tuple[int]:  # noqa: N802
    _BUFFERS.pop(int(ptr), None)
    return (0,)
