"""Connection limits read from the environment, the open-files limit raised to fit, and the
protocol's deadlines and eviction, driven byte by byte on fake timers and a fake transport."""

from __future__ import annotations

import asyncio
import resource

import pytest
import uvicorn
from uvicorn.server import ServerState

from floodway.errors import FloodwayError
from floodway.http.admit import BODY_TIMEOUT_S as APP_BODY_TIMEOUT_S
from floodway.runtime.connections import (
    CLOSE_REASONS,
    HEADER_TIMEOUT_S,
    ConnectionLimits,
    ConnectionStats,
    LimitedH11Protocol,
    limits_from_env,
    raise_fd_limit,
    uvicorn_options,
)


def test_limits_come_from_their_variables_or_the_defaults():
    assert limits_from_env({}) == ConnectionLimits()
    got = limits_from_env({"FLOODWAY_HEADER_TIMEOUT_S": "2.5", "FLOODWAY_MAX_CONNECTIONS": "64",
                           "FLOODWAY_KEEPALIVE_S": "1", "FLOODWAY_BODY_TIMEOUT_S": "7",
                           "FLOODWAY_LINGER_S": "0.5"})
    assert got == ConnectionLimits(header_timeout_s=2.5, keepalive_s=1.0, max_connections=64,
                                   body_timeout_s=7.0, linger_s=0.5)
    assert ConnectionLimits().header_timeout_s == HEADER_TIMEOUT_S
    # The app's own body deadline answers first, with a 408 naming what was late.
    assert ConnectionLimits().body_timeout_s > APP_BODY_TIMEOUT_S


def test_a_limit_that_is_not_positive_names_its_field():
    with pytest.raises(FloodwayError, match="linger_s=0"):
        ConnectionLimits(linger_s=0)


@pytest.mark.parametrize("var,value", [("FLOODWAY_HEADER_TIMEOUT_S", "0"),
                                       ("FLOODWAY_MAX_CONNECTIONS", "2.5"),
                                       ("FLOODWAY_KEEPALIVE_S", "soon"),
                                       ("FLOODWAY_BODY_TIMEOUT_S", "-1"),
                                       ("FLOODWAY_LINGER_S", "")])
def test_a_bad_value_names_its_variable(var, value):
    with pytest.raises(FloodwayError, match=var):
        limits_from_env({var: value})


def test_uvicorn_gets_the_keepalive_and_a_protocol_bound_to_the_limits():
    limits, stats = ConnectionLimits(keepalive_s=3), ConnectionStats()
    opts = uvicorn_options(limits, stats)
    assert opts["timeout_keep_alive"] == 3
    assert opts["http"].keywords == {"limits": limits, "stats": stats}
    assert stats.snapshot() == {"open": 0, "closed": dict.fromkeys(CLOSE_REASONS, 0)}


def test_the_open_files_limit_is_raised_toward_the_cap_never_past_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        now = raise_fd_limit(soft)          # asks for more than the current soft limit
        assert now >= soft and (hard == resource.RLIM_INFINITY or now <= hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---------------------------------------------------------------- the protocol, phase by phase
LIMITS = ConnectionLimits(header_timeout_s=10, body_timeout_s=20, linger_s=5, keepalive_s=5,
                          max_connections=2)
POST = b"POST /read HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\n"


class Timers:
    """The protocol's loop: `call_later` on a clock that moves only by `advance`; tasks run
    on the real loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.now, self.handles = loop, 0.0, []

    def time(self) -> float:
        return self.now

    def call_later(self, delay, callback, *args):
        handle = asyncio.TimerHandle(self.now + delay, callback, args, self.loop)
        self.handles.append(handle)
        return handle

    def create_task(self, coro, **kwargs):
        return self.loop.create_task(coro, **kwargs)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for h in sorted(self.handles, key=lambda h: h.when()):
            if h.when() <= self.now and not h.cancelled():
                self.handles.remove(h)
                h._run()


class Transport:
    """A socket's transport: what was written, whether the FIN went, whether it closed."""

    def __init__(self):
        self.written, self.eof, self.closed = b"", False, False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name)

    def write(self, data: bytes) -> None:
        assert not self.eof and not self.closed, "written after the FIN or the close"
        self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope, receive, send):
    """/read reads the whole body, then answers; /early answers at once without reading it,
    /late-408 answers 408 after the first body bytes (as the app does for a slow body);
    /hang reads the body, then never answers."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/late-408":
        await receive()
    while scope["path"] in ("/read", "/hang"):
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body"):
            break
    if scope["path"] == "/hang":
        await asyncio.Event().wait()
    status = 408 if scope["path"] == "/late-408" else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class Harness:
    def __init__(self, limits: ConnectionLimits = LIMITS):
        self.timers = Timers(asyncio.get_running_loop())
        self.config = uvicorn.Config(app, log_config=None, access_log=False)
        self.state, self.stats, self.limits = ServerState(), ConnectionStats(), limits

    def connect(self) -> tuple[LimitedH11Protocol, Transport]:
        p = LimitedH11Protocol(self.config, self.state, {}, _loop=self.timers,
                               limits=self.limits, stats=self.stats)
        t = Transport()
        p.connection_made(t)
        return p, t


def run(test) -> None:
    asyncio.run(test())


def test_headers_are_due_within_the_header_timeout():
    async def go():
        h = Harness()
        (_, silent), (loris, slow) = h.connect(), h.connect()
        loris.data_received(b"POST /read HTTP/1.1\r\nhost:")
        h.timers.advance(9.9)
        assert not silent.closed and not slow.closed
        h.timers.advance(0.2)
        assert silent.closed and silent.written == b""   # nothing came: nothing to answer
        assert slow.closed and slow.written.startswith(b"HTTP/1.1 408")
        assert h.stats.closed["header_timeout"] == 2
    run(go)


def test_a_body_announced_and_never_sent_gets_408_and_is_closed_at_the_body_timeout():
    async def go():
        h = Harness()
        p, t = h.connect()
        p.data_received(POST + b"12345")        # half the body, then nothing
        await settle()
        h.timers.advance(19.9)                   # past the header timeout, not the body's
        assert not t.closed
        h.timers.advance(0.2)
        await settle()
        assert t.closed and t.written.startswith(b"HTTP/1.1 408")
        assert h.stats.closed["body_timeout"] == 1
    run(go)


def test_a_whole_body_disarms_the_deadline_and_keeps_the_connection_alive():
    async def go():
        h = Harness()
        p, t = h.connect()
        p.data_received(POST + b"0123456789")
        await settle()
        assert t.written.startswith(b"HTTP/1.1 200") and not t.eof
        h.timers.advance(30)                     # every deadline passed: uvicorn's keep-alive
        assert t.closed and sum(h.stats.closed.values()) == 0
    run(go)


@pytest.mark.parametrize("path", ["/early", "/late-408"])
def test_an_answer_before_the_body_ends_the_connection_after_lingering(path):
    async def go():
        h = Harness()
        p, t = h.connect()
        p.data_received(POST.replace(b"/read", path.encode()) + b"123")
        await settle()
        assert t.written.split(b" ")[1] == (b"408" if path == "/late-408" else b"200")
        assert t.eof and not t.closed           # the FIN went; what still comes is read
        for _ in range(12):                      # body bytes after the answer, for 5.4 s
            p.data_received(b"x")
            h.timers.advance(0.45)
        assert t.closed and h.stats.closed["unread_body"] == 1
    run(go)


def test_at_the_cap_the_connection_idle_longest_is_evicted_never_one_being_answered():
    async def go():
        h = Harness()
        (old, old_t), (busy, busy_t) = h.connect(), h.connect()
        busy.data_received(POST.replace(b"/read", b"/hang") + b"0123456789")
        await settle()
        h.timers.advance(1)
        old.data_received(b"GET /heal")          # old is active now, but still not answered
        new, new_t = h.connect()                 # the cap is 2: old goes, busy stays
        assert old_t.closed and old_t.written.startswith(b"HTTP/1.1 408")
        assert not busy_t.closed and not new_t.closed
        new.data_received(b"GET /read HTTP/1.1\r\nhost: t\r\n\r\n")   # answered, idle
        await settle()
        assert new_t.written.startswith(b"HTTP/1.1 200")
        _, newer_t = h.connect()
        assert new_t.closed and not newer_t.closed and not busy_t.closed
        assert h.stats.closed["evicted"] == 2 and len(h.stats.open) == 2
    run(go)


def test_a_new_connection_is_refused_only_when_every_open_one_is_being_answered():
    async def go():
        h = Harness()
        for p, _ in (h.connect(), h.connect()):
            p.data_received(POST.replace(b"/read", b"/hang") + b"0123456789")
        await settle()
        _, t = h.connect()
        assert t.closed and h.stats.closed["over_cap"] == 1 and h.stats.closed["evicted"] == 0
    run(go)
