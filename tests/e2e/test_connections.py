"""Connection limits of a real `floodway serve` (tests/e2e/timed_app.py): thousands of idle
sockets do not stop it serving and are closed after the header timeout; a header sent a
byte at a time (slow loris) gets a 408 and is closed; past the cap a connection is closed
on arrival. Every wait polls; the figures are printed."""

from __future__ import annotations

import select
import selectors
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PATIENCE_S, running_server, wait_until

pytestmark = pytest.mark.e2e
TIMED_APP = Path(__file__).with_name("timed_app.py")
IDLE = 5000
HEADER_TIMEOUT_S = 3.0


def env(tmp_path, **extra: str) -> dict[str, str]:
    return {"FLOODWAY_JOBS_DB": str(tmp_path / "jobs.sqlite3"), "FLOODWAY_ORT_THREADS": "1",
            "FLOODWAY_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), **extra}


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setblocking(False)
    return s


def closed_by_server(socks: list[socket.socket], timeout_s: float) -> int:
    """How many of `socks` the server closed (EOF or reset) within `timeout_s`."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed, end = 0, time.monotonic() + timeout_s
    while closed < len(socks) and time.monotonic() < end:
        for key, _ in sel.select(timeout=0.2):
            try:
                data = key.fileobj.recv(4096)
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if not data:
                closed += 1
                sel.unregister(key.fileobj)
    sel.close()
    return closed


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_idle_sockets_do_not_stop_serving_and_are_closed_after_the_header_timeout(
        built_store, tmp_path):
    with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log",
                        env=env(tmp_path)) as srv:
        port = port_of(srv.base)
        t0 = time.monotonic()
        idle = [connect(port) for _ in range(IDLE)]
        opened_s = time.monotonic() - t0
        try:
            r = httpx.post(f"{srv.base}/v1/embed", json={"inputs": ["abc"]}, timeout=60)
            assert r.status_code == 200 and r.json()["outputs"][0][0] == 3
            t1 = time.monotonic()
            closed = closed_by_server(idle, HEADER_TIMEOUT_S + PATIENCE_S)
            closed_s = time.monotonic() - t1
            after = httpx.post(f"{srv.base}/v1/embed", json={"inputs": ["abcd"]}, timeout=60)
            text = srv.client.get("/metrics").text
        finally:
            for s in idle:
                s.close()
        print(f"\n{IDLE} idle sockets opened in {opened_s:.2f} s; a request served among them; "
              f"{closed} closed by the router within {closed_s:.2f} s")
        assert closed == IDLE and after.status_code == 200
        assert f'floodway_connections_closed_total{{reason="header_timeout"}} {IDLE}' in text


def test_a_slow_header_gets_408_and_a_connection_past_the_cap_is_closed(built_store, tmp_path):
    with running_server(TIMED_APP, built_store, log=tmp_path / "serve.log",
                        env=env(tmp_path, FLOODWAY_MAX_CONNECTIONS="20")) as srv:
        port = port_of(srv.base)
        t0, sent = time.monotonic(), 0
        loris = socket.create_connection(("127.0.0.1", port), timeout=HEADER_TIMEOUT_S + 10)
        # A header that never ends (a value growing a byte every 0.2 s), until the server
        # answers, however late this machine lets it.
        start = b"POST /v1/embed HTTP/1.1\r\nhost: x\r\nx-slow: "
        answer = b""
        try:
            while time.monotonic() < t0 + HEADER_TIMEOUT_S + PATIENCE_S:
                loris.sendall(bytes([start[sent]]) if sent < len(start) else b"a")
                sent += 1
                if select.select([loris], [], [], 0.2)[0]:   # the server answered
                    answer = loris.recv(4096)
                    break
        except OSError:
            pass
        took_s = time.monotonic() - t0
        loris.close()
        over_cap = 'floodway_connections_closed_total{reason="over_cap"}'
        before = srv.metric(over_cap)
        held = [connect(port) for _ in range(25)]
        try:
            # Those past the cap are closed on arrival (counted so); the rest would be closed
            # at the header timeout.
            over = wait_until(lambda: srv.metric(over_cap) - before >= 5 and
                              srv.metric(over_cap) - before, PATIENCE_S,
                              "the connections past the cap closed")
            wait_until(lambda: srv.client.get("/healthz").status_code == 200, PATIENCE_S,
                       "healthz")
        finally:
            for s in held:
                s.close()
        print(f"\nslow header: {sent} bytes sent, answered {answer[:30]!r} after {took_s:.1f} s;"
              f" {over:g} of 25 connections past a cap of 20 closed on arrival")
        # Answered 408 once the header timeout passed, the header still unfinished.
        assert answer.startswith(b"HTTP/1.1 408") and took_s >= HEADER_TIMEOUT_S
