"""A real `floodway serve` process on loopback, shared by the end-to-end tests."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import MODAL_APP, ROOT, free_port

# How long a test waits for what the product must do in the end (a container replaced, a
# count reached, a stream stopped): a guard against a hang, far beyond what a slow, busy
# machine needs, never a bound on how fast it happens.
PATIENCE_S = 120.0


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
    def __init__(self, proc: subprocess.Popen, base: str, log: Path):
        self.proc, self.base, self.log = proc, base, log
        self.client = httpx.Client(base_url=base, timeout=30)

    def readiness(self) -> dict:
        return self.client.get("/readyz").json()

    def containers(self, endpoint: str = "embed") -> list[dict]:
        return self.readiness()["endpoints"][endpoint]

    def metric(self, line_start: str) -> float:
        """The value of the first /metrics sample line starting with `line_start` (0 if none)."""
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def sse(self, endpoint: str, inputs: list) -> list[tuple[float, object]]:
        """POST `inputs` to a streaming endpoint asking for SSE -> (arrival seconds, event)
        per event, the final "[DONE]" last."""
        out = []
        with self.client.stream("POST", f"/v1/{endpoint}", json={"inputs": inputs},
                                headers={"Accept": "text/event-stream"}) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    out.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
        return out

    def sequences(self, endpoint: str) -> dict:
        """/readyz's running sequences and KV cache of a streaming endpoint ({} if none)."""
        return self.readiness().get("sequences", {}).get(endpoint, {})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.client.close()


@contextlib.contextmanager
def running_server(app_file: Path, store: Path, *args: str, log: Path,
                   env: dict[str, str] | None = None, whole_pool: bool = True
                   ) -> Iterator[Server]:
    """`floodway serve APP` on a free loopback port, ready (polled, never slept for).
    Its output goes to `log` (a pipe nobody reads would block the server once full)."""
    port = free_port()
    full_env = {**os.environ, "FLOODWAY_STORE": str(store), **(env or {})}
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floodway.cli", "serve", str(app_file), "--port", str(port),
             *args], cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT, text=True)
    srv = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        wait_until(lambda: proc.poll() is None and srv.client.get("/healthz").status_code == 200,
                   60, "/healthz")
        wait_until(lambda: srv.client.get("/readyz").status_code == 200, 120, "/readyz")
        if whole_pool:
            # /readyz needs one warm container per endpoint; tests want the whole pool.
            wait_until(lambda: all(c["state"] == "ready" for cs in srv.readiness()["endpoints"]
                                   .values() for c in cs), 120, "every container ready")
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server(built_store, tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with running_server(MODAL_APP, built_store, log=log) as srv:
        yield srv


def openai_chat_stream(client, **kwargs) -> tuple[list[str], object]:
    """`client.chat.completions.create(stream=True, ...)` with usage asked for -> (the
    streamed text's parts, the usage of its last chunk)."""
    stream = client.chat.completions.create(stream=True,
                                            stream_options={"include_usage": True}, **kwargs)
    parts, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    return parts, usage
