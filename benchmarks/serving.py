"""`floodway serve` as a benchmark's subprocess: started on a free loopback port, polled
until its whole pool is ready (never slept for), always stopped."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(app_file: Path, args: list[str], env: dict[str, str], log: Path, *,
           ready_timeout_s: float = 120) -> Iterator[str]:
    """`floodway serve APP_FILE --port P *args` with `env`; yields the base URL once
    ``/readyz`` answers 200 and every container is ready, and stops the server however the
    block ends. Output goes to `log` (a pipe nobody reads would block the server). Raises
    RuntimeError when the server exits or is not ready within `ready_timeout_s`."""
    port = free_port()
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.cli", "serve", str(app_file), "--port", str(port),
             *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + ready_timeout_s
        with httpx.Client(base_url=base, timeout=5) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"floodway serve exited ({proc.returncode}); see {log}")
                if time.monotonic() > end:
                    raise RuntimeError(f"floodway serve not ready after {ready_timeout_s:g} s; "
                                       f"see {log}")
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    r = client.get("/readyz")
                    states = [c["state"] for cs in r.json().get("endpoints", {}).values()
                              for c in cs]
                    if r.status_code == 200 and states and all(s == "ready" for s in states):
                        break
                time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
