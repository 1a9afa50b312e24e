"""`manifest.json`: what a build produced, from what, with which tools, checked how.

A pydantic model, so the loader validates it before trusting any path it names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceInfo(_Model):
    kind: str                           # "hf" | "local" | "torch" | "none"
    display: str                        # hf://repo@rev, file://path, torch://module:factory
    repo_id: str | None = None
    revision: str | None = None
    factory: str | None = None          # a user's module: "pkg.module:factory"
    files: dict[str, str] = Field(default_factory=dict)   # relative path -> sha256
    allow_random_head: bool = False     # built with a task head initialised at random


class Hardware(_Model):
    hardware_class: str = "cpu"         # "cpu" or the GPU name
    gpu_name: str | None = None
    compute_capability: str | None = None
    tensorrt_version: str | None = None


class TensorSpec(_Model):
    name: str
    dtype: str
    shape: list[str | int]              # symbolic axes as names ("batch", "seq")


class IOSignature(_Model):
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


class FileEntry(_Model):
    bytes: int = Field(ge=0, strict=True)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class EngineEntry(_Model):
    """A TensorRT engine and the stamp it is only valid for."""

    path: str                           # relative: engines/trt-<ver>/sm<XY>/<profile>/model.plan
    tensorrt_version: str
    compute_capability: str
    gpu_name: str
    profile: dict[str, list[int]]       # input name -> [min, opt, max] rows x seq flattened
    precision: str = "fp32"             # "fp16" / "bf16": served only where its gate passed


class ParityCheck(_Model):
    """One parity case: `graph` (the ONNX file, or "preprocess" for an image task's
    preprocessing vs transformers'), its inputs' shape, the outputs compared and the largest
    absolute error found."""

    graph: str = "model.onnx"
    case: str = ""
    rows: int
    seq_len: int | None = None          # None: the inputs have no sequence axis
    padded: bool = False
    outputs: list[str] = Field(default_factory=list)
    max_abs_err: float
    atol: float
    passed: bool


class PrecisionEntry(_Model):
    """A reduced-precision artifact and its accuracy gate (`floodway.build.precision_gate`):
    `artifact` (a graph file or an engine path), the `device` it serves on ("cpu" for int8,
    "gpu" for fp16/bf16), the task's `metric`, the worst value of each measurement over the
    parity cases (`measured`), the bounds it was held to (`tolerance`), each case's values,
    where the gate ran and how the artifact was made. The loader serves it only if `passed`."""

    precision: Literal["fp16", "bf16", "int8"]
    device: Literal["cpu", "gpu"]
    artifact: str
    metric: str
    measured: dict[str, float]
    tolerance: dict[str, float]
    cases: dict[str, dict[str, float]] = Field(default_factory=dict)
    passed: bool
    gated_on: str = ""
    method: str = ""


class TaskInfo(_Model):
    """The task the graph was exported for (`floodway.tasks`) and how parity was judged."""

    name: str = "feature-extraction"
    model_class: str = "AutoModel"      # the transformers class exported ("" for a user's)
    metric: str = "max_abs_err"         # over the task's outputs (unpadded positions only
    per_token: bool = True              # where the outputs have a sequence axis)
    tolerance: float = 1e-3
    labels: list[str] = Field(default_factory=list)   # class names by output index


class GenerationInfo(_Model):
    """What a text-generation build's engine needs beyond the graph (`floodway.generate`):
    the cache's shape per layer (heads, head_dim), the vocabulary, the end-of-sequence ids
    and the id put before an empty prompt."""

    layers: int = Field(ge=1)
    heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    eos_token_ids: list[int] = Field(default_factory=list)
    bos_token_id: int | None = None


class Manifest(_Model):
    """Written last at publish time; its presence marks a complete build.

    `runtime`: "floodway" (the loader opens the graph: TensorRT, ONNX Runtime or PyTorch) or
    "own" (the endpoint brings its own runtime with `load=`, or has no model source: the build
    holds the source's files, or nothing, and no graph).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    endpoint: str
    runtime: Literal["floodway", "own"] = "floodway"
    task: TaskInfo | None = Field(default_factory=TaskInfo)   # None: no model source
    build_key: str
    created_at: str
    source: SourceInfo
    build: dict[str, object]
    toolchain: dict[str, str]
    hardware: Hardware
    io: IOSignature
    max_seq_len: int = Field(ge=1, strict=True)
    artifacts: dict[str, FileEntry]     # relative path -> size and hash
    engines: list[EngineEntry] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)   # stage -> why it did not run
    parity: list[ParityCheck] = Field(default_factory=list)
    timings_s: dict[str, float] = Field(default_factory=dict)
    generation: GenerationInfo | None = None    # text-generation builds only
    precisions: list[PrecisionEntry] = Field(default_factory=list)   # reduced artifacts
    # Seconds from spawning a fresh process to this build loaded in it, measured as it was
    # published (`floodway.build.probe`); None: not measured (no graph, or the probe failed).
    cold_start_s: float | None = Field(default=None, ge=0)
    warnings: list[str] = Field(default_factory=list)   # what the build went on despite

    def write(self, folder: Path) -> Path:
        path = folder / MANIFEST_NAME
        path.write_text(self.model_dump_json(indent=2))
        return path

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        return cls.model_validate_json((folder / MANIFEST_NAME).read_text())
