"""Read a safetensors file into memory at the speed of the disk, without torch.

One sequential `readinto` of the whole payload into a single preallocated buffer, then
zero-copy numpy views per tensor. Format (https://github.com/huggingface/safetensors):
little-endian u64 header size N, N bytes of JSON header (dtype, shape, data_offsets per
tensor), then the raw bytes. `mode="mmap"` maps the file instead (fast on local disks, slow on
network filesystems; see `floodway.build.netfs`).
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np

from floodway.errors import ArtifactError

CHUNK = 64 * 1024 * 1024   # large reads: few syscalls, sequential access on network storage
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}


def read_header(f) -> tuple[dict, int]:
    raw = f.read(8)
    if len(raw) < 8:
        raise ArtifactError(f"{f.name}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw)
    try:
        header = json.loads(f.read(n))
    except ValueError as e:
        raise ArtifactError(f"{f.name}: unreadable safetensors header ({e})") from e
    return header, 8 + n


def read_into_memory(path: str | Path) -> np.ndarray:
    """The whole file as one uint8 buffer, read sequentially in CHUNK-sized pieces.

    `np.empty`, not `bytearray(size)`: the latter zero-fills first, which costs a second pass
    over the memory (measured: 0.68 vs 1.55 GB/s for 1 GiB, raw read 1.65 GB/s).
    """
    path = Path(path)
    size = path.stat().st_size
    buf = np.empty(size, dtype=np.uint8)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        pos = 0
        while pos < size:
            n = f.readinto(view[pos:pos + CHUNK])
            if not n:
                raise ArtifactError(f"{path}: file shrank while reading ({pos} of {size} bytes)")
            pos += n
    return buf


def load_safetensors(path: str | Path, *, mode: str = "read") -> dict[str, np.ndarray]:
    """All tensors of a safetensors file as numpy arrays (BF16 as raw uint16).

    `mode`: "read" (one sequential read, every byte materialized) or "mmap" (pages fault in
    on first touch). Raises ArtifactError on a truncated file or an unknown dtype.
    """
    path = Path(path)
    with path.open("rb") as f:
        header, start = read_header(f)
    if mode == "mmap":
        with path.open("rb") as f:
            data: np.ndarray | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    else:
        data = read_into_memory(path)
    out: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        if start + hi > len(data):
            raise ArtifactError(f"{path}: tensor {name} ends at byte {start + hi}, the file has "
                                f"{len(data)} (truncated)")
        dtype = DTYPES.get(meta["dtype"])
        if dtype is None:
            raise ArtifactError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
        arr = np.frombuffer(data, dtype=dtype, count=(hi - lo) // np.dtype(dtype).itemsize,
                            offset=start + lo)
        out[name] = arr.reshape(meta["shape"])
    return out
