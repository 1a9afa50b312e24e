"""A container's process: import the user's module, load artifacts, warm up, answer batches.

Run as ``python -m floodway.runtime.worker APP ENDPOINT STORE``. It speaks newline-delimited
JSON with its parent: requests on stdin, replies on the process's original stdout (fd 1 is then
pointed at stderr, so a stray print in user code cannot corrupt the protocol).

    parent -> worker   {"id": int, "items": [[item_id, input], ...]}
    worker -> parent   {"type": "phase", "phase": "warming"}
                       {"type": "ready", "timings_s": {...}, "backend": str, "torch": bool}
                       {"type": "result", "id": int, "outputs": [[item_id, output], ...],
                        "errors": [[item_id, message], ...], "compute_s": float}
                       {"type": "failed", "error": str}          (then exit 1)

Outputs travel with their item ids, so the router maps them back by id, never by position.
When a batch raises, each item is run alone so that a bad item fails alone.

Cold-start phases (seconds): process_start (spawn -> interpreter running this module),
imports (user module and floodway), artifact_load, warmup (first inference).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from floodway.codec import dumps, loads

_T_MAIN = time.time()
SPAWN_ENV = "FLOODWAY_SPAWN_T"
WARMUP_INPUTS_ENV = "FLOODWAY_WARMUP_INPUTS"


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


def run_batch(fn, model, items: list) -> tuple[list, list]:
    """Run `items` ([item_id, input] pairs) as one batch -> (outputs, errors), each a list of
    [item_id, value]. A raising batch of several items is retried item by item."""
    ids, inputs = [i for i, _ in items], [x for _, x in items]
    try:
        return [list(p) for p in zip(ids, _call(fn, model, inputs), strict=True)], []
    except Exception as e:  # noqa: BLE001 - a failing batch must not kill the container
        if len(items) == 1 or isinstance(e, ContractError):
            return [], [[i, f"{type(e).__name__}: {e}"] for i in ids]
    done, errors = [], []
    for item in items:
        d, err = run_batch(fn, model, [item])
        done += d
        errors += err
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


def main(argv: list[str]) -> int:
    app_spec, ep_name, store_root = argv
    # Ctrl-C reaches the whole process group; the parent drains and stops its containers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    def send(msg: dict) -> None:
        proto.write(dumps(msg) + b"\n")
        proto.flush()

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

        _, (ep,) = load_app(f"{app_spec}::{ep_name}")
        timings["imports"] = time.perf_counter() - t
        t = time.perf_counter()
        model = load(folder, prefetch=early)
        timings["artifact_load"] = time.perf_counter() - t
        send({"type": "phase", "phase": "warming"})
        t = time.perf_counter()
        warm = json.loads(os.environ.get(WARMUP_INPUTS_ENV, '["warm-up"]'))
        out = ep.fn(model, warm)
        if len(out) != len(warm):
            raise RuntimeError(f"warm-up returned {len(out)} outputs for {len(warm)} inputs")
        timings["warmup"] = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 - report any load failure to the parent, then exit
        send({"type": "failed", "error": f"{type(e).__name__}: {e}"})
        if early is not None:
            early.join()
        return 1
    send({"type": "ready", "timings_s": timings, "backend": model.backend,
          "torch": "torch" in sys.modules, "pid": os.getpid()})

    for line in sys.stdin:
        req = loads(line)
        if req.get("type") == "ping":   # liveness: answered between batches, at once
            send({"type": "pong"})
            continue
        t = time.perf_counter()
        done, errors = run_batch(ep.fn, model, req["items"])
        send({"type": "result", "id": req["id"], "outputs": done, "errors": errors,
              "compute_s": time.perf_counter() - t})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
