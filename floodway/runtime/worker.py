"""A container's process: import the user's module, load artifacts, warm up, answer batches.

Run as ``python -m floodway.runtime.worker APP ENDPOINT STORE``. It speaks the typed messages
of `floodway.runtime.protocol` with its parent, as JSON lines: Batch and Ping on stdin;
Phase, Ready (or Failed, then exit 1), Pong, and per batch one ItemResult or ItemError per
item followed by BatchDone on the process's original stdout (fd 1 is then pointed at stderr,
so a stray print in user code cannot corrupt the protocol).

Item events go out as soon as they are known, the events known together on one line: a
batch that runs whole is one line (its items and BatchDone); a raising batch is re-run item
by item and each item's event goes out as it is known, so that a bad item fails alone and
the good ones are not held back by the re-runs.

Cold-start phases (seconds): process_start (spawn -> interpreter running this module),
imports (user module and floodway), artifact_load, warmup (first inference).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from floodway.codec import loads

_T_MAIN = time.time()
SPAWN_ENV = "FLOODWAY_SPAWN_T"
WARMUP_INPUTS_ENV = "FLOODWAY_WARMUP_INPUTS"

# floodway.runtime.protocol is imported where it is first needed, not above: its message
# classes take milliseconds to create, which a container pays after its artifact prefetch
# has started (overlapping it), not before.
Send = Callable[[list[Any]], None]   # writes protocol messages, then flushes


def _to_jsonable(value):
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def _shape(value) -> tuple:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(value, (list, tuple)):
        return (len(value), *(_shape(value[0]) if value else ()))
    return ()


def _call(fn, model, inputs: list) -> list:
    """`fn` on one batch, its contract checked: one output per input, all of one shape."""
    out = fn(model, inputs)
    n = len(out) if hasattr(out, "__len__") else -1
    if n != len(inputs):
        raise ContractError(f"returned {n} outputs for {len(inputs)} inputs")
    outs = [_to_jsonable(o) for o in out]
    shapes = {_shape(o) for o in outs}
    if len(shapes) > 1:
        raise ContractError(f"returned outputs of different shapes {sorted(shapes)}")
    return outs


class ContractError(Exception):
    """The endpoint function broke its contract (output count or shape)."""


def item_events(fn, model, batch_id: int, items: list) -> Iterator[list]:
    """Run `items` ((item_id, input) pairs) as one batch. Yields lists of ItemResult /
    ItemError events as they become known: one list for the whole batch when it runs, else
    (a batch of several items raised) one list per item, each item re-run alone. A broken
    contract (wrong output count or shapes) fails every item of the batch."""
    from floodway.runtime.protocol import ItemError, ItemResult

    ids, inputs = [i for i, _ in items], [x for _, x in items]
    try:
        outs = _call(fn, model, inputs)
    except Exception as e:  # noqa: BLE001 - a failing batch must not kill the container
        if len(items) == 1 or isinstance(e, ContractError):
            yield [ItemError(batch_id, i, f"{type(e).__name__}: {e}") for i in ids]
            return
    else:
        yield [ItemResult(batch_id, i, o) for i, o in zip(ids, outs, strict=True)]
        return
    for item in items:
        yield from item_events(fn, model, batch_id, [item])


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


def boot(app_spec: str, ep_name: str, store_root: str, send: Send) -> tuple[Any, Any] | None:
    """Import, load and warm up endpoint `ep_name` -> (fn, model), having sent Phase and
    Ready; None, having sent Failed, when any step raised."""
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
        model = load(folder, prefetch=early)
        timings["artifact_load"] = time.perf_counter() - t
        send([Phase("warming")])
        t = time.perf_counter()
        warm = loads(os.environ.get(WARMUP_INPUTS_ENV, '["warm-up"]'))
        out = ep.fn(model, warm)
        if len(out) != len(warm):
            raise RuntimeError(f"warm-up returned {len(out)} outputs for {len(warm)} inputs")
        timings["warmup"] = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 - report any load failure to the parent, then exit
        from floodway.runtime.protocol import Failed

        send([Failed(f"{type(e).__name__}: {e}")])
        if early is not None:
            early.join()
        return None
    send([Ready(timings, model.backend, "torch" in sys.modules, os.getpid())])
    return ep.fn, model


def serve(fn, model, lines: Iterable[bytes], send: Send) -> int:
    """Answer each line of `lines` (Batch or Ping) until they end -> the exit code: 0, or 1
    after sending Failed for a line that is not a valid message."""
    from floodway.errors import ProtocolError
    from floodway.runtime.protocol import TO_WORKER, BatchDone, Failed, Ping, Pong, decode

    for line in lines:
        try:
            req = decode(line, TO_WORKER)
        except ProtocolError as e:
            send([Failed(f"protocol error: {e}")])
            return 1
        if isinstance(req, Ping):   # liveness: answered between batches, at once
            send([Pong()])
            continue
        rows, ended, done = len(req.items), 0, False
        compute_s, t = 0.0, time.perf_counter()
        for events in item_events(fn, model, req.id, list(req.items)):
            compute_s += time.perf_counter() - t
            ended += len(events)   # one event per item
            if ended >= rows:   # the last items: BatchDone rides on their line
                events, done = [*events, BatchDone(req.id, compute_s, rows)], True
            send(events)
            t = time.perf_counter()
        if not done:
            send([BatchDone(req.id, compute_s + time.perf_counter() - t, rows)])
    return 0


def sender(out) -> Send:
    """A `Send` writing to binary stream `out`: the messages as one line
    (`protocol.encode_all`), then a flush."""

    def send(msgs: list[Any]) -> None:
        from floodway.runtime.protocol import encode_all

        out.write(encode_all(msgs))
        out.flush()

    return send


def main(argv: list[str]) -> int:
    app_spec, ep_name, store_root = argv
    # Ctrl-C reaches the whole process group; the parent drains and stops its containers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    send = sender(proto)
    booted = boot(app_spec, ep_name, store_root, send)
    if booted is None:
        return 1
    return serve(*booted, sys.stdin.buffer, send)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
