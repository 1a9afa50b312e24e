"""Modal's real container entrypoint, run as a subprocess against the fake control plane.

    box = Container.deployed(server, "floodway-demo", "Embed.*", env={...})   # after a deploy
    with box:
        results = box.call("predict", [("a",), ("b",)])   # one input per row, in order
    box.returncode, box.log(), server.servicer.containers.task_results

What Modal's worker does for a container, done here from what the fake received at deploy
(`tests.modal_fake.state.State`): lay out the function's mounts as files under a fresh
folder standing for the container's ``/root`` (the deployed ``modal_app.py`` and the local
packages Modal mounted with it; the container imports them from there, not from this
checkout), set the environment of its Secrets, write the ``ContainerArguments`` (the
function definition as received in FunctionCreate, the app's layout of object ids with their
handle metadata, a task id) to a file, and start ``python -m modal._container_entrypoint``
in that folder with ``MODAL_IS_REMOTE=1``, ``MODAL_SERVER_URL`` (the fake) and
``MODAL_CONTAINER_ARGUMENTS_PATH`` (modal 1.6.4: ``modal/_container_entrypoint.py``,
``modal.config._is_remote``, ``_Client.from_env``). As on Modal, nothing else of the
deploying machine's environment reaches the container (only what a process needs to run:
``PATH``, ``HOME``, ``TMPDIR``, the locale). Volumes are not mounted: point the code at a
local folder instead, through `env` (floodway: ``FLOODWAY_STORE``).

With ``snapshot=True`` the container also gets ``MODAL_ENABLE_SNAP_RESTORE=1`` and a
checkpoint id, so it checkpoints after its ``snap=True`` hooks; the fake "restores" it at
once by writing the restore state file (``MODAL_RESTORE_STATE_PATH``), whose `restore_env`
entries the container adds to its environment before its ``snap=False`` hooks: as on Modal,
where the GPU is attached only after the restore.

Inputs are queued on the `ContainerBoard` under the function id, as pickled ``(args, kwargs)``
(``modal._serialization.serialize``), and each output is decoded from its
``FunctionPutOutputsItem``: the value, or a `Failed` for an input that raised. A generator's
output is the ``GeneratorDone`` message; its items are on the board's data_out
(`Container.items`). The container's
stdout and stderr go to a file (`Container.log`), as Modal's worker collects them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modal._serialization import deserialize_data_format, serialize
from modal_proto import api_pb2

from tests.modal_fake.container import ContainerBoard

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = "modal._container_entrypoint"
CONTAINER_ROOT = "/root/"     # where Modal puts mounted local files (and the working dir)
# What a container keeps of this process's environment: enough to run a process, nothing
# of the deploying machine's settings (Modal credentials, FLOODWAY_*, HF_*...).
_PROCESS_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE")
_ids = itertools.count(1)


@dataclass(frozen=True)
class Target:
    """What a container of one deployed function needs from the control plane: the app's id,
    the function's id and definition (``api_pb2.Function``, as the client sent it in
    FunctionCreate), and the app's layout (every object id the app's functions and classes
    were given, with their handle metadata)."""

    app_id: str
    function_id: str
    function_def: api_pb2.Function
    app_layout: api_pb2.AppLayout


@dataclass(frozen=True)
class Failed:
    """The output of an input that raised in the container: ``repr`` of the exception and the
    formatted traceback (``"TERMINATED"`` and none for a cancelled input)."""

    exception: str
    traceback: str


def deployed_target(state: Any, app_name: str, tag: str) -> Target:
    """The `Target` of function `tag` (``"Embed.*"`` for a class) of the deployed app
    `app_name`, from the fake's `state`. The layout holds every function of the app (with the
    handle metadata the fake answered at deploy), every class, and every object the functions
    depend on (images, Volumes, Secrets: hydrated by id in the container). Raises KeyError
    when the app or the tag is not deployed."""
    app = state.deployed(app_name)
    if app is None or tag not in app.function_ids:
        raise KeyError(f"no function {tag!r} in a deployed app {app_name!r}")
    layout = api_pb2.AppLayout(function_ids=app.function_ids, class_ids=app.class_ids)
    deps: dict[str, None] = {}
    for function_id in app.function_ids.values():
        record = state.functions[function_id]
        layout.objects.add(object_id=function_id, function_handle_metadata=record.handle)
        for dep in record.definition.object_dependencies:
            deps[dep.object_id] = None
    for class_id in app.class_ids.values():
        layout.objects.add(object_id=class_id, class_handle_metadata=api_pb2.ClassHandleMetadata())
    volume_names = {v.volume_id: v.name for v in state.volumes.values()}
    for object_id in deps:
        obj = layout.objects.add(object_id=object_id)
        if object_id in volume_names:
            obj.volume_metadata.name = volume_names[object_id]
    function_id = app.function_ids[tag]
    return Target(app.app_id, function_id, state.functions[function_id].definition, layout)


def mount_files(state: Any, definition: api_pb2.Function) -> dict[str, bytes]:
    """The files of the function's mounts as the client uploaded them: container path
    (``/root/modal_app.py``...) -> content."""
    files: dict[str, bytes] = {}
    for mount_id in definition.mount_ids:
        for path, sha256 in state.mounts[mount_id].items():
            files[path] = state.mount_files[sha256]
    return files


def secret_env(state: Any, definition: api_pb2.Function) -> dict[str, str]:
    """The environment the function's Secrets give its containers (later ones win)."""
    by_id = {s.secret_id: s for s in state.secrets.values()}
    env: dict[str, str] = {}
    for secret_id in definition.secret_ids:
        env.update(by_id[secret_id].env)
    return env


def lay_out(files: Mapping[str, bytes], root: Path) -> Path:
    """Write `files` (container paths under ``/root/``) below `root`; returns `root`. Raises
    ValueError for a file mounted elsewhere (the fake containers have only ``/root``)."""
    for path, content in files.items():
        if not path.startswith(CONTAINER_ROOT):
            raise ValueError(f"mounted file {path} is outside {CONTAINER_ROOT}")
        dest = root / path.removeprefix(CONTAINER_ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
    return root


def container_arguments(target: Target, *, task_id: str, checkpoint_id: str = ""
                        ) -> api_pb2.ContainerArguments:
    """The ``ContainerArguments`` Modal's worker hands a container of `target`."""
    return api_pb2.ContainerArguments(
        task_id=task_id, function_id=target.function_id, app_id=target.app_id,
        function_def=target.function_def, app_layout=target.app_layout,
        checkpoint_id=checkpoint_id, environment_name="main")


def input_item(method_name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
               ) -> api_pb2.FunctionGetInputsItem:
    """One input of a call: ``method_name`` ("" for a plain function) with `args`, `kwargs`."""
    n = next(_ids)
    return api_pb2.FunctionGetInputsItem(
        input_id=f"in-{n:06d}", function_call_id=f"fc-{n:06d}",
        function_call_invocation_type=api_pb2.FUNCTION_CALL_INVOCATION_TYPE_SYNC,
        input=api_pb2.FunctionInput(args=serialize((tuple(args), dict(kwargs or {}))),
                                    data_format=api_pb2.DATA_FORMAT_PICKLE,
                                    method_name=method_name))


def decode_output(item: api_pb2.FunctionPutOutputsItem) -> Any:
    """The value an output item carries, or `Failed` for an input that raised."""
    result = item.result
    if result.status == api_pb2.GenericResult.GENERIC_STATUS_TERMINATED:
        return Failed("TERMINATED", "")
    if result.status != api_pb2.GenericResult.GENERIC_STATUS_SUCCESS:
        return Failed(result.exception, result.traceback)
    return deserialize_data_format(result.data, item.data_format, None)


class Container:
    """One container of `target`, running Modal's entrypoint in a subprocess (module doc).

    `root`: the folder standing for the container's ``/root``, its working directory and
    first ``PYTHONPATH`` entry (default: this checkout). `site_paths`: folders standing for
    packages the image installs, after `root` on ``PYTHONPATH``. `env`: the container's
    environment, besides Modal's settings and what a process needs (module doc).
    `snapshot`: take a memory snapshot after the ``snap=True`` hooks (the definition must
    have been deployed with ``enable_memory_snapshot``) and restore with `restore_env`
    (module doc). `heartbeat_interval_s`: the container's heartbeat interval (Modal's
    ``heartbeat_interval`` setting, 15 s by default): a cancelled input
    (`ContainerBoard.cancel`) reaches the container with its next heartbeat.
    `Container.deployed` makes one from what the fake received.
    """

    def __init__(self, board: ContainerBoard, server_url: str, target: Target, *,
                 root: Path = ROOT, site_paths: Sequence[Path] = (),
                 env: Mapping[str, str] | None = None, snapshot: bool = False,
                 restore_env: Mapping[str, str] | None = None,
                 heartbeat_interval_s: float | None = None):
        if snapshot and not target.function_def.checkpointing_enabled:
            raise ValueError(f"{target.function_def.function_name} was deployed without "
                             "enable_memory_snapshot: no snapshot to take")
        self.board, self.server_url, self.target = board, server_url, target
        self.root, self.site_paths = root, tuple(site_paths)
        self.env, self.snapshot = dict(env or {}), snapshot
        self.restore_env = dict(restore_env or {})
        self.task_id = f"ta-{next(_ids):06d}"
        self._dir = Path(tempfile.mkdtemp(prefix="modal-container-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)   # once no test holds it
        self._log_path = self._dir / "output.log"
        self.proc: subprocess.Popen | None = None
        self.call_ids: dict[str, str] = {}      # input id -> its function call id
        if heartbeat_interval_s is not None:
            # Modal's (internal) setting: cancellations arrive with heartbeats.
            self.env.setdefault("MODAL_HEARTBEAT_INTERVAL", f"{heartbeat_interval_s:g}")

    @classmethod
    def deployed(cls, server: Any, app_name: str, tag: str, *,
                 env: Mapping[str, str] | None = None, **kwargs: Any) -> Container:
        """A container of function `tag` of the app `app_name` deployed to the fake `server`
        (a started `tests.modal_fake.FakeModalServer`): its mounts laid out as its ``/root``,
        its Secrets' environment, then `env`. `kwargs`: as for `Container`."""
        target = deployed_target(server.state, app_name, tag)
        box = cls(server.servicer.containers, server.url, target,
                  env={**secret_env(server.state, target.function_def), **(env or {})},
                  **kwargs)
        box.root = lay_out(mount_files(server.state, target.function_def), box._dir / "root")
        return box

    def _environ(self, args_path: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in _PROCESS_ENV if k in os.environ}
        env.update(MODAL_IS_REMOTE="1", MODAL_SERVER_URL=self.server_url,
                   MODAL_CONTAINER_ARGUMENTS_PATH=str(args_path), MODAL_TASK_ID=self.task_id,
                   PYTHONPATH=os.pathsep.join(map(str, (self.root, *self.site_paths))),
                   PYTHONUNBUFFERED="1")
        if self.snapshot:
            env.update(MODAL_ENABLE_SNAP_RESTORE="1",
                       MODAL_RESTORE_STATE_PATH=str(self._dir / "restore-state.json"))
        env.update(self.env)
        return env

    def start(self) -> Container:
        """Write the container arguments and start the entrypoint (returns at once)."""
        checkpoint_id = ""
        function_def = api_pb2.Function()
        function_def.CopyFrom(self.target.function_def)
        if self.snapshot:
            # Modal's worker marks the task that takes the snapshot so.
            function_def.is_checkpointing_function = True
            checkpoint_id = f"ch-{self.task_id.removeprefix('ta-')}"
            self.board.restore_on(checkpoint_id, self._dir / "restore-state.json",
                                  {"task_id": self.task_id, **self.restore_env})
        target = Target(self.target.app_id, self.target.function_id, function_def,
                        self.target.app_layout)
        args = container_arguments(target, task_id=self.task_id, checkpoint_id=checkpoint_id)
        args_path = self._dir / "container-arguments.bin"
        args_path.write_bytes(args.SerializeToString())
        with open(self._log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", ENTRYPOINT], cwd=self.root,
                                         env=self._environ(args_path), stdout=log,
                                         stderr=subprocess.STDOUT)
        return self

    def send(self, method_name: str, rows: Sequence[Sequence[Any]]) -> list[str]:
        """Queue one input per row (its positional arguments); returns their input ids."""
        items = [input_item(method_name, row) for row in rows]
        for i in items:
            self.call_ids[i.input_id] = i.function_call_id
        self.board.put_inputs(self.target.function_id, items)
        return [i.input_id for i in items]

    def items(self, input_id: str) -> list[Any]:
        """What the generator run for `input_id` has yielded so far (its data_out)."""
        return self.board.data_items(self.call_ids[input_id])

    def results(self, input_ids: Sequence[str], timeout_s: float = 60.0) -> list[Any]:
        """The decoded outputs of `input_ids`, in order (see `decode_output`). Raises
        RuntimeError, with the container's output, when it exits or `timeout_s` seconds pass
        before all are answered."""
        assert self.proc is not None, "start() the container first"
        remaining = timeout_s
        while True:
            step = min(0.5, remaining)
            try:
                outputs = self.board.wait_outputs(input_ids, timeout_s=step)
                return [decode_output(outputs[i]) for i in input_ids]
            except TimeoutError as e:
                remaining -= step
                if self.proc.poll() is not None or remaining <= 0:
                    raise RuntimeError(f"container {self.task_id} (exit code "
                                       f"{self.proc.poll()}): {e}\n{self.log()}") from None

    def call(self, method_name: str, rows: Sequence[Sequence[Any]], timeout_s: float = 60.0
             ) -> list[Any]:
        """`send` then `results`: one decoded output per row, in order."""
        return self.results(self.send(method_name, rows), timeout_s)

    def stop(self, timeout_s: float = 30.0) -> int:
        """Send the kill switch and wait for the container to exit; returns its exit code.
        Kills it (and raises RuntimeError with its output) when it does not exit in time."""
        assert self.proc is not None, "start() the container first"
        if self.proc.poll() is None:
            self.board.kill(self.target.function_id)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"container {self.task_id} did not exit within {timeout_s:g} s"
                               f" of the kill switch\n{self.log()}") from None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log(self) -> str:
        """Everything the container printed (stdout and stderr) so far."""
        try:
            return self._log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> Container:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except RuntimeError:
                if exc[0] is None:
                    raise


__all__ = ["CONTAINER_ROOT", "ENTRYPOINT", "Container", "Failed", "Target",
           "container_arguments", "decode_output", "deployed_target", "input_item", "lay_out",
           "mount_files", "secret_env"]
