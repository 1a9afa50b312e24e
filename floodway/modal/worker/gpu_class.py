"""The GPU class of an endpoint on Modal: the plain class that `to_modal` decorates.

Loading is split at the memory snapshot (`floodway.build.loader`: `prepare`, then `finish`).
A CPU memory snapshot is taken without the GPU attached, so:

- ``@modal.enter(snap=True)`` (``load``) runs `prepare` on the latest build: imports, the
  manifest, the tokenizer, the files' sha256, the TensorRT engine read into memory. All of
  it lands in the snapshot.
- ``@modal.enter(snap=False)`` (``to_gpu``) runs after a restore, with the GPU attached:
  it detects the hardware afresh (`fresh_detect`: the answer cached before the snapshot saw
  no GPU), plans, and opens the first path that works (a TensorRT engine whose stamp matches,
  else ONNX Runtime CUDA, ...). It also records the start for the router's cold-start
  estimate (`floodway.modal.stats`).

Where the device is known before the snapshot, ``load`` also opens the backend, so the open
session is in the snapshot: a CPU endpoint, and a GPU endpoint with
``gpu_memory_snapshot=True`` (Modal's GPU Memory Snapshots: the GPU is attached while
``snap=True`` hooks run and its memory is snapshotted too,
https://modal.com/docs/guide/memory-snapshots#gpu-memory-snapshots).

An endpoint that brings its own runtime (`load=`, or no model source) is split the same way:
``load`` opens its build (`floodway.build.artifacts.open_artifacts`: sizes and sha256, all
before the snapshot; its module, imported by then, is in the snapshot with whatever it
imports at top level), and its `load` hook runs where the device is attached: in ``load``
for a CPU endpoint or with GPU memory snapshots (the hook's result is then in the snapshot),
else in ``to_gpu`` after the restore (a hook that puts weights on the GPU needs the GPU).

The ``@modal.batched`` method ``predict`` runs a batch, a failing item answering
``{ITEM_ERROR: ...}`` alone instead of failing its whole batch. With input concurrency
(``@modal.concurrent`` on the class, `to_modal`), Modal runs up to that many batches at
once, each on its own thread: ``predict`` keeps no state between calls, ONNX Runtime's
``session.run`` may be called from several threads, and the TensorRT runner takes turns
(`floodway.build.trt.engine_runner`).

A streaming endpoint (a generator function) gets the async generator method ``stream`` instead,
one call per input, yielding its chunks (`floodway.modal.worker.stream.container_chunks`);
the class's input concurrency is then the sequences one container runs at once
(``Generation.max_sequences``), and Modal cancels one input by cancelling its task.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import modal

from floodway.functions.endpoint import Endpoint
from floodway.modal.contract import ITEM_ERROR, is_streaming, store_root
from floodway.modal.stats import record_cold_start
from floodway.modal.worker.stream import container_chunks


def opens_before_snapshot(ep: Endpoint) -> bool:
    """Whether the endpoint's device is attached before the memory snapshot, so the backend
    is opened there: a CPU endpoint, or a GPU endpoint with ``gpu_memory_snapshot``."""
    return ep.gpu is None or ep.gpu_memory_snapshot


def _fresh_hardware() -> Any:
    from floodway.build.hardware import fresh_detect

    return fresh_detect()


class _Hooks:
    """What the GPU class's hooks do, undecorated; `worker_class` binds it to one endpoint
    (the class attributes `ep`, `artifacts_path`, `expect`, `early_open`, `detect_now`)."""

    ep: Endpoint
    artifacts_path: str
    expect: str
    early_open: bool
    model: Any = None
    prepared: Any = None
    artifacts: Any = None
    opened: bool = False
    hooks_ran: tuple[str, ...] = ()
    load_wall: tuple[float, float] = (0.0, 0.0)
    timings_s: dict[str, float] = {}     # replaced, never mutated

    def detect_now(self) -> Any:
        return _fresh_hardware()

    def _open(self) -> None:
        """Open the backend (or call the endpoint's own `load` hook) on this device."""
        t0 = time.perf_counter()
        if self.ep.own_runtime:
            from floodway.build.artifacts import call_load

            self.model = call_load(self.ep, self.artifacts)
            self.timings_s = {**self.timings_s, "load_hook": time.perf_counter() - t0}
        else:
            from floodway.build.loader import finish

            self.model = finish(self.prepared, hardware=self.detect_now())
            self.prepared = None
        self.opened = True

    def _enter_snap(self) -> None:
        from floodway.build.store import ArtifactStore

        ep = self.ep
        w0, t0 = time.time(), time.perf_counter()
        folder = ArtifactStore(store_root(self.artifacts_path)).latest(ep.name)
        if ep.own_runtime:
            from floodway.build.artifacts import open_artifacts

            self.artifacts = open_artifacts(folder)
            self.artifacts.check()   # hashed before the snapshot, not after each restore
        else:
            from floodway.build.loader import prepare

            self.prepared = prepare(folder, expect=self.expect)
        if self.early_open:
            self._open()
            if not ep.own_runtime:
                self.model.timings_s["enter_snap"] = time.perf_counter() - t0
        self.timings_s = {**self.timings_s, "enter_snap": time.perf_counter() - t0}
        self.load_wall = (w0, time.time())
        self.hooks_ran = (*self.hooks_ran, "snap")

    def _enter_gpu(self) -> None:
        w0, t0 = time.time(), time.perf_counter()
        if not self.opened:
            self._open()
        if not self.ep.own_runtime:
            self.model.timings_s["enter_gpu"] = time.perf_counter() - t0
        self.timings_s = {**self.timings_s, "enter_gpu": time.perf_counter() - t0}
        self.hooks_ran = (*self.hooks_ran, "gpu")
        if not modal.is_local():
            record_cold_start(self.ep.name, *self.load_wall, w0, time.time())

    def _predict(self, inputs: list) -> list:
        from floodway.runtime.worker import run_batch

        done, errors = run_batch(self.ep.fn, self.model, list(enumerate(inputs)))
        outputs: list[Any] = [None] * len(inputs)
        for i, value in done:
            outputs[i] = value
        for i, message in errors:
            outputs[i] = {ITEM_ERROR: message}
        return outputs


def worker_class(ep: Endpoint, artifacts_path: str, *,
                 hardware: Callable[[], Any] | None = None) -> type:
    """The plain Python class behind an endpoint's Modal class (not yet decorated by the App):
    the enter hooks, then ``predict`` (a batched method), or for a streaming endpoint
    (`floodway.modal.contract.is_streaming`) the generator method ``stream`` instead
    (a class with a batched method may have no other method).

    `ep`: an endpoint, or one lane of it (`floodway.functions.lanes.served_units`): a lane's
    class loads the endpoint's build and records its starts under the endpoint's name
    (``ep.name``), so the lanes share one set of cold-start samples.

    `hardware`: how the device is detected when the backend is opened (default:
    `floodway.build.hardware.fresh_detect`, looked up when it runs).
    """
    bound = {"ep": ep, "artifacts_path": artifacts_path, "expect": "gpu" if ep.gpu else "cpu",
             "early_open": opens_before_snapshot(ep)}
    if hardware is not None:
        bound["detect_now"] = staticmethod(hardware)
    base = _entered()
    worker = _streaming_worker(base) if is_streaming(ep) else _batched_worker(base, ep)
    for name, value in bound.items():
        setattr(worker, name, value)
    return worker


def _entered() -> type:
    """`_Hooks` with its enter hooks declared (a fresh class per endpoint: Modal keeps
    state on the decorated methods)."""

    class Entered(_Hooks):
        @modal.enter(snap=True)
        def load(self) -> None:
            """Before the memory snapshot: `prepare` the latest build, or open it for an
            endpoint with its own runtime (and open it, or call `load`, where the device is
            already attached, see the module doc).

            A new build reaches containers on the next `modal deploy` (which also retakes the
            snapshot). Raises ArtifactError when there is no build.
            """
            self._enter_snap()

        @modal.enter(snap=False)
        def to_gpu(self) -> None:
            """After restore, with the GPU attached: open the backend for the hardware found
            now (or call the endpoint's own `load` hook), unless the snapshot holds it
            already; on Modal, record this start for the router's cold-start estimate."""
            self._enter_gpu()

    return Entered


def _batched_worker(base: type, ep: Endpoint) -> type:
    batching = ep.batching

    class Worker(base):  # type: ignore[valid-type, misc]
        # Modal takes whole milliseconds: the nearest, not the floor (2.7 ms -> 3, not 2).
        @modal.batched(max_batch_size=batching.max_batch_rows, wait_ms=round(batching.wait_ms))
        def predict(self, inputs: list) -> list:
            """A batch of N input rows -> N outputs, in order (callers send one row each).

            A raising batch is re-run item by item; an item that still raises answers
            ``{ITEM_ERROR: "Type: message"}`` instead of failing every row of its batch
            (``"InputError: ..."`` when its input was to blame, as the local worker names
            it: the router answers that with a 422, `floodway.modal.router.calls`).
            """
            return self._predict(inputs)

    return Worker


def _streaming_worker(base: type) -> type:

    class Worker(base):  # type: ignore[valid-type, misc]
        @modal.method()
        async def stream(self, item: Any) -> AsyncIterator[Any]:
            """One input of a streaming endpoint (its wire form) -> its chunks as JSON values,
            after a first ``{CALL_HEADER: call id}``; a failure ends the stream with
            ``{ITEM_ERROR: "Type: message"}`` (`floodway.modal.worker.stream`). Async, so
            that Modal cancels one input by cancelling its task (a sync method with input
            concurrency would be cancelled by interrupting the whole container)."""
            async for chunk in container_chunks(self.ep.fn, self.model, item):
                yield chunk

    return Worker


__all__ = ["opens_before_snapshot", "worker_class"]
