"""A stand-in for NVIDIA's ``tensorrt`` module, for tests on machines without a GPU.

It implements the part of the TensorRT 10 Python API that `floodway.build.trt.engine_runner`
uses to deserialize and run an engine, over ONNX Runtime on the CPU. A stand-in engine file
is JSON, ``{"standin_engine": 1, "onnx": "<absolute path of an ONNX graph>"}`` (written by
`tests.unit.build.standin_engine.add_standin_engine`); "deserializing" it opens an ONNX
Runtime CPU session on that graph, so its outputs equal the CPU path's. Device memory is the
stand-in ``cuda.bindings.runtime`` beside this package (host memory).

`DESERIALIZED` and `EXECUTIONS` count what happened in this process, for tests to assert on.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any

import numpy as np

__version__ = "10.13.0"

DESERIALIZED: list[str] = []     # the ONNX graph of each engine deserialized
EXECUTIONS = [0]                 # execute_async_v3 calls


class Logger:
    WARNING = 2

    def __init__(self, level: int = WARNING):
        self.level = level


class TensorIOMode:
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


def nptype(dtype: str) -> type:
    """The numpy scalar type of a tensor dtype (here dtypes are numpy names)."""
    return np.dtype(dtype).type


class Runtime:
    def __init__(self, logger: Logger):
        self.logger = logger

    def deserialize_cuda_engine(self, data: bytes) -> _Engine | None:
        """None for bytes that are not a stand-in engine, as TensorRT answers bad bytes."""
        try:
            spec = json.loads(bytes(data))
        except ValueError:
            return None
        if not isinstance(spec, dict) or spec.get("standin_engine") != 1:
            return None
        return _Engine(spec["onnx"])


class _Engine:
    def __init__(self, onnx_path: str):
        import onnxruntime as ort

        self.session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        DESERIALIZED.append(onnx_path)

    @property
    def num_io_tensors(self) -> int:
        return len(self.inputs) + len(self.outputs)

    def get_tensor_name(self, i: int) -> str:
        return (self.inputs + self.outputs)[i]

    def get_tensor_mode(self, name: str) -> str:
        return TensorIOMode.INPUT if name in self.inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> str:
        return "int64" if name in self.inputs else "float32"

    def create_execution_context(self) -> _Context:
        return _Context(self)


class _Context:
    """Inputs are read from their addresses when an output shape is first asked for (the
    engine runner copies them in before); outputs are copied out on execute."""

    def __init__(self, engine: _Engine):
        self.engine = engine
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.results: dict[str, np.ndarray] | None = None

    def set_input_shape(self, name: str, shape: Any) -> bool:
        self.shapes[name] = tuple(int(d) for d in shape)
        self.results = None
        return True

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = int(address)
        return True

    def _run(self) -> dict[str, np.ndarray]:
        if self.results is None:
            feeds = {}
            for name in self.engine.inputs:
                shape = self.shapes[name]
                count = int(np.prod(shape))
                raw = (ctypes.c_int64 * count).from_address(self.addresses[name])
                feeds[name] = np.ctypeslib.as_array(raw).reshape(shape).copy()
            out = self.engine.session.run(self.engine.outputs, feeds)
            self.results = {n: np.ascontiguousarray(a, dtype=np.float32)
                            for n, a in zip(self.engine.outputs, out, strict=True)}
        return self.results

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self._run()[name].shape

    def execute_async_v3(self, stream: int) -> bool:
        for name, arr in self._run().items():
            ctypes.memmove(self.addresses[name], arr.ctypes.data, arr.nbytes)
        EXECUTIONS[0] += 1
        self.results = None
        return True
