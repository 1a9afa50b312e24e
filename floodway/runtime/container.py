"""A local container: one worker process, driven through an explicit state machine.

    starting -> warming -> ready <-> busy -> draining -> stopped
         \\________\\_________\\________\\________________-> failed

`ready` has free slots, `busy` has none; `draining` takes no new work and stops once its
in-flight batches finish. A process that exits unexpectedly (or reports Failed) makes the
container `failed` and fails its in-flight batches with Unavailable (the pool decides whether
to retry); after `expect_stop` (the server is stopping, and a SIGTERM to the process group
reaches the workers too) any exit is a stop. `stopped` and `failed` are
terminal.

The worker speaks `floodway.runtime.protocol`: a batch's items are answered one event each
(heard through `submit(..., on_item=)` as they arrive), then BatchDone resolves the batch's
future to a BatchResult. A line that is not a valid message kills the process (`failed`).
The traceback an ItemError or Failed carries (the user's code raised) goes to the server
log (`floodway.runtime.error_log`), never to the client.

`cancel_item` tells the worker an item's caller left (Cancel): a batch worker skips it if
its batch has not started (as an item whose deadline, sent with the batch, passed).
A container of a streaming endpoint (`streaming`) runs its batches (one sequence each) at
once: `cancel_item` stops one (its slot frees when the worker answers), and the
worker's Load messages keep `active_sequences` and the KV cache in use (`describe()`).

Progress (`last_progress_s`, what stuck detection reads: `floodway.runtime.health`): a
batch's answer; for a streaming container any chunk or item end (ItemResult, ItemError),
of any of its sequences. A long stream is never taken for a stuck container, nor is one
whose new sequences wait for their first chunk while others stream; one whose sequences
all wait and none streams for `Route.stuck_after_s` is stuck. A Load is no progress (an
engine that reports but streams nothing is stuck). Work sent to an idle container starts
the wait afresh.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from floodway.errors import ProtocolError, Unavailable
from floodway.runtime.error_log import ERRORS, ErrorLog
from floodway.runtime.procstat import process_cpu_s
from floodway.runtime.protocol import (
    FROM_WORKER,
    MAX_LINE_BYTES,
    Batch,
    BatchDone,
    Cancel,
    Chunk,
    Failed,
    FromWorker,
    ItemError,
    ItemEvent,
    ItemId,
    ItemResult,
    Load,
    Phase,
    Ping,
    Pong,
    Ready,
    decode_all,
    encode,
)
from floodway.runtime.worker import SPAWN_ENV

log = logging.getLogger("floodway.container")
READ_LIMIT = MAX_LINE_BYTES   # the worker writes no longer line (one large output at most)


# The states (the diagram above) and their legal transitions; a batch in flight.
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

    outputs: dict[ItemId, Any]
    errors: dict[ItemId, str]
    rows: int
    compute_s: float
    service_s: float = 0.0


@dataclass(slots=True)
class _Pending:
    """One batch in flight: when it was sent, its item events so far, who hears of them."""

    sent_s: float
    on_item: Callable[[ItemEvent], None] | None
    ids: frozenset[ItemId] = frozenset()
    outputs: dict[ItemId, Any] = field(default_factory=dict)
    errors: dict[ItemId, str] = field(default_factory=dict)


def cold_start_text(timings_s: dict[str, float]) -> str:
    """A container's cold start for the log: ``"cold start 1.23 s (imports 0.40 s,
    artifact_load 0.80 s, ...)"``, each phase in the order the worker timed it."""
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in timings_s.items() if k != "total")
    total = timings_s.get("total", sum(v for k, v in timings_s.items() if k != "total"))
    return f"cold start {total:.2f} s" + (f" ({parts})" if parts else "")


class Container:
    """One worker process for one endpoint. `slots` bounds its in-flight batches; `clock`
    gives monotonic seconds (every time attribute below is on it); `streaming`: its worker
    runs its batches concurrently (a streaming endpoint: one sequence per batch)."""

    _ids = itertools.count(1)

    def __init__(self, app_spec: str, endpoint: str, store_root: str, *, slots: int,
                 env: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, streaming: bool = False,
                 errors: ErrorLog | None = None):
        self.id = next(self._ids)
        self.app_spec, self.endpoint, self.store_root = app_spec, endpoint, store_root
        self.slots, self.streaming = slots, streaming
        # A streaming worker's sequences (its Load messages): running, KV-cache tokens.
        self.active_sequences = self.kv_cache_tokens = self.kv_cache_capacity = 0
        self.env = env or {}
        self.clock = clock
        self.errors = ERRORS if errors is None else errors   # the user's tracebacks: logged
        now = clock()
        self.state = State.STARTING
        self.history: list[tuple[float, State]] = [(now, State.STARTING)]
        # Batch id -> its future / its rows; both hold exactly the batches in flight.
        self.inflight: dict[int, asyncio.Future] = {}
        self.inflight_rows: dict[int, int] = {}
        self._pending: dict[int, _Pending] = {}
        self._last_answer_s = 0.0
        # Last progress (see the module docstring) and when work last ended (idle).
        self.last_progress_s = now
        self.idle_since_s = now
        self.batches_done = 0
        # Liveness of an idle worker: when the outstanding ping was sent (None: none is),
        # and when the last pong came back.
        self.ping_sent_s: float | None = None
        self.last_pong_s = now
        # Called after every state or slot change (the batcher waits for free slots).
        self.on_change: Callable[[], None] | None = None
        self.timings_s: dict[str, float] = {}
        self.backend: str | None = None
        self.build: str | None = None   # key of the build it was started on
        # The unit whose pool it serves: its endpoint, or a lane's key ("embed:short").
        self.unit = endpoint
        self.torch_imported: bool | None = None
        self.error: str | None = None
        self.proc: Any = None   # asyncio.subprocess.Process, or what `attach` was given
        self._ids_batch = itertools.count(1)
        self._ready = asyncio.Event()
        self._stop_expected = False
        self._reader: asyncio.Task | None = None
        self._t_spawn = now

    # ------------------------------------------------------------------ state machine
    def _to(self, new: State) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"container {self.id}: {self.state} -> {new}")
        self.state = new
        self.history.append((self.clock(), new))
        if new in (State.READY, State.FAILED, State.STOPPED):
            self._ready.set()
        if new == State.FAILED:   # no answer will come: fail over now, not at the exit
            self._fail_inflight(self.error or "failed")
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
                "inflight": len(self.inflight), "cpu_s": process_cpu_s(self.pid),
                "backend": self.backend, "build": self.build,
                "cold_start_s": self.timings_s, "torch_imported": self.torch_imported,
                "error": self.error,
                **({"active_sequences": self.active_sequences,
                    "kv_cache_tokens": self.kv_cache_tokens,
                    "kv_cache_capacity": self.kv_cache_capacity} if self.streaming else {})}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Spawn the worker process and start reading its messages."""
        env = {**os.environ, **self.env, SPAWN_ENV: repr(time.time())}
        self._t_spawn = self.clock()
        self.attach(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "floodway.runtime.worker", self.app_spec, self.endpoint,
            self.store_root, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=env, limit=READ_LIMIT))
        if self.state in (State.DRAINING, State.STOPPED) and self.proc:
            # Stopped while the process was spawning: nothing will send it work or close its
            # stdin, so it would idle until the pipe is collected.
            self.proc.kill()

    def attach(self, proc: Any) -> None:
        """Drive `proc`, a started worker: anything shaped like asyncio's Process (`stdin`
        writer, `stdout` reader, `wait()`, `kill()`, `returncode`, `pid`)."""
        self.proc = proc
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
                for msg in decode_all(line, FROM_WORKER):
                    self.handle(msg)
        except (ProtocolError, ValueError, asyncio.LimitOverrunError) as e:
            self.kill(f"protocol error: {e}")   # what follows cannot be trusted either
        self._exited(await self.proc.wait())

    def expect_stop(self) -> None:
        """The server is stopping: the worker's exit from now on, with any code, is a stop."""
        self._stop_expected = True

    def _exited(self, code: int) -> None:
        """The process ended with `code`: settle the state and fail what is still in flight."""
        if self.state == State.DRAINING and code == 0:
            self._to(State.STOPPED)   # the exit we asked for by closing stdin
        elif self._stop_expected and self.state not in (State.STOPPED, State.FAILED):
            log.info("container %s of %s stopped with the server (exit code %s)", self.id,
                     self.endpoint, code)
            if self.state != State.DRAINING:
                self._to(State.DRAINING)
            self._to(State.STOPPED)
        elif self.state not in (State.STOPPED, State.FAILED):
            self.error = self.error or f"worker process exited with code {code}"
            self._to(State.FAILED)
        self._fail_inflight(self.error or f"stopped with work in flight (exit code {code})")

    def _fail_inflight(self, why: str) -> None:
        error = Unavailable(f"container {self.id} of {self.endpoint!r} died: {why}")
        futures = list(self.inflight.values())
        self.inflight.clear()
        self.inflight_rows.clear()
        self._pending.clear()
        self.active_sequences = self.kv_cache_tokens = 0
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)

    # ------------------------------------------------------------------ messages
    def handle(self, msg: FromWorker) -> None:
        """Apply one message from the worker (from `protocol.decode_all`)."""
        self._HANDLERS[type(msg)](self, msg)

    def _on_phase(self, msg: Phase) -> None:
        if self.state == State.STARTING:
            self._to(State.WARMING)

    def _on_ready(self, msg: Ready) -> None:
        self.timings_s = dict(msg.timings_s)
        self.timings_s["total"] = self.clock() - self._t_spawn
        self.backend, self.torch_imported = msg.backend, msg.torch
        if self.state == State.STARTING:
            self._to(State.WARMING)
        if self.state == State.WARMING:
            self._to(State.READY)

    def _on_failed(self, msg: Failed) -> None:
        self.error = msg.error
        if msg.traceback:
            self.errors.report(self.endpoint, self.id, "its start", msg.traceback, self.clock())
        if self.state not in (State.STOPPED, State.FAILED):
            self._to(State.FAILED)

    def _on_pong(self, msg: Pong) -> None:
        self.ping_sent_s, self.last_pong_s = None, self.clock()

    def _on_load(self, msg: Load) -> None:
        self.active_sequences = msg.active_sequences
        self.kv_cache_tokens, self.kv_cache_capacity = msg.kv_cache_tokens, msg.kv_cache_capacity
        if self.on_change:
            self.on_change()

    def _on_item(self, msg: ItemEvent) -> None:
        batch = self._pending.get(msg.batch_id)
        if batch is None:
            return   # its batch was failed over already
        if not isinstance(msg, Chunk):
            if msg.item_id in batch.outputs or msg.item_id in batch.errors:
                return   # an item ends once
            if isinstance(msg, ItemResult):
                batch.outputs[msg.item_id] = msg.output
            else:
                batch.errors[msg.item_id] = msg.message
                if msg.traceback:
                    self.errors.report(self.endpoint, self.id, "the function", msg.traceback,
                                       self.clock())
        self.last_progress_s = self.clock()
        if batch.on_item is not None:
            try:
                batch.on_item(msg)
            except Exception:  # noqa: BLE001 - a listener must not stop the reader
                log.exception("container %s: item listener raised", self.id)

    def _on_done(self, msg: BatchDone) -> None:
        fut = self.inflight.pop(msg.batch_id, None)
        rows = self.inflight_rows.pop(msg.batch_id, 0)
        batch = self._pending.pop(msg.batch_id, None)
        if batch is None:
            return   # its batch was failed over already
        now = self.clock()
        # A worker runs batches one after another: this one could start once it was
        # sent and the previous one was answered (a streaming one runs each at once).
        service = now - (batch.sent_s if self.streaming
                         else max(batch.sent_s, self._last_answer_s))
        self._last_answer_s = now
        self.last_progress_s = now
        self.batches_done += 1
        if not self.inflight:
            self.idle_since_s = now
        if fut is not None and not fut.done():
            # The rows the worker ran (it skips items whose caller left), for the fit.
            fut.set_result(BatchResult(batch.outputs, batch.errors, min(rows, msg.rows),
                                       msg.compute_s, service))
        self._settle()
        if self.on_change:
            self.on_change()

    _HANDLERS: dict[type, Callable[[Container, Any], None]] = {
        Phase: _on_phase, Ready: _on_ready, Failed: _on_failed, Pong: _on_pong,
        ItemResult: _on_item, ItemError: _on_item, Chunk: _on_item, BatchDone: _on_done,
        Load: _on_load}

    def _settle(self) -> None:
        if self.state == State.BUSY and self.free_slots > 0:
            self._to(State.READY)
        elif self.state == State.READY and self.free_slots == 0:
            self._to(State.BUSY)

    # ------------------------------------------------------------------ work
    def submit(self, items: list[tuple[str, Any]],
               on_item: Callable[[ItemEvent], None] | None = None, *,
               left_s: Sequence[float] | None = None) -> asyncio.Future:
        """Send one batch of (item_id, input) pairs; the future resolves to a BatchResult
        keyed by item id once the whole batch is answered, or raises Unavailable when the
        container dies first. `on_item`, if given, hears each ItemResult / ItemError (and
        Chunk) as it arrives, before the batch ends. `left_s`: each item's seconds to its
        deadline, as of now: the worker skips an item not started by then (it goes as an
        absolute `time.monotonic()` time, the worker's clock). Raises Unavailable without a free
        slot (caller checks free_slots), TypeError / ValueError when an input cannot be
        encoded for the pipe (`floodway.codec.dumps`: e.g. a lone surrogate in a string);
        either way nothing was sent and no slot is taken."""
        if self.free_slots <= 0 or not self.proc or not self.proc.stdin:
            raise Unavailable(f"container {self.id} has no free slot")
        batch_id = next(self._ids_batch)
        # Encoded before the batch is in flight: one that cannot be sent holds no slot.
        now_s = time.monotonic()   # the worker's clock, not `clock`: see the protocol
        deadlines = None if left_s is None else tuple(now_s + s for s in left_s)
        line = encode(Batch(batch_id, tuple(items), deadlines))
        fut = asyncio.get_running_loop().create_future()
        # A caller that timed out no longer awaits this future: mark its error as seen.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        now = self.clock()
        if not self.inflight:
            self.last_progress_s = now   # stuck = busy without progress
        self.inflight[batch_id] = fut
        self.inflight_rows[batch_id] = len(items)
        self._pending[batch_id] = _Pending(now, on_item, frozenset(i for i, _ in items))
        self.proc.stdin.write(line)
        self._settle()
        return fut

    def cancel(self, batch_id: int, item_id: str) -> bool:
        """Tell the worker item `item_id` of batch `batch_id` is no longer wanted: a
        streamed sequence stops, a batch item not started yet is skipped (a running one
        runs on); either ends with an ItemError and, once its batch ended, BatchDone frees
        the slot. False when the batch is not in flight or the pipe is closed."""
        if batch_id not in self._pending or not self.proc or not self.proc.stdin \
                or self.proc.stdin.is_closing():
            return False
        self.proc.stdin.write(encode(Cancel(batch_id, item_id)))
        return True

    def cancel_item(self, item_id: str) -> bool:
        """`cancel` for the batch in flight that holds `item_id` (False when none does)."""
        batch_id = next((b for b, p in self._pending.items() if item_id in p.ids), None)
        return batch_id is not None and self.cancel(batch_id, item_id)

    def ping(self) -> bool:
        """Ask the worker to answer at once (a liveness check while it has no work: a hung
        or stopped process would otherwise be found only by the next request). False when
        it cannot be sent or one is already outstanding."""
        if self.ping_sent_s is not None or not self.proc or not self.proc.stdin \
                or self.proc.stdin.is_closing():
            return False
        self.ping_sent_s = self.clock()
        self.proc.stdin.write(_PING)
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
        if self.state != State.DRAINING:   # draining already: killed, or a second stop
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


_PING = encode(Ping())
