"""The manifest as the cold-start loader reads it: checked without pydantic.

`floodway.build.manifest.Manifest` (pydantic) is the schema of record: builds write it and
tools read it. A container, though, only needs a handful of its fields, and importing pydantic
and building the model's schema costs about 0.2 s of every cold start (measured with
``python -X importtime``; see benchmarks/cold_start.py). `ManifestView.parse` checks exactly
the fields the loader trusts, as strictly (types, hex digests, paths that stay inside the
build folder), and raises ArtifactError naming the field. Tests hold the two to agreement.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from floodway.errors import ArtifactError

SCHEMA_VERSION = 1
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileRef:
    bytes: int
    sha256: str


@dataclass(frozen=True)
class EngineRef:
    path: str
    tensorrt_version: str
    compute_capability: str
    gpu_name: str
    precision: str = "fp32"


@dataclass(frozen=True)
class PrecisionRef:
    """A reduced-precision artifact's gate (`manifest.PrecisionEntry`): what the loader
    needs to decide whether to serve it."""

    precision: str
    device: str
    artifact: str
    passed: bool
    summary: str = ""       # the measurements against their bounds, for the load log


@dataclass(frozen=True)
class InputRef:
    """One graph input: numpy dtype name and shape (a str names a dynamic axis)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


@dataclass(frozen=True)
class GenerationRef:
    """A text-generation build's cache shape and special ids (`manifest.GenerationInfo`)."""

    layers: int
    heads: int
    head_dim: int
    vocab_size: int
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None


@dataclass(frozen=True)
class ManifestView:
    endpoint: str
    build_key: str
    inputs: tuple[str, ...]
    max_seq_len: int
    max_batch_rows: int
    artifacts: dict[str, FileRef]
    engines: tuple[EngineRef, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    task: str = "feature-extraction"
    runtime: str = "floodway"
    input_specs: tuple[InputRef, ...] = ()
    outputs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    factory: str | None = None      # a user's module: "pkg.module:factory"
    generation: GenerationRef | None = None     # text-generation builds only
    precisions: tuple[PrecisionRef, ...] = ()

    def passed(self, precision: str, device: str) -> PrecisionRef | None:
        """The passed gate of `precision` for `device` ("cpu" / "gpu"), if any."""
        return next((r for r in self.precisions if r.precision == precision
                     and r.device == device and r.passed), None)

    @classmethod
    def parse(cls, raw: bytes | str) -> ManifestView:
        """Parse manifest.json. Raises ArtifactError naming the first field that is wrong."""
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise ArtifactError(f"manifest.json is not JSON: {e}") from None
        d = _obj(data, "manifest")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ArtifactError(f"manifest.json: schema_version {d.get('schema_version')!r} is "
                                f"not {SCHEMA_VERSION} (rebuild with this floodway)")
        artifacts = {}
        for rel, entry in _obj(d.get("artifacts"), "artifacts").items():
            _rel_path(rel, f"artifacts[{rel!r}]")
            e = _obj(entry, f"artifacts[{rel!r}]")
            size, digest = e.get("bytes"), e.get("sha256")
            if not _is_int(size) or size < 0:
                raise ArtifactError(f"manifest.json: artifacts[{rel!r}].bytes = {size!r} is not "
                                    "a size")
            if not isinstance(digest, str) or not _HEX64.match(digest):
                raise ArtifactError(f"manifest.json: artifacts[{rel!r}].sha256 = {digest!r} is "
                                    "not a sha256")
            artifacts[rel] = FileRef(size, digest)
        io = _obj(d.get("io"), "io")
        specs = tuple(_input(i) for i in _list(io.get("inputs"), "io.inputs"))
        outputs = tuple(_str(_obj(o, "io.outputs[]").get("name"), "io.outputs[].name")
                        for o in _list(io.get("outputs", []), "io.outputs"))
        task = d.get("task", {})
        task = _obj(task, "task") if task is not None else {"name": "none"}
        labels = tuple(_str(v, "task.labels[]") for v in _list(task.get("labels", []),
                                                                "task.labels"))
        runtime = d.get("runtime", "floodway")
        if runtime not in ("floodway", "own"):
            raise ArtifactError(f"manifest.json: runtime = {runtime!r} is not 'floodway' or "
                                "'own'")
        engines = []
        for i, e in enumerate(_list(d.get("engines", []), "engines")):
            e = _obj(e, f"engines[{i}]")
            ref = EngineRef(*(_str(e.get(k, "fp32" if k == "precision" else None),
                                   f"engines[{i}].{k}") for k in
                              ("path", "tensorrt_version", "compute_capability", "gpu_name",
                               "precision")))
            _rel_path(ref.path, f"engines[{i}].path")
            engines.append(ref)
        skipped = _obj(d.get("skipped", {}), "skipped")
        rows = _obj(d.get("build"), "build").get("max_batch_rows")
        if not _is_int(rows) or rows < 1:
            raise ArtifactError(f"manifest.json: build.max_batch_rows = {rows!r} is not a count")
        max_seq_len = d.get("max_seq_len")
        if not _is_int(max_seq_len) or max_seq_len < 1:
            raise ArtifactError(f"manifest.json: max_seq_len = {max_seq_len!r} is not a length")
        return cls(endpoint=_str(d.get("endpoint"), "endpoint"),
                   build_key=_str(d.get("build_key"), "build_key"),
                   inputs=tuple(s.name for s in specs),
                   max_seq_len=max_seq_len, max_batch_rows=rows, artifacts=artifacts,
                   engines=tuple(engines),
                   skipped={_str(k, "skipped"): _str(v, f"skipped[{k!r}]")
                            for k, v in skipped.items()},
                   task=_str(task.get("name", "feature-extraction"), "task.name"),
                   runtime=runtime, input_specs=specs, outputs=outputs, labels=labels,
                   factory=_factory(d), generation=_generation(d.get("generation")),
                   precisions=tuple(_precision(i, p) for i, p in
                                    enumerate(_list(d.get("precisions", []), "precisions"))))


def _precision(i: int, v: Any) -> PrecisionRef:
    p = _obj(v, f"precisions[{i}]")
    name, device = p.get("precision"), p.get("device")
    if name not in ("fp16", "bf16", "int8") or device not in ("cpu", "gpu"):
        raise ArtifactError(f"manifest.json: precisions[{i}] = {name!r} on {device!r} is not "
                            "a reduced precision on 'cpu' or 'gpu'")
    artifact = _str(p.get("artifact"), f"precisions[{i}].artifact")
    _rel_path(artifact, f"precisions[{i}].artifact")
    passed = p.get("passed")
    if not isinstance(passed, bool):
        raise ArtifactError(f"manifest.json: precisions[{i}].passed = {passed!r} is not a bool")
    measured = _obj(p.get("measured", {}), f"precisions[{i}].measured")
    bounds = _obj(p.get("tolerance", {}), f"precisions[{i}].tolerance")
    summary = ", ".join(f"{k} {v:.4g} (bound {bounds.get(k)})" for k, v in measured.items()
                        if isinstance(v, (int, float)))
    return PrecisionRef(name, device, artifact, passed, summary)


def _generation(v: Any) -> GenerationRef | None:
    if v is None:
        return None
    g = _obj(v, "generation")
    dims = {}
    for k in ("layers", "heads", "head_dim", "vocab_size"):
        if not _is_int(g.get(k)) or g[k] < 1:
            raise ArtifactError(f"manifest.json: generation.{k} = {g.get(k)!r} is not a count")
        dims[k] = g[k]
    eos = _list(g.get("eos_token_ids", []), "generation.eos_token_ids")
    bos = g.get("bos_token_id")
    if not all(_is_int(e) for e in eos) or not (bos is None or _is_int(bos)):
        raise ArtifactError(f"manifest.json: generation token ids {eos!r}, {bos!r} are not "
                            "integers")
    return GenerationRef(**dims, eos_token_ids=tuple(eos), bos_token_id=bos)


def _factory(d: dict[str, Any]) -> str | None:
    factory = _obj(d.get("source", {}), "source").get("factory")
    return None if factory is None else _str(factory, "source.factory")


def _input(v: Any) -> InputRef:
    i = _obj(v, "io.inputs[]")
    name = _str(i.get("name"), "io.inputs[].name")
    dims = _list(i.get("shape", []), f"io.inputs[{name!r}].shape")
    if not all(_is_int(x) or (isinstance(x, str) and x) for x in dims):
        raise ArtifactError(f"manifest.json: io.inputs[{name!r}].shape = {dims!r} should hold "
                            "sizes and axis names")
    return InputRef(name, _str(i.get("dtype", "int64"), f"io.inputs[{name!r}].dtype"),
                    tuple(dims))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ArtifactError(f"manifest.json: {where} should be an object, got {type(v).__name__}")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if not isinstance(v, list):
        raise ArtifactError(f"manifest.json: {where} should be a list, got {type(v).__name__}")
    return v


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise ArtifactError(f"manifest.json: {where} = {v!r} should be a non-empty string")
    return v


def _rel_path(rel: Any, where: str) -> None:
    p = PurePosixPath(_str(rel, where))
    if p.is_absolute() or ".." in p.parts or "\\" in rel:
        raise ArtifactError(f"manifest.json: {where} path {rel!r} leaves the build folder")
