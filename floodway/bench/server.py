"""`floodway serve APP` as bench's subprocess: on a free loopback port, with a jobs
database of its own (so that a run's async jobs never join the user's backlog), polled until
its whole pool is ready (never slept for a fixed time), always stopped."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from floodway.errors import FloodwayError

READY_TIMEOUT_S = 300.0
POLL_S = 0.1
STOP_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(client: httpx.Client) -> bool:
    """/readyz answers 200 and every container it lists is ready."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        r = client.get("/readyz")
        states = [c["state"] for cs in r.json().get("endpoints", {}).values() for c in cs]
        return r.status_code == 200 and bool(states) and all(s == "ready" for s in states)
    return False


@contextlib.contextmanager
def serving(app: str, store: Path | None, work: Path, log: Path,
            ready_timeout_s: float = READY_TIMEOUT_S, containers: int | None = None
            ) -> Iterator[str]:
    """`floodway serve APP` (APP as `floodway serve` takes it; `containers`: its
    ``--containers``) with its jobs database in `work` and its output in `log`; yields the
    base URL once every container is ready and stops the server however the block ends.
    Raises FloodwayError when the server exits or is not ready within `ready_timeout_s`,
    naming `log`."""
    port = free_port()
    cmd = [sys.executable, "-m", "floodway.cli", "serve", app, "--port", str(port),
           "--jobs-db", str(work / "jobs.sqlite3")]
    if store is not None:
        cmd += ["--store", str(store)]
    if containers is not None:
        cmd += ["--containers", str(containers)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "a") as out:       # a pipe nobody reads would block the server once full
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + ready_timeout_s
        with httpx.Client(base_url=base, timeout=5) as client:
            while not _ready(client):
                if proc.poll() is not None:
                    raise FloodwayError(f"floodway serve {app} exited with {proc.returncode} "
                                        f"before it was ready; its output: {log}")
                if time.monotonic() > end:
                    raise FloodwayError(f"floodway serve {app} not ready after "
                                        f"{ready_timeout_s:g} s; its output: {log}")
                time.sleep(POLL_S)
        yield base
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """End a `floodway serve` process: SIGTERM (it drains), SIGKILL after STOP_S."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


__all__ = ["free_port", "serving", "stop"]
