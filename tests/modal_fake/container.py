"""The container side of the fake control plane: what Modal's container entrypoint calls.

    class FakeModal(ContainerSide, ...): ...       # the servicer inherits these RPCs
    board = fake.containers                        # queues and records, thread-safe
    board.put_inputs(function_id, [item, ...])     # FunctionGetInputsItem, see `input_item`
    outputs = board.wait_outputs([input_id, ...], timeout_s=30)

``python -m modal._container_entrypoint`` (modal 1.6.4, ``modal/_container_entrypoint.py`` and
``modal/_runtime/``) makes these calls, in this order:

- ``ContainerHello`` once (``ContainerIOManager.hello``);
- ``ContainerHeartbeat`` at once and then every ``heartbeat_interval`` seconds (15 by default),
  paused while a memory snapshot is taken (``_run_heartbeat_loop``). Its answer carries the
  inputs to cancel (``cancel_input_event.input_ids``, queued by `ContainerBoard.cancel`): the
  container cancels an async input's task (a sync one with input concurrency: by interrupting
  the whole process) and answers it ``TERMINATED``;
- ``ContainerCheckpoint`` after the ``@modal.enter(snap=True)`` hooks, only when the function
  definition has ``is_checkpointing_function`` and the environment ``MODAL_ENABLE_SNAP_RESTORE=1``
  (``maybe_snapshot``). The container then closes its connections and polls for the restore
  state file (``MODAL_RESTORE_STATE_PATH``, JSON) that Modal's worker writes on a restore; its
  entries become environment variables (``TaskLifecycleManager.memory_restore``), so the
  ``snap=False`` hooks see an environment the snapshot did not. `ContainerBoard.restore_on`
  registers the file to write when a checkpoint id is taken;
- ``FunctionGetInputs`` in a loop: one call per free input slot, each answered with up to
  ``batch_max_size`` inputs (1 without ``@modal.batched``) of that function; the server, not
  the container, waits up to ``batch_linger_ms`` to fill a batch (``_generate_inputs``). An item
  with ``kill_switch`` ends the loop: the container waits for the inputs under way, runs the
  exit hooks and exits;
- ``FunctionPutOutputs``: one item per input (so per row of a batch), at most 20 per call
  (``_send_outputs``); for a generator, the ``GeneratorDone(items_total)`` (in
  ``DATA_FORMAT_GENERATOR_DONE``) once its items are sent;
- ``FunctionCallPutDataOut``: a generator's items, as ``DataChunk``s numbered from 1 per
  function call (``generator_output_sender``), kept in `ContainerBoard.data_out`;
- ``FunctionGetDynamicConcurrency`` every 3 s, only when ``max_concurrent_inputs`` exceeds
  ``target_concurrent_inputs`` (``_dynamic_concurrency_loop``);
- ``TaskResult`` when importing the user code or an enter hook raises
  (``handle_task_lifecycle_exception``); the container then exits;
- ``ContainerStop`` from ``modal.experimental.stop_fetching_inputs``;
- ``VolumeCommit`` for each mounted Volume on exit (``volume_commit``, also for read-only
  mounts) and from ``Volume.commit()``; ``ContainerReloadVolumes`` from ``Volume.reload()``:
  both "must be called inside a container that mounts the Volume" (``modal.volume``). The
  fake's containers see a local folder instead of the Volume, so a commit only is recorded;
- and the client-side RPCs of whatever the user code calls (Dicts, functions, autoscaler...:
  not here).

1.6.4 sends no log RPC: a container's output is its stdout and stderr, which the worker (here:
`tests.modal_fake.entrypoint`) collects.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf.empty_pb2 import Empty
from modal_proto import api_pb2

from tests.modal_fake.stubs import unary

# Seconds a FunctionGetInputs call waits for an input before answering with none (the
# container then asks again); short, so that a container told to stop is not kept waiting.
LONG_POLL_S = 1.0


class ContainerBoard:
    """What the container-side RPCs read and write; safe to use from any thread.

    Inputs wait per function id until a container of that function fetches them; outputs are
    kept by input id. `calls` lists every container-side RPC received as ``(name, request,
    time.time() when received)``, in order; `task_results`, `checkpoints`, `stops`,
    `commits` (Volume ids) and `heartbeats` keep what those RPCs sent.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()      # re-entered by `wait_until` predicates
        self._changed = threading.Condition(self._lock)     # notified on every RPC
        self._inputs: dict[str, deque[api_pb2.FunctionGetInputsItem]] = {}
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._restores: dict[str, tuple[Path, dict[str, str]]] = {}
        self.outputs: dict[str, api_pb2.FunctionPutOutputsItem] = {}
        self.calls: list[tuple[str, Any, float]] = []
        self.task_results: list[api_pb2.TaskResultRequest] = []
        self.checkpoints: list[api_pb2.ContainerCheckpointRequest] = []
        self.stops: list[api_pb2.ContainerStopRequest] = []
        self.commits: list[str] = []
        self.heartbeats = 0
        self.batches: list[list[str]] = []      # input ids handed out together, per call
        self.data_out: dict[str, list[api_pb2.DataChunk]] = {}   # function call id -> items
        self.cancels_sent: list[str] = []       # input ids told to containers as cancelled
        self._cancels: list[str] = []

    # ------------------------------------------------------------ for the tests

    def put_inputs(self, function_id: str, items: Iterable[api_pb2.FunctionGetInputsItem]
                   ) -> None:
        """Queue `items` for the containers of `function_id`, and wake those waiting."""
        with self._lock:
            self._inputs.setdefault(function_id, deque()).extend(items)
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    def kill(self, function_id: str) -> None:
        """Tell one container of `function_id` to stop fetching inputs (a kill-switch item,
        after the inputs already queued)."""
        self.put_inputs(function_id, [api_pb2.FunctionGetInputsItem(kill_switch=True)])

    def cancel(self, input_ids: Iterable[str]) -> None:
        """Cancel the inputs `input_ids`: the next heartbeat's answer tells the container."""
        with self._lock:
            self._cancels.extend(input_ids)

    def data_items(self, function_call_id: str) -> list[Any]:
        """The items a generator has put on the call's data_out so far, decoded, in order."""
        from modal._serialization import deserialize_data_format

        with self._lock:
            chunks = sorted(self.data_out.get(function_call_id, ()), key=lambda c: c.index)
        return [deserialize_data_format(c.data, c.data_format, None) for c in chunks]

    def wait_outputs(self, input_ids: Iterable[str], timeout_s: float
                     ) -> dict[str, api_pb2.FunctionPutOutputsItem]:
        """The output of each of `input_ids`, waiting up to `timeout_s` seconds for all of them.

        Raises TimeoutError naming the inputs still without an output.
        """
        ids = list(input_ids)
        with self._changed:
            done = self._changed.wait_for(
                lambda: all(i in self.outputs for i in ids), timeout=timeout_s)
            if not done:
                missing = [i for i in ids if i not in self.outputs]
                raise TimeoutError(f"no output within {timeout_s:g} s for inputs {missing}")
            return {i: self.outputs[i] for i in ids}

    def wait_until(self, predicate: Any, timeout_s: float) -> bool:
        """Wait until ``predicate(board)`` holds (checked whenever an RPC arrives) or
        `timeout_s` seconds pass; returns whether it holds."""
        with self._changed:
            return bool(self._changed.wait_for(lambda: predicate(self), timeout=timeout_s))

    def restore_on(self, checkpoint_id: str, path: Path, state: dict[str, str]) -> None:
        """When a container checkpoints as `checkpoint_id`, write `state` (JSON) to `path`: the
        container restores at once, with `state` applied to its environment."""
        with self._lock:
            self._restores[checkpoint_id] = (Path(path), dict(state))

    def call_names(self) -> list[str]:
        """The names of the RPCs received so far, in order, repeats collapsed."""
        with self._lock:
            names = [name for name, _, _ in self.calls]
        return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]

    # ------------------------------------------------------------ for the RPCs

    def record(self, name: str, request: Any) -> None:
        with self._changed:
            self.calls.append((name, request, time.time()))
            self._changed.notify_all()

    def _take(self, function_id: str, n: int, *, kill_ok: bool = True
              ) -> list[api_pb2.FunctionGetInputsItem]:
        """Up to `n` queued inputs of `function_id`, in order. A kill switch is taken only alone
        (and only when `kill_ok`): one container stops per kill switch."""
        with self._lock:
            queue = self._inputs.get(function_id)
            out: list[api_pb2.FunctionGetInputsItem] = []
            while queue and len(out) < n:
                if queue[0].kill_switch:
                    if not out and kill_ok:
                        out.append(queue.popleft())
                    break
                out.append(queue.popleft())
            return out

    async def _wait_inputs(self, function_id: str, timeout_s: float) -> None:
        """Wait until an input of `function_id` is queued, or `timeout_s` seconds pass."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self._inputs.get(function_id):
                return
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout_s)
        except TimeoutError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def get_inputs(self, req: api_pb2.FunctionGetInputsRequest
                         ) -> list[api_pb2.FunctionGetInputsItem]:
        """The inputs for one FunctionGetInputs call: waits up to `LONG_POLL_S` for the first,
        then, for a batched function, up to ``batch_linger_ms`` to fill ``batch_max_size``."""
        size = max(1, req.batch_max_size)
        await self._wait_inputs(req.function_id, LONG_POLL_S)
        items = self._take(req.function_id, size)
        if req.batch_max_size and items and not items[0].kill_switch:
            deadline = time.monotonic() + req.batch_linger_ms / 1000
            while len(items) < size and (left := deadline - time.monotonic()) > 0:
                await self._wait_inputs(req.function_id, left)
                more = self._take(req.function_id, size - len(items), kill_ok=False)
                if not more:
                    break       # a kill switch is next (or another container took the input)
                items += more
        if items and not items[0].kill_switch:
            with self._lock:
                self.batches.append([i.input_id for i in items])
        return items

    def put_outputs(self, items: Iterable[api_pb2.FunctionPutOutputsItem]) -> None:
        with self._changed:
            for item in items:
                self.outputs[item.input_id] = item
            self._changed.notify_all()

    def put_data(self, req: api_pb2.FunctionCallPutDataRequest) -> None:
        with self._changed:
            self.data_out.setdefault(req.function_call_id, []).extend(req.data_chunks)
            self._changed.notify_all()

    def take_cancels(self) -> list[str]:
        with self._lock:
            out, self._cancels = self._cancels, []
            self.cancels_sent += out
            return out

    def checkpoint(self, req: api_pb2.ContainerCheckpointRequest) -> None:
        with self._lock:
            self.checkpoints.append(req)
            restore = self._restores.get(req.checkpoint_id)
        if restore is not None:
            path, state = restore
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(path)   # the container polls for the file: never let it see half


class ContainerSide:
    """The RPCs a container makes (see the module doc), for the fake servicer to inherit.

    Its state is `containers` (a `ContainerBoard`, made on first use); it defines no RPC that
    a client outside a container makes.
    """

    @property
    def containers(self) -> ContainerBoard:
        board = self.__dict__.get("_container_board")
        if board is None:
            board = self.__dict__.setdefault("_container_board", ContainerBoard())
        return board

    @unary
    async def ContainerHello(self, req: Empty) -> Empty:
        self.containers.record("ContainerHello", req)
        return Empty()

    @unary
    async def ContainerHeartbeat(self, req: api_pb2.ContainerHeartbeatRequest
                                 ) -> api_pb2.ContainerHeartbeatResponse:
        board = self.containers
        board.heartbeats += 1
        board.record("ContainerHeartbeat", req)
        cancels = board.take_cancels()
        if not cancels:
            return api_pb2.ContainerHeartbeatResponse()
        return api_pb2.ContainerHeartbeatResponse(
            cancel_input_event=api_pb2.CancelInputEvent(input_ids=cancels))

    @unary
    async def FunctionCallPutDataOut(self, req: api_pb2.FunctionCallPutDataRequest) -> Empty:
        board = self.containers
        board.record("FunctionCallPutDataOut", req)
        board.put_data(req)
        return Empty()

    @unary
    async def FunctionGetInputs(self, req: api_pb2.FunctionGetInputsRequest
                                ) -> api_pb2.FunctionGetInputsResponse:
        board = self.containers
        board.record("FunctionGetInputs", req)
        return api_pb2.FunctionGetInputsResponse(inputs=await board.get_inputs(req))

    @unary
    async def FunctionPutOutputs(self, req: api_pb2.FunctionPutOutputsRequest) -> Empty:
        board = self.containers
        board.record("FunctionPutOutputs", req)
        board.put_outputs(req.outputs)
        return Empty()

    @unary
    async def FunctionGetDynamicConcurrency(
            self, req: api_pb2.FunctionGetDynamicConcurrencyRequest,
    ) -> api_pb2.FunctionGetDynamicConcurrencyResponse:
        # Keep the container at its target: the fake runs no concurrency controller.
        self.containers.record("FunctionGetDynamicConcurrency", req)
        return api_pb2.FunctionGetDynamicConcurrencyResponse(
            concurrency=req.target_concurrency or req.max_concurrency or 1)

    @unary
    async def TaskResult(self, req: api_pb2.TaskResultRequest) -> Empty:
        board = self.containers
        board.task_results.append(req)
        board.record("TaskResult", req)
        return Empty()

    @unary
    async def ContainerCheckpoint(self, req: api_pb2.ContainerCheckpointRequest) -> Empty:
        board = self.containers
        board.record("ContainerCheckpoint", req)
        board.checkpoint(req)
        return Empty()

    @unary
    async def ContainerStop(self, req: api_pb2.ContainerStopRequest
                            ) -> api_pb2.ContainerStopResponse:
        board = self.containers
        board.stops.append(req)
        board.record("ContainerStop", req)
        return api_pb2.ContainerStopResponse()

    @unary
    async def VolumeCommit(self, req: api_pb2.VolumeCommitRequest
                           ) -> api_pb2.VolumeCommitResponse:
        board = self.containers
        board.commits.append(req.volume_id)
        board.record("VolumeCommit", req)
        # Nothing to reload: the container's folder is the Volume's only copy here.
        return api_pb2.VolumeCommitResponse(skip_reload=True)

    @unary
    async def ContainerReloadVolumes(self, req: api_pb2.ContainerReloadVolumesRequest
                                     ) -> api_pb2.ContainerReloadVolumesResponse:
        self.containers.record("ContainerReloadVolumes", req)
        return api_pb2.ContainerReloadVolumesResponse()


__all__ = ["LONG_POLL_S", "ContainerBoard", "ContainerSide"]
