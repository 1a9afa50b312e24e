"""A local container: one worker process, driven through an explicit state machine.

    starting -> warming -> ready <-> busy -> draining -> stopped
         \\________\\_________\\________\\________________-> failed

`ready` has free slots, `busy` has none; `draining` takes no new work and stops once its
in-flight batches finish. A process that exits unexpectedly makes the container `failed`
and fails its in-flight batches with Unavailable (the pool decides whether to retry).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from floodway.codec import dumps, loads
from floodway.errors import Unavailable
from floodway.runtime.worker import SPAWN_ENV

READ_LIMIT = 256 * 1024 * 1024   # one reply line can hold a large batch of outputs


class State(enum.StrEnum):
    STARTING = "starting"
    WARMING = "warming"
    READY = "ready"
    BUSY = "busy"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.STARTING: frozenset({State.WARMING, State.FAILED, State.DRAINING, State.STOPPED}),
    State.WARMING: frozenset({State.READY, State.FAILED, State.DRAINING, State.STOPPED}),
    State.READY: frozenset({State.BUSY, State.DRAINING, State.FAILED}),
    State.BUSY: frozenset({State.READY, State.DRAINING, State.FAILED}),
    State.DRAINING: frozenset({State.STOPPED, State.FAILED}),
    State.STOPPED: frozenset(),
    State.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(frozen=True)
class BatchResult:
    """One batch's answer: outputs and error messages keyed by item id; `compute_s` is the
    time the endpoint function took inside the worker; `service_s` the time the container
    spent on the batch as the router sees it (from when the worker could start it to its
    answer: compute plus reading, encoding and the pipe), which feeds the service-time fit."""

    outputs: dict[str, Any]
    errors: dict[str, str]
    rows: int
    compute_s: float
    service_s: float = 0.0


class Container:
    """One worker process for one endpoint. `slots` bounds its in-flight batches."""

    _ids = itertools.count(1)

    def __init__(self, app_spec: str, endpoint: str, store_root: str, *, slots: int,
                 env: dict[str, str] | None = None):
        self.id = next(self._ids)
        self.app_spec, self.endpoint, self.store_root = app_spec, endpoint, store_root
        self.slots = slots
        self.env = env or {}
        self.state = State.STARTING
        self.history: list[tuple[float, State]] = [(time.monotonic(), State.STARTING)]
        self.inflight: dict[int, asyncio.Future] = {}
        self.inflight_rows: dict[int, int] = {}
        self._sent_s: dict[int, float] = {}
        self._last_answer_s = 0.0
        # Monotonic times: last completion (stuck detection) and when work last ended (idle).
        self.last_progress_s = time.monotonic()
        self.idle_since_s = time.monotonic()
        self.batches_done = 0
        # Liveness of an idle worker: when the outstanding ping was sent (None: none is),
        # and when the last pong came back.
        self.ping_sent_s: float | None = None
        self.last_pong_s = time.monotonic()
        # Called after every state or slot change (the batcher waits for free slots).
        self.on_change: Callable[[], None] | None = None
        self.timings_s: dict[str, float] = {}
        self.backend: str | None = None
        self.build: str | None = None   # key of the build it was started on
        self.torch_imported: bool | None = None
        self.error: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._ids_batch = itertools.count(1)
        self._ready = asyncio.Event()
        self._reader: asyncio.Task | None = None
        self._t_spawn = 0.0

    # ------------------------------------------------------------------ state machine
    def _to(self, new: State) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"container {self.id}: {self.state} -> {new}")
        self.state = new
        self.history.append((time.monotonic(), new))
        if new in (State.READY, State.FAILED, State.STOPPED):
            self._ready.set()
        if self.on_change:
            self.on_change()

    @property
    def free_slots(self) -> int:
        if self.state not in (State.READY, State.BUSY):
            return 0
        return max(0, self.slots - len(self.inflight))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "state": str(self.state), "pid": self.pid,
                "inflight": len(self.inflight), "backend": self.backend, "build": self.build,
                "cold_start_s": self.timings_s, "torch_imported": self.torch_imported,
                "error": self.error}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        env = {**os.environ, **self.env, SPAWN_ENV: repr(time.time())}
        self._t_spawn = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "floodway.runtime.worker", self.app_spec, self.endpoint,
            self.store_root, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=env, limit=READ_LIMIT)
        self._reader = asyncio.create_task(self._read())

    async def wait_exit(self) -> None:
        """Return once the worker process has exited and its in-flight work was failed over."""
        if self._reader:
            await self._reader

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        await asyncio.wait_for(self._ready.wait(), timeout_s)
        return self.state in (State.READY, State.BUSY)

    async def _read(self) -> None:
        assert self.proc and self.proc.stdout
        try:
            while line := await self.proc.stdout.readline():
                self._handle(loads(line))
        except (ValueError, asyncio.LimitOverrunError) as e:
            self.error = f"protocol error: {e}"
        code = await self.proc.wait()
        if self.state == State.DRAINING and code == 0:
            self._to(State.STOPPED)   # the exit we asked for by closing stdin
        elif self.state not in (State.STOPPED, State.FAILED):
            self.error = self.error or f"worker process exited with code {code}"
            self._to(State.FAILED)
        for fut in self.inflight.values():
            if not fut.done():
                why = self.error or f"stopped with work in flight (exit code {code})"
                fut.set_exception(Unavailable(f"container {self.id} of {self.endpoint!r} died: "
                                              f"{why}"))
        self.inflight.clear()
        self.inflight_rows.clear()
        self._sent_s.clear()

    def _handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "phase" and self.state == State.STARTING:
            self._to(State.WARMING)
        elif kind == "ready":
            self.timings_s = dict(msg["timings_s"])
            self.timings_s["total"] = time.perf_counter() - self._t_spawn
            self.backend, self.torch_imported = msg.get("backend"), msg.get("torch")
            if self.state == State.STARTING:
                self._to(State.WARMING)
            if self.state == State.WARMING:
                self._to(State.READY)
        elif kind == "failed":
            self.error = msg.get("error")
            if self.state not in (State.STOPPED, State.FAILED):
                self._to(State.FAILED)
        elif kind == "pong":
            self.ping_sent_s, self.last_pong_s = None, time.monotonic()
        elif kind == "result":
            fut = self.inflight.pop(msg["id"], None)
            rows = self.inflight_rows.pop(msg["id"], 0)
            sent = self._sent_s.pop(msg["id"], None)
            now = time.monotonic()
            # A worker runs batches one after another: this one could start once it was
            # sent and the previous one was answered.
            service = now - max(sent or now, self._last_answer_s)
            self._last_answer_s = now
            self.last_progress_s = now
            self.batches_done += 1
            if not self.inflight:
                self.idle_since_s = now
            if fut and not fut.done():
                fut.set_result(BatchResult(dict(map(tuple, msg["outputs"])),
                                           dict(map(tuple, msg["errors"])),
                                           rows, float(msg.get("compute_s", 0.0)), service))
            self._settle()
            if self.on_change:
                self.on_change()

    def _settle(self) -> None:
        if self.state == State.BUSY and self.free_slots > 0:
            self._to(State.READY)
        elif self.state == State.READY and self.free_slots == 0:
            self._to(State.BUSY)

    def submit(self, items: list[tuple[str, Any]]) -> asyncio.Future:
        """Send one batch of (item_id, input) pairs; the future resolves to a BatchResult
        keyed by item id. Raises Unavailable without a free slot (caller checks free_slots)."""
        if self.free_slots <= 0 or not self.proc or not self.proc.stdin:
            raise Unavailable(f"container {self.id} has no free slot")
        batch_id = next(self._ids_batch)
        fut = asyncio.get_running_loop().create_future()
        # A caller that timed out no longer awaits this future: mark its error as seen.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        if not self.inflight:
            self.last_progress_s = time.monotonic()   # stuck = busy without progress
        self.inflight[batch_id] = fut
        self.inflight_rows[batch_id] = len(items)
        self._sent_s[batch_id] = time.monotonic()
        self.proc.stdin.write(dumps({"id": batch_id, "items": items}) + b"\n")
        self._settle()
        return fut

    def ping(self) -> bool:
        """Ask the worker to answer at once (a liveness check while it has no work: a hung
        or stopped process would otherwise be found only by the next request). False when
        it cannot be sent or one is already outstanding."""
        if self.ping_sent_s is not None or not self.proc or not self.proc.stdin \
                or self.proc.stdin.is_closing():
            return False
        self.ping_sent_s = time.monotonic()
        self.proc.stdin.write(b'{"type":"ping"}\n')
        return True

    def kill(self, reason: str) -> None:
        """Declare the container broken (e.g. stuck): stop routing to it and kill the
        process; its in-flight batches fail with Unavailable (the batcher retries them)."""
        self.error = reason
        if self.state not in (State.STOPPED, State.FAILED, State.DRAINING):
            self._to(State.DRAINING)
        if self.proc and self.proc.returncode is None:
            self.proc.kill()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: take no new work, let in-flight batches finish, then end the process."""
        if self.state in (State.STOPPED, State.FAILED):
            return
        self._to(State.DRAINING)
        pending = [f for f in self.inflight.values() if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        if self.proc and self.proc.stdin:
            self.proc.stdin.close()
        try:
            if self.proc:
                await asyncio.wait_for(self.proc.wait(), grace_s)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self.state == State.DRAINING:
            self._to(State.STOPPED)
        if self._reader:
            await self._reader
