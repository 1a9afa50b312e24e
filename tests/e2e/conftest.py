"""A real `floodway serve` process on loopback, shared by the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import MODAL_APP, ROOT, free_port


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll `predicate` until it returns a truthy value; fail naming `what` on timeout."""
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        try:
            last = predicate()
            if last:
                return last
        except httpx.HTTPError as e:
            last = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


class Server:
    def __init__(self, proc: subprocess.Popen, base: str):
        self.proc, self.base = proc, base
        self.client = httpx.Client(base_url=base, timeout=30)

    def readiness(self) -> dict:
        return self.client.get("/readyz").json()


@pytest.fixture(scope="module")
def server(built_store) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "FLOODWAY_STORE": str(built_store)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "floodway.cli", "serve", str(MODAL_APP), "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    srv = Server(proc, f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: proc.poll() is None and srv.client.get("/healthz").status_code == 200,
                   60, "/healthz")
        wait_until(lambda: srv.client.get("/readyz").status_code == 200, 120, "/readyz")
        # /readyz needs one warm container per endpoint; the tests want the whole pool.
        wait_until(lambda: all(c["state"] == "ready" for cs in srv.readiness()["endpoints"]
                               .values() for c in cs), 120, "every container ready")
        yield srv
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        srv.client.close()
