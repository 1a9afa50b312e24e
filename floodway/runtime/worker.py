"""A container's process: import the user's module, load artifacts, warm up, answer batches.

Run as ``python -m floodway.runtime.worker APP ENDPOINT STORE``. It speaks the typed messages
of `floodway.runtime.protocol` with its parent, as JSON lines: Batch, Ping, Cancel on stdin;
Phase, Ready (or Failed, then exit 1), Pong, and per batch one ItemResult or ItemError per
item followed by BatchDone on the process's original stdout (fd 1 is then pointed at stderr,
so a stray print in user code cannot corrupt the protocol).

Item events go out as soon as they are known, the events known together on one line: a
batch that runs whole is one line (its items and BatchDone); a raising batch is re-run item
by item and each item's event goes out as it is known, so that a bad item fails alone and
the good ones are not held back by the re-runs. Large outputs go on several lines, none over
the router's read limit; one output too large for a line fails its item alone. Whatever the
function raises (SystemExit too) or returns fails at most its own batch, never the worker.
A batch's items whose caller left (Cancel) or whose deadline passed before it started are
skipped, never run (stdin is read ahead: `floodway.runtime.inbox`); none is interrupted.

A streaming endpoint (a generator function, one item per call) is served by
`floodway.runtime.stream_worker` instead, its sequences concurrently on one asyncio loop.

Cold-start phases (seconds): process_start (spawn -> interpreter running this module),
imports (user module and floodway), artifact_load, load_hook (an endpoint that brings its own
runtime: its `load=`), warmup (first inference).
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from floodway.codec import loads
from floodway.runtime.calling import (
    ContractError,
    decode_inputs,
    error_text,
    error_trace,
    is_fatal,
    to_jsonable,
)

_T_MAIN = time.time()
SPAWN_ENV = "FLOODWAY_SPAWN_T"
WARMUP_INPUTS_ENV = "FLOODWAY_WARMUP_INPUTS"

# floodway.runtime.protocol is imported where it is first needed, not above: its message
# classes take milliseconds to create, which a container pays after its artifact prefetch
# has started (overlapping it), not before.
Send = Callable[[list[Any]], None]   # writes protocol messages, then flushes


def _what(value) -> str:
    """A returned value's kind, for a message: ``None``, ``a generator``, ``an int``."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _call(fn, model, inputs: list) -> list:
    """`fn` on one batch -> its outputs, one per input, as returned (each is checked alone
    by `_result`: items' outputs may differ in shape or kind, each is its own answer).
    Raises ContractError when `fn` returned another count, or no list at all."""
    out = fn(model, inputs)
    if not hasattr(out, "__len__"):
        raise ContractError(f"returned {_what(out)}, not a list of {len(inputs)} outputs "
                            "(one per input)")
    if len(out) != len(inputs):
        raise ContractError(f"returned {len(out)} outputs for {len(inputs)} inputs")
    return list(out)


def _result(batch_id: int, item_id, output):
    """One item's ItemResult, its output as JSON (`to_jsonable`); an ItemError for that
    item alone when JSON cannot carry it (the message names only this output's kind)."""
    from floodway.runtime.protocol import ItemError, ItemResult

    try:
        return ItemResult(batch_id, item_id, to_jsonable(output))
    except BaseException as e:  # noqa: BLE001 - e.g. an output's own `tolist` raising
        if is_fatal(e):
            raise
        kind = "ContractError" if isinstance(e, ContractError | RecursionError) \
            else type(e).__name__
        why = f"{kind}: {e}"
        return ItemError(batch_id, item_id, why, why if kind == "ContractError" else error_trace(e))


def item_events(fn, model, batch_id: int, items: list) -> Iterator[list]:
    """Run `items` ((item_id, input) pairs, inputs in their wire form) as one batch. Yields
    lists of ItemResult / ItemError events as they become known: first those of inputs that
    do not decode, then one list for the rest when the batch runs, else (a batch of several
    items raised) one list per item, each item re-run alone. A wrong output count fails
    every item of the batch; an output JSON cannot carry fails its own item."""
    decoded, failed = decode_inputs(fn, batch_id, items)
    if failed:
        yield failed
        if not decoded:
            return
    yield from _run(fn, model, batch_id, decoded)


def _run(fn, model, batch_id: int, items: list) -> Iterator[list]:
    from floodway.runtime.protocol import ItemError

    ids, inputs = [i for i, _ in items], [x for _, x in items]
    try:
        outs = _call(fn, model, inputs)
    except BaseException as e:  # noqa: BLE001 - a failing batch must not kill the container
        if is_fatal(e):
            raise
        if len(items) == 1 or isinstance(e, ContractError):
            why, trace = error_text(e), error_trace(e)
            yield [ItemError(batch_id, i, why, trace) for i in ids]
            return
    else:
        yield [_result(batch_id, i, o) for i, o in zip(ids, outs, strict=True)]
        return
    for item in items:
        yield from _run(fn, model, batch_id, [item])


def run_batch(fn, model, items: list) -> tuple[list, list]:
    """Run `items` ([item_id, input] pairs) as one batch -> (outputs, errors), each a list of
    [item_id, value]; as `item_events`, collected (the Modal class answers whole batches)."""
    from floodway.runtime.protocol import ItemResult

    done, errors = [], []
    for events in item_events(fn, model, 0, items):
        for ev in events:
            if isinstance(ev, ItemResult):
                done.append([ev.item_id, ev.output])
            else:
                errors.append([ev.item_id, ev.message])
    return done, errors


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when the router dies (prctl PR_SET_PDEATHSIG),
    so a killed router never leaves containers running."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() == 1:   # the parent died before prctl took effect
        os._exit(1)


# A warm-up text of the longest shape: this many words per token of the build's
# max_seq_len is past it whatever the tokenizer (it truncates).
WARMUP_WORDS_PER_TOKEN = 1
# The most rows a warm-up batch holds (the batcher's max_batch_rows, up to this).
WARMUP_MAX_ROWS = 32


def _warmup_batches(ep, model) -> list[list]:
    """The warm-up batches: ``FLOODWAY_WARMUP_INPUTS`` (a JSON list of items as the function
    receives them: one batch), else a sample item of the function's declared type
    ("warm-up" for str, a pair of them, a gray image, zeros of an array's shape); for an
    undeclared type (Any), one the build's task takes (`floodway.tasks.base.Task.
    sample_item`), or "warm-up" for an endpoint with its own runtime; else none.

    A text endpoint with a built graph (not streaming, not its own runtime) is warmed
    over the shapes its batcher cuts, so that its first request runs at warm speed: one
    row at the sample's length, at a quarter of the build's `max_seq_len` and at the whole
    of it (the sequence axis), and a batch of the batcher's `max_batch_rows` (at most
    WARMUP_MAX_ROWS) short rows (the batch axis): tens of milliseconds on a core, not a
    full batch at the longest length."""
    raw = os.environ.get(WARMUP_INPUTS_ENV)
    if raw:
        return [loads(raw)]
    if ep.input_type is Any and not ep.own_runtime:
        from floodway import tasks

        item = tasks.get(model.task).sample_item(model)
    else:
        from floodway.functions.items import sample_item

        item = sample_item(ep.fn)
    if item is None:
        return []
    seq = getattr(ep.build, "max_seq_len", None)
    if not isinstance(item, str) or not seq or ep.streaming or ep.own_runtime:
        return [[item]]

    def text(tokens: int) -> str:
        return " ".join([item, *(["warm"] * max(0, tokens * WARMUP_WORDS_PER_TOKEN - 1))])

    rows = max(1, min(ep.batching.max_batch_rows, WARMUP_MAX_ROWS))
    return [[item], [text(max(2, seq // 4))], [text(seq)], [item] * rows]


def boot(app_spec: str, ep_name: str, store_root: str, send: Send) -> tuple[Any, Any] | None:
    """Import, load and warm up endpoint `ep_name` -> (fn, model), having sent Phase and
    Ready; None, having sent Failed, when any step raised. The model is the build opened by
    the loader (`floodway.build.loader.load`), or, for an endpoint that brings its own
    runtime, what its `load` hook returned (`floodway.build.artifacts.load_own`; cold-start
    phases then split artifact_load from load_hook)."""
    timings = {"process_start": max(0.0, _T_MAIN - float(os.environ.get(SPAWN_ENV, _T_MAIN)))}
    early = None
    try:
        t = time.perf_counter()
        from floodway.build.prefetch import start_prefetch
        from floodway.build.store import ArtifactStore

        folder = ArtifactStore(store_root).latest(ep_name)
        # The session and hashes build on a thread while the imports below hold the GIL.
        early = start_prefetch(folder)
        _die_with_parent()   # after the prefetch starts: ctypes costs an import too
        from floodway.build.loader import load
        from floodway.functions.discover import load_app
        from floodway.runtime.protocol import Phase, Ready

        _, (ep,) = load_app(f"{app_spec}::{ep_name}")
        timings["imports"] = time.perf_counter() - t
        t = time.perf_counter()
        if ep.own_runtime:   # load= hook, or no model source: no graph to open
            from floodway.build.artifacts import load_own

            model, backend, phases = load_own(ep, folder)
            timings.update(phases)
        else:
            model = load(folder, prefetch=early)
            backend = model.backend
            timings["artifact_load"] = time.perf_counter() - t
        send([Phase("warming")])
        t = time.perf_counter()
        if ep.streaming:   # the engine's limits are the endpoint's, from its first step
            from floodway.runtime.stream_worker import configure

            configure(ep, model)
        for warm in _warmup_batches(ep, model):
            # the batch contract, checked as for requests: names a None return
            try:
                if ep.streaming:   # on the loop that will serve it (a stream's engine)
                    from floodway.runtime.stream_worker import warm_up

                    warm_up(ep.fn, model, warm)
                else:
                    _call(ep.fn, model, warm)
            except ContractError as e:
                raise ContractError(f"endpoint {ep.name!r}, warm-up: {e}") from None
        timings["warmup"] = time.perf_counter() - t
    except BaseException as e:  # noqa: BLE001 - report any load failure, then exit
        if is_fatal(e):
            raise
        from floodway.runtime.protocol import Failed

        send([Failed(f"{type(e).__name__}: {e}", error_trace(e))])
        if early is not None:
            early.join()
        return None
    from floodway.runtime.share import serving_priority

    serving_priority()   # ready: no longer below the serving containers
    send([Ready(timings, backend, "torch" in sys.modules, os.getpid())])
    return ep.fn, model


def serve(fn, model, lines: Iterable[bytes] | Any, send: Send, *,
          clock: Callable[[], float] = time.monotonic) -> int:
    """Answer the router's messages until they end -> the exit code: 0, or 1 after sending
    Failed for a line that is not a valid message. `lines`: a `floodway.runtime.inbox.Inbox`
    (the pipe, read ahead on a thread), or an iterable of lines read whole at once. A
    batch's items that a Cancel named or whose deadline passed (`clock()`: the clock of
    `Batch.deadlines`) are skipped (`Inbox.start`); its BatchDone counts the rows run."""
    from floodway.errors import ProtocolError
    from floodway.runtime.inbox import Inbox
    from floodway.runtime.protocol import BatchDone, Failed, Ping, Pong

    inbox = lines if isinstance(lines, Inbox) else Inbox(lines)
    while (req := inbox.next()) is not None:
        if isinstance(req, ProtocolError):
            send([Failed(f"protocol error: {req}")])
            return 1
        if isinstance(req, Ping):   # liveness: answered between batches, at once
            send([Pong()])
            continue
        inbox.catch_up()   # the Cancels that came after this batch, while another ran
        items, skipped = inbox.start(req, clock())
        rows, ended, done = len(items), 0, False
        compute_s, t = 0.0, time.perf_counter()
        for events in item_events(fn, model, req.id, items) if items else ():
            compute_s += time.perf_counter() - t
            ended += len(events)   # one event per item
            if ended >= rows:   # the last items: BatchDone rides on their line
                events, done = [*events, BatchDone(req.id, compute_s, rows)], True
            send([*skipped, *events])   # the items skipped go out with the first ones
            skipped, t = [], time.perf_counter()
        if not done:   # none ran, or the function's last events were not all of them
            took = compute_s + time.perf_counter() - t if items else 0.0
            send([*skipped, BatchDone(req.id, took, rows)])
    return 0


def sender(out, *, max_line_bytes: int | None = None,
           max_output_bytes: int | None = None) -> Send:
    """A `Send` writing to binary stream `out` in one write, then a flush: the messages on
    one line, or on several when their outputs are large, each line at most
    `max_line_bytes` (default `protocol.MAX_LINE_BYTES`, the router's read limit); an
    output over `max_output_bytes` (default `protocol.MAX_OUTPUT_BYTES`) is sent as its
    item's ItemError instead (`protocol.encode_lines`)."""

    def send(msgs: list[Any]) -> None:
        from floodway.runtime import protocol

        out.write(b"".join(protocol.encode_lines(
            msgs, max_line_bytes=max_line_bytes or protocol.MAX_LINE_BYTES,
            max_output_bytes=max_output_bytes or protocol.MAX_OUTPUT_BYTES)))
        out.flush()

    return send


def main(argv: list[str]) -> int:
    app_spec, ep_name, store_root = argv
    # Below the router's priority before anything heavy runs, and below serving containers
    # while it starts (floodway.runtime.share).
    from floodway.runtime.share import BOOT_NICE_EXTRA, lower_priority

    lower_priority(extra=BOOT_NICE_EXTRA)
    # Ctrl-C reaches the whole process group; the parent drains and stops its containers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    send = sender(proto)
    booted = boot(app_spec, ep_name, store_root, send)
    if booted is None:
        return 1
    fn, model = booted
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        # Its sequences run at once, on an asyncio loop.
        from floodway.runtime.stream_worker import run

        return run(fn, model, sys.stdin.buffer, proto)
    from floodway.runtime.inbox import Inbox

    # Read ahead on a thread: a Cancel for the batch waiting behind the running one is
    # known before that batch starts.
    return serve(fn, model, Inbox(sys.stdin.buffer, threaded=True), send)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
