"""The GPU class of an endpoint on Modal: the plain class that `to_modal` decorates.

Its ``@modal.enter(snap=True)`` hook loads the latest build on the CPU before the memory
snapshot; ``@modal.enter(snap=False)`` moves the session to CUDA after a restore and records
the start for the router's cold-start estimate (`floodway.deploy.modal_stats`); the
``@modal.batched`` method ``predict`` runs a batch, a failing item answering
``{ITEM_ERROR: ...}`` alone instead of failing its whole batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import modal

from floodway.deploy.modal_build import _store_root
from floodway.deploy.modal_calls import ITEM_ERROR
from floodway.deploy.modal_stats import record_cold_start
from floodway.functions.endpoint import Endpoint


def move_to_cuda(loaded: Any) -> str:
    """Re-create an ONNX Runtime CPU session on CUDA when this container has the CUDA provider.

    Returns the backend now in use (``onnxruntime-cuda``, or the unchanged one). A no-op with
    an image whose ONNX Runtime wheel is CPU-only.
    """
    import onnxruntime as ort

    from floodway.build.loader import ONNX_FILE

    if loaded.backend != "onnxruntime-cpu" \
            or "CUDAExecutionProvider" not in ort.get_available_providers():
        return loaded.backend
    session = ort.InferenceSession(str(Path(loaded.artifact_dir) / ONNX_FILE),
                                   providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        return loaded.backend  # the provider is built in but no device is usable: stay on CPU
    out_names = [o.name for o in session.get_outputs()]

    def runner(feeds):
        return dict(zip(out_names, session.run(out_names, dict(feeds)), strict=True))

    loaded.runner = runner
    loaded.backend = "onnxruntime-cuda"
    return loaded.backend


def worker_class(ep: Endpoint, artifacts_path: str) -> type:
    """The plain Python class behind an endpoint's Modal class (not yet decorated by the App)."""
    batching = ep.batching

    class Worker:
        model: Any = None
        hooks_ran: tuple[str, ...] = ()
        load_wall: tuple[float, float] = (0.0, 0.0)

        @modal.enter(snap=True)
        def load(self) -> None:
            """Before the memory snapshot: imports and the CPU-side load of the latest build.

            Runs without a GPU; a new build reaches containers on the next `modal deploy`
            (which also retakes the snapshot). Raises ArtifactError when there is no build.
            """
            from floodway.build.loader import load
            from floodway.build.store import ArtifactStore

            w0, t0 = time.time(), time.perf_counter()
            self.model = load(ArtifactStore(_store_root(artifacts_path)).latest(ep.name))
            self.model.timings_s["enter_snap"] = time.perf_counter() - t0
            self.load_wall = (w0, time.time())
            self.hooks_ran = (*self.hooks_ran, "snap")

        @modal.enter(snap=False)
        def to_gpu(self) -> None:
            """After restore, with the GPU attached: move the session to CUDA when possible;
            on Modal, record this start for the router's cold-start estimate."""
            w0, t0 = time.time(), time.perf_counter()
            move_to_cuda(self.model)
            self.model.timings_s["enter_gpu"] = time.perf_counter() - t0
            self.hooks_ran = (*self.hooks_ran, "gpu")
            if not modal.is_local():
                record_cold_start(ep.name, *self.load_wall, w0, time.time())

        @modal.batched(max_batch_size=batching.max_batch_rows, wait_ms=int(batching.wait_ms))
        def predict(self, inputs: list) -> list:
            """A batch of N input rows -> N outputs, in order (callers send one row each).

            A raising batch is re-run item by item; an item that still raises answers
            ``{ITEM_ERROR: "Type: message"}`` instead of failing every row of its batch.
            """
            from floodway.runtime.worker import run_batch

            done, errors = run_batch(ep.fn, self.model, list(enumerate(inputs)))
            outputs: list[Any] = [None] * len(inputs)
            for i, value in done:
                outputs[i] = value
            for i, message in errors:
                outputs[i] = {ITEM_ERROR: message}
            return outputs

    return Worker


__all__ = ["move_to_cuda", "worker_class"]
