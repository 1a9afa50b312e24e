"""`Artifacts`: what an endpoint's `load=` hook receives: the files of its build, checked.

    def load(artifacts):                        # runs once per container
        return MyPipeline.from_pretrained(artifacts.source_dir)

    @app.endpoint(model=fw.HFModel(...), load=load, gpu="L4")
    def generate(pipe, prompts: list[str]) -> list[str]: ...

A build for such an endpoint (`floodway.build.own`) holds the source's files as fetched under
``source/`` (an HFModel or LocalModel), or the module's state dict as
``weights/model.safetensors`` (a TorchModel), or nothing (no model source). `open_artifacts`
checks every file's size against the manifest at once and hashes them (sha256) on a thread
while the hook runs; `Artifacts.check()` waits for the hashes and raises ArtifactError for
an altered file. `load_own` does all of it for a container (`floodway.runtime.worker`; the
Modal class splits it at the memory snapshot, `floodway.modal.worker.gpu_class`).

No torch, no pydantic: a container pays only for what its hook imports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floodway.build.backends import Task, mismatched, verify_files
from floodway.build.manifest_view import ManifestView
from floodway.errors import ArtifactError

SOURCE_DIR = "source"
WEIGHTS_FILE = "weights/model.safetensors"


@dataclass
class Artifacts:
    """A published build, opened for a `load=` hook.

    `folder`: the build folder; `manifest`: its manifest (`ManifestView`); `files`: the
    relative paths it lists. `source_dir` and `weights` point at the source's files and the
    state-dict snapshot. `path(rel)` is one listed file.
    """

    folder: Path
    manifest: ManifestView
    _hashing: Task | None = field(default=None, repr=False)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(self.manifest.artifacts)

    @property
    def endpoint(self) -> str:
        return self.manifest.endpoint

    @property
    def build_key(self) -> str:
        return self.manifest.build_key

    def path(self, rel: str) -> Path:
        """The file `rel` of the build (e.g. ``"source/config.json"``). Raises ArtifactError
        when the manifest does not list it."""
        if rel not in self.manifest.artifacts:
            raise ArtifactError(f"build {self.build_key} of {self.endpoint!r} has no {rel} "
                                f"(it has {len(self.files)} files)")
        return self.folder / rel

    @property
    def source_dir(self) -> Path:
        """The source's files as fetched (HF format: config, tokenizer, weights), for
        ``from_pretrained(artifacts.source_dir)``. Raises ArtifactError when the build holds
        none (a TorchModel or no model source)."""
        if not any(r.startswith(SOURCE_DIR + "/") for r in self.manifest.artifacts):
            raise ArtifactError(f"build {self.build_key} of {self.endpoint!r} holds no source "
                                "files (they come with an HFModel or LocalModel source)")
        return self.folder / SOURCE_DIR

    @property
    def weights(self) -> Path | None:
        """The state dict snapshot ``weights/model.safetensors`` (a TorchModel), or None."""
        return self.folder / WEIGHTS_FILE if WEIGHTS_FILE in self.manifest.artifacts else None

    def read_weights(self, *, mode: str = "read") -> dict[str, Any]:
        """The snapshot's tensors as numpy arrays (BF16 as raw uint16), without torch
        (`floodway.build.weights.load_safetensors`). Raises ArtifactError when there is none."""
        from floodway.build.weights import load_safetensors

        if self.weights is None:
            raise ArtifactError(f"build {self.build_key} of {self.endpoint!r} has no "
                                f"{WEIGHTS_FILE}")
        return load_safetensors(self.weights, mode=mode)

    def check(self) -> None:
        """Wait for the files' sha256 (started by `open_artifacts`). Raises ArtifactError
        naming the files that do not match the manifest (altered since the build)."""
        task, self._hashing = self._hashing, None
        bad = task.result() if task is not None else []
        if bad:
            raise ArtifactError(f"{', '.join(bad)} do(es) not match the manifest sha256 "
                                "(altered)")


def open_artifacts(folder: str | Path, *, verify: str = "sha256") -> Artifacts:
    """Open a published build: its manifest read and checked, every listed file's size
    checked now and (`verify` "sha256") its hash computed on a thread (`Artifacts.check`
    waits for it). Raises ArtifactError for a missing or invalid manifest, or a file missing
    or of another size."""
    from floodway.build.loader import read_manifest
    from floodway.build.netfs import read_mode

    folder = Path(folder)
    manifest = read_manifest(folder)
    verify_files(folder, manifest, verify="size")
    hashing = None
    if verify == "sha256" and manifest.artifacts:
        hashing = Task(mismatched, folder, manifest, tuple(manifest.artifacts), read_mode(folder))
    return Artifacts(folder, manifest, hashing)


def call_load(ep: Any, artifacts: Artifacts) -> Any:
    """`ep.load(artifacts)`, or None for an endpoint without a hook. A hook that raises
    raises here (the container reports it and backs off)."""
    return ep.load(artifacts) if ep.load is not None else None


def backend_label(ep: Any) -> str:
    """What a container reports as its backend: "load-hook", or "no-model"."""
    return "load-hook" if ep.load is not None else "no-model"


def load_own(ep: Any, folder: str | Path, *, verify: str = "sha256",
             ) -> tuple[Any, str, dict[str, float]]:
    """For an endpoint that brings its own runtime: open its build, call its `load` hook
    while the files are hashed, check the hashes -> (what the hook returned, the backend
    label, seconds per phase: ``artifact_load`` (sizes and hashes) and ``load_hook``)."""
    t0 = time.perf_counter()
    artifacts = open_artifacts(folder, verify=verify)
    t1 = time.perf_counter()
    model = call_load(ep, artifacts)
    t2 = time.perf_counter()
    artifacts.check()
    t3 = time.perf_counter()
    return model, backend_label(ep), {"artifact_load": (t1 - t0) + (t3 - t2),
                                      "load_hook": t2 - t1}


__all__ = ["SOURCE_DIR", "WEIGHTS_FILE", "Artifacts", "backend_label", "call_load",
           "load_own", "open_artifacts"]
