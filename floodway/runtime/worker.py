"""A container's process: import the user's module, load artifacts, warm up, answer batches.

Run as ``python -m floodway.runtime.worker APP ENDPOINT STORE``. It speaks newline-delimited
JSON with its parent: requests on stdin, replies on the process's original stdout (fd 1 is then
pointed at stderr, so a stray print in user code cannot corrupt the protocol).

    parent -> worker   {"id": int, "inputs": [...]}
    worker -> parent   {"type": "phase", "phase": "warming"}
                       {"type": "ready", "timings_s": {...}, "backend": str, "torch": bool}
                       {"type": "result", "id": int, "outputs": [...]}
                       {"type": "error", "id": int, "error": str}
                       {"type": "failed", "error": str}          (then exit 1)

Cold-start phases (seconds): process_start (spawn -> interpreter running this module),
imports (user module and floodway), artifact_load, warmup (first inference).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

_T_MAIN = time.time()
SPAWN_ENV = "FLOODWAY_SPAWN_T"
WARMUP_INPUTS_ENV = "FLOODWAY_WARMUP_INPUTS"


def _to_jsonable(value):
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


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
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg, separators=(",", ":")) + "\n")

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
        req = json.loads(line)
        try:
            outputs = [_to_jsonable(o) for o in ep.fn(model, req["inputs"])]
            send({"type": "result", "id": req["id"], "outputs": outputs})
        except Exception as e:  # noqa: BLE001 - a failing batch must not kill the container
            send({"type": "error", "id": req["id"], "error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
