"""A streaming endpoint's container loop: sequences run concurrently on one asyncio loop.

`floodway.runtime.worker` enters it once a streaming endpoint (a generator or async
generator function ``fn(model, item)``) is loaded and warmed up. It speaks the same protocol
(`floodway.runtime.protocol`), with these differences from the batch loop:

- stdin is read on the loop (never blocking it); Ping is answered at once, whatever runs;
- every item of a Batch becomes its own task, iterating its generator: an async generator
  directly, a sync one by calling ``next()`` on a thread (a slow step never blocks the loop);
- each yielded chunk goes out as a Chunk (seq 0, 1, ...; data as JSON, `calling.to_jsonable`);
  the end of a generator as an ItemResult with output None (the router combines the chunks);
  whatever it raises (SystemExit too) as that item's ItemError; BatchDone once every item
  of the batch ended;
- Cancel stops one item: its task is cancelled (an async generator is closed by the
  cancellation; a sync one is no longer pulled, and closed on its thread once its current
  step returns) and the item ends at once with ItemError ``"Cancelled: ..."``;
- Load (running sequences; KV-cache tokens in use and capacity from the model's
  ``generation_load()`` when it has one, the built-in engine's hook, else 0 and 0) goes out
  when it changed, checked once per write.

Messages known in the same loop turn are written together (one write, one flush): chunks of
many sequences decoded in one engine step reach the router as one read.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from floodway.runtime import protocol as p
from floodway.runtime.calling import (
    ContractError,
    decode_inputs,
    error_text,
    error_trace,
    is_fatal,
    to_jsonable,
)

# Threads pulling sync generators (made on demand): one per sequence stepping at once.
STREAM_THREADS = 64
CANCELLED = "Cancelled: the router cancelled this sequence (its client went away)"
Write = Callable[[bytes], None]   # writes bytes to the router's pipe, then flushes


def _text(e: BaseException) -> str:
    """``"Type: message"``, valid UTF-8 whatever the message holds (a lone surrogate);
    ``"InputError: ..."`` for a RequestError (`floodway.runtime.calling.error_text`)."""
    return error_text(e)


_END = object()


def _next(gen: Any) -> Any:
    """One step of a sync generator on a thread: its next chunk, or `_END`."""
    return next(gen, _END)


def _close(gen: Any) -> None:
    try:
        gen.close()
    except BaseException as e:  # noqa: BLE001 - a generator's cleanup must not end a thread
        print(f"floodway: closing a cancelled generator raised {_text(e)}", file=sys.stderr)


@dataclass(slots=True)
class _Batch:
    rows: int
    left: int
    t0_s: float


@dataclass
class StreamWorker:
    """Runs the sequences of `fn` on `model`, writing protocol lines with `write`."""

    fn: Callable[..., Any]
    model: Any
    write: Write
    threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(STREAM_THREADS, "floodway-stream"))
    tasks: dict[tuple[int, p.ItemId], asyncio.Task] = field(default_factory=dict)
    _batches: dict[int, _Batch] = field(default_factory=dict)
    _out: list[bytes] = field(default_factory=list)
    _flush_due: bool = False
    _load: tuple[int, int, int] | None = None
    _cancelled: set[tuple[int, p.ItemId]] = field(default_factory=set)

    # ------------------------------------------------------------------ the pipe out
    def _emit(self, msg: Any) -> None:
        """Queue `msg` for the next write (this loop turn's). Raises TypeError/ValueError
        when it cannot be encoded or is over a line."""
        line = p.encode(msg)
        if len(line) > p.MAX_LINE_BYTES:
            raise ValueError(f"a {msg.TYPE!r} message of {len(line)} bytes is over the line "
                             f"limit of {p.MAX_LINE_BYTES}")
        self._out.append(line)
        self._touch()

    def _touch(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued, with a Load when the sequences changed."""
        self._flush_due = False
        load = self.load()
        if load != self._load:
            self._load = load
            self._out.append(p.encode(p.Load(*load)))
        if self._out:
            out, self._out = b"".join(self._out), []
            self.write(out)

    def load(self) -> tuple[int, int, int]:
        """(running sequences, KV-cache tokens in use, capacity): the model's
        ``generation_load()`` where it has one (0, 0 for the cache otherwise)."""
        active = len(self.tasks)
        hook = getattr(self.model, "generation_load", None)
        if not callable(hook):
            return active, 0, 0
        try:
            engine_active, used, cap = hook()
            return max(active, int(engine_active)), int(used), int(cap)
        except Exception as e:  # noqa: BLE001 - a broken hook must not stop the stream
            print(f"floodway: generation_load() raised {_text(e)}", file=sys.stderr)
            return active, 0, 0

    # ------------------------------------------------------------------ messages in
    def handle(self, msg: Any) -> None:
        if isinstance(msg, p.Ping):
            self._emit(p.Pong())
        elif isinstance(msg, p.Cancel):
            key = (msg.batch_id, msg.item_id)
            task = self.tasks.get(key)
            if task is not None:
                # Also marked: a generator that swallows the cancellation is not pulled again.
                self._cancelled.add(key)
                task.cancel()
        else:
            self._start(msg)

    def _start(self, batch: p.Batch) -> None:
        loop = asyncio.get_running_loop()
        ok, failed = decode_inputs(self.fn, batch.id, list(batch.items))
        self._batches[batch.id] = _Batch(len(batch.items), len(batch.items), loop.time())
        for ev in failed:
            self._end(ev)
        for item_id, x in ok:
            key = (batch.id, item_id)
            if key in self.tasks:   # a repeated id: the first one runs, this one fails
                self._end(p.ItemError(batch.id, item_id, "ProtocolError: repeated item id"))
                continue
            self.tasks[key] = loop.create_task(self._sequence(batch.id, item_id, x))
        self._touch()   # the running sequences changed: Load

    def _end(self, ev: p.ItemResult | p.ItemError) -> None:
        """Item `ev` ended: its event, and BatchDone when it was its batch's last."""
        self.tasks.pop((ev.batch_id, ev.item_id), None)
        self._cancelled.discard((ev.batch_id, ev.item_id))
        self._emit(ev)
        b = self._batches.get(ev.batch_id)
        if b is None:
            return
        b.left -= 1
        if b.left <= 0:
            del self._batches[ev.batch_id]
            took = asyncio.get_running_loop().time() - b.t0_s
            self._emit(p.BatchDone(ev.batch_id, took, b.rows))

    # ------------------------------------------------------------------ one sequence
    async def _sequence(self, batch_id: int, item_id: p.ItemId, x: Any) -> None:
        gen, seq, key = None, 0, (batch_id, item_id)
        end: p.ItemResult | p.ItemError
        try:
            gen = self.fn(self.model, x)
            async for chunk in self._chunks(gen):
                if key in self._cancelled:
                    raise asyncio.CancelledError
                self._emit(p.Chunk(batch_id, item_id, seq, to_jsonable(chunk)))
                seq += 1
            end = p.ItemResult(batch_id, item_id, None)
        except asyncio.CancelledError:
            end = p.ItemError(batch_id, item_id, CANCELLED)
            await self._shut(gen)
        except BaseException as e:  # noqa: BLE001 - one sequence fails alone
            if is_fatal(e) and not isinstance(e, GeneratorExit):
                raise
            why = f"ContractError: {e}" if isinstance(e, RecursionError) else _text(e)
            end = p.ItemError(batch_id, item_id, why, error_trace(e))
            await self._shut(gen)   # e.g. a chunk JSON cannot carry: the generator is open
        self._end(end)

    async def _shut(self, gen: Any) -> None:
        """Close a generator left open (an async one here, a sync one on a thread)."""
        if inspect.isasyncgen(gen):
            await _aclose(gen)
        elif inspect.isgenerator(gen) and inspect.getgeneratorstate(gen) == "GEN_SUSPENDED":
            _close_later(self.threads, gen)

    async def _chunks(self, gen: Any) -> AsyncIterator[Any]:
        """The chunks of `gen` (async or sync generator); a sync one stepped on a thread."""
        if inspect.isasyncgen(gen):
            async for chunk in gen:
                yield chunk
            return
        if not inspect.isgenerator(gen):
            raise ContractError(f"returned a {type(gen).__name__}, not a generator")
        while True:
            step: Future = self.threads.submit(_next, gen)
            try:
                chunk = await asyncio.wrap_future(step)
            except asyncio.CancelledError:
                # The step still runs on its thread: close the generator once it returns.
                step.add_done_callback(lambda _f: _close_later(self.threads, gen))
                raise
            if chunk is _END:
                return
            yield chunk

    async def drain(self) -> None:
        """Wait for every running sequence to end (stdin closed: the router drains)."""
        while self.tasks:
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.flush()


def _close_later(threads: ThreadPoolExecutor, gen: Any) -> None:
    try:
        threads.submit(_close, gen)
    except RuntimeError:   # the pool shut down (the worker is exiting): close it here
        _close(gen)


async def _aclose(gen: Any) -> None:
    try:
        await gen.aclose()
    except BaseException as e:  # noqa: BLE001 - its cleanup raising fails nothing more
        if is_fatal(e) and not isinstance(e, GeneratorExit):
            raise


async def serve_stream(fn: Callable[..., Any], model: Any, lines: AsyncIterator[bytes],
                       write: Write) -> int:
    """Answer each line of `lines` (Batch, Cancel, Ping) until they end, then let the
    running sequences finish -> the exit code: 0, or 1 after sending Failed for a line that
    is not a valid message (the running sequences are cancelled)."""
    from floodway.errors import ProtocolError

    w = StreamWorker(fn, model, write)
    if _SIGNAL is not None:
        _SIGNAL.attach(w)
    try:
        async for line in lines:
            try:
                msg = p.decode(line, p.TO_WORKER)
            except ProtocolError as e:
                for task in list(w.tasks.values()):
                    task.cancel()
                w._emit(p.Failed(f"protocol error: {e}"))
                w.flush()
                return 1
            w.handle(msg)
        await w.drain()
        return 0
    finally:
        w.threads.shutdown(wait=False, cancel_futures=True)


async def _stdin_lines(stdin: Any) -> AsyncIterator[bytes]:
    """The lines of the binary pipe `stdin`, read on the loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=p.MAX_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    while line := await reader.readline():
        yield line


_LOOP: asyncio.AbstractEventLoop | None = None


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's one loop for streaming: warm-up and serving share it, so whatever an
    engine binds to its loop at warm-up (its step task) still runs when requests come."""
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
        asyncio.set_event_loop(_LOOP)
    return _LOOP


class LoadSignal:
    """The engine's `on_load` listener: called on the engine's thread after a step that
    changed its sequences or cache (a cancelled sequence leaves the engine a step after its
    item ended here), it has the serving loop check for a Load at once
    (``call_soon_threadsafe``), so the router's admission sees the freed cache within a step
    instead of at the next unrelated message. `worker`: the StreamWorker serving now."""

    def __init__(self) -> None:
        self.worker: StreamWorker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def attach(self, worker: StreamWorker) -> None:
        """Serve `worker`'s Loads from now on (called on its loop)."""
        self.worker, self.loop = worker, asyncio.get_running_loop()

    def __call__(self, _load: Any = None) -> None:
        loop = self.loop
        if loop is None:   # warm-up: the first flush when serving starts sends the Load
            return
        try:
            loop.call_soon_threadsafe(self._due)
        except RuntimeError:   # the loop is closed: the worker is exiting
            pass

    def _due(self) -> None:
        if self.worker is not None:
            self.worker._touch()


_SIGNAL: LoadSignal | None = None


def configure(ep: Any, model: Any) -> None:
    """Give a model with a built-in generation engine (`floodway.Loaded` of a
    text-generation build) the endpoint's `fw.Generation` limits before warm-up starts it:
    what the router admits (max_new_tokens cap, sequences per container) is then what the
    engine runs, and its load changes reach the router as Load at once (`LoadSignal`).
    Models without `configure_generation` (a user's own engine) are left as they are."""
    global _SIGNAL
    hook = getattr(model, "configure_generation", None)
    gen = getattr(ep, "generation", None)
    if not callable(hook) or gen is None:
        return
    _SIGNAL = LoadSignal()
    hook(max_sequences=gen.max_sequences, kv_cache_tokens=gen.kv_cache_tokens,
         max_new_tokens=gen.max_new_tokens, on_load=_SIGNAL)


# A warm-up sequence is read to its end, or closed after this many chunks (a function
# that streams for ever must not hold its container's start).
WARMUP_MAX_CHUNKS = 16


def warm_up(fn: Callable[..., Any], model: Any, items: list[Any]) -> None:
    """Run `fn` on each warm-up item until its generator ends (at most `WARMUP_MAX_CHUNKS`
    chunks, then closed), on the loop that will serve. Raises what it raised, or
    ContractError for a function that returned no generator or yielded what JSON cannot
    carry."""
    async def one(x: Any) -> None:
        gen = fn(model, x)
        if not (inspect.isasyncgen(gen) or inspect.isgenerator(gen)):
            raise ContractError(f"returned {type(gen).__name__}, not a generator")
        n = 0
        try:
            if inspect.isasyncgen(gen):
                async for chunk in gen:
                    to_jsonable(chunk)
                    if (n := n + 1) >= WARMUP_MAX_CHUNKS:
                        break
            else:
                for chunk in gen:
                    to_jsonable(chunk)
                    if (n := n + 1) >= WARMUP_MAX_CHUNKS:
                        break
        finally:
            await _aclose(gen) if inspect.isasyncgen(gen) else gen.close()

    loop = event_loop()
    for x in items:
        loop.run_until_complete(one(x))


def run(fn: Callable[..., Any], model: Any, stdin: Any, out: Any) -> int:
    """Serve on the process's loop (`event_loop`), reading `stdin` and writing `out`."""
    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    return event_loop().run_until_complete(serve_stream(fn, model, _stdin_lines(stdin), write))


__all__ = ["CANCELLED", "STREAM_THREADS", "WARMUP_MAX_CHUNKS", "LoadSignal", "StreamWorker",
           "configure",
           "event_loop", "run", "serve_stream", "warm_up"]
