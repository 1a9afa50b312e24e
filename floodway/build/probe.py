"""The build's cold-start probe: a fresh Python process opens the build being published, as a
container would, and the seconds from its spawn to the model loaded are recorded in the
manifest (`Manifest.cold_start_s`). The router seeds its cold-start estimate from that figure
before it has timed a start of its own (`floodway.core.estimators.build_start_s`).

    seconds = probe_cold_start(staging)      # None when the probe failed (logged)
    python -m floodway.build.probe FOLDER     # the probe process: prints its seconds

What the probe pays is what a container pays before its first answer, less the app module's
import and the warm-up batches: the interpreter's start, floodway's, ONNX Runtime's and the
tokenizer's imports, the manifest and sha256 checks and opening the graph, on the hardware the
build ran on.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("floodway.build")

T0_ENV = "FLOODWAY_PROBE_T0"
PROBE_TIMEOUT_S = 300.0


def probe_cold_start(folder: Path, *, timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
    """Seconds from spawning a fresh process to the build at `folder` loaded in it; None,
    with a warning logged, when it did not load (serving would then fail the same way)."""
    env = {**os.environ, T0_ENV: repr(time.time())}
    try:
        res = subprocess.run([sys.executable, "-m", "floodway.build.probe", str(folder)],
                             env=env, capture_output=True, text=True, timeout=timeout_s)
        if res.returncode == 0:
            return round(float(res.stdout.strip().splitlines()[-1]), 4)
        why = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        why = f"{type(e).__name__}: {e}"
    log.warning("the cold-start probe could not load %s in a fresh process (%s); the router "
                "will plan with the cold-start prior until a container has started", folder,
                why)
    return None


def _main(folder: str) -> None:
    from floodway.build.loader import load

    load(folder)
    print(f"{time.time() - float(os.environ[T0_ENV]):.4f}", flush=True)


if __name__ == "__main__":
    _main(sys.argv[1])
