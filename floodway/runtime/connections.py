"""Connection limits of `floodway serve`: a header timeout, a cap on open connections and a
keep-alive limit, on uvicorn's h11 protocol.

uvicorn (0.3x-0.5x) closes a keep-alive connection that stays idle `timeout_keep_alive`
seconds after a response, but never one that has not finished sending its first request's
headers: a socket that connects and sends nothing, or trickles a header a byte at a time
(slow loris), is held open for ever, and enough of them exhaust the router's file
descriptors. Here each connection gets a header deadline, armed when it opens and when the
first bytes of a later request arrive (between requests uvicorn's keep-alive timeout
governs), disarmed when a request's headers are complete; past it the
connection is closed (a 408 first when some bytes of a request came, as nginx's
``client_header_timeout`` and Apache's mod_reqtimeout do). A connection that opens while
`max_connections` are open is closed at once, before it costs more than its descriptor.
Closes are counted by reason (`ConnectionStats`, on ``/metrics`` as
``floodway_connections_closed_total{reason}``, with ``floodway_connections_open``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from floodway.errors import FloodwayError

log = logging.getLogger("floodway.server")

# Defaults: nginx's client_header_timeout is 60 s and its keepalive_timeout 75 s; a router
# in front of GPUs wants idle sockets gone sooner. 10 s still lets a slow mobile client
# send its headers; 5 s is uvicorn's own keep-alive default.
HEADER_TIMEOUT_S = 10.0
KEEPALIVE_S = 5.0
MAX_CONNECTIONS = 8192
# Descriptors kept for what is not a client connection: worker pipes, SQLite, logs.
RESERVED_FDS = 256


@dataclass(frozen=True)
class ConnectionLimits:
    """`header_timeout_s`: seconds a connection may take to send a request's headers (from
    when it opened, or its previous response ended); `keepalive_s`: seconds an idle
    keep-alive connection is kept; `max_connections`: open connections at most (beyond:
    closed on arrival)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    keepalive_s: float = KEEPALIVE_S
    max_connections: int = MAX_CONNECTIONS


LIMIT_ENVS = {"header_timeout_s": "FLOODWAY_HEADER_TIMEOUT_S",
              "keepalive_s": "FLOODWAY_KEEPALIVE_S",
              "max_connections": "FLOODWAY_MAX_CONNECTIONS"}


def limits_from_env(environ: dict[str, str] | None = None) -> ConnectionLimits:
    """`ConnectionLimits` with each field overridden by its environment variable
    (`LIMIT_ENVS`) where set; raises FloodwayError naming a variable that is not a positive
    number."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, var in LIMIT_ENVS.items():
        raw = env.get(var)
        if raw is None:
            continue
        try:
            value = int(raw) if name == "max_connections" else float(raw)
        except ValueError:
            value = 0
        if not value > 0:
            raise FloodwayError(f"{var}={raw!r}: a positive number is needed")
        values[name] = value
    return ConnectionLimits(**values)


@dataclass
class ConnectionStats:
    """Open connections now, and closes by reason ("header_timeout", "over_cap")."""

    open: set[Any] = field(default_factory=set)
    closed: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        return {"open": len(self.open), "closed": dict(self.closed)}


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a connection cap (see module)."""

    def __init__(self, *args: Any, limits: ConnectionLimits, stats: ConnectionStats,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits, self.stats = limits, stats
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.stats.open) >= self.limits.max_connections:
            self.stats.closed["over_cap"] += 1
            transport.close()
            return
        self.stats.open.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats.open.discard(self)
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        # Headers complete: the request is the app's now (its body has its own timeout).
        if self.conn.their_state not in (h11.IDLE, h11.MUST_CLOSE, h11.CLOSED):
            self._disarm()

    def data_received(self, data: bytes) -> None:
        # The first bytes of a request on a kept-alive connection (idle until now, under
        # uvicorn's keep-alive timeout): its headers are due within the timeout too.
        if self._header_timer is None and self.conn.their_state == h11.IDLE:
            self._arm()
        super().data_received(data)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                  self._header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state != h11.IDLE:
            return
        self.stats.closed["header_timeout"] += 1
        if self.conn.trailing_data[0]:   # part of a request came: say why it ends
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n"
                                 b"connection: close\r\n\r\n")
        self.transport.close()


def protocol(limits: ConnectionLimits, stats: ConnectionStats) -> Any:
    """The ``http=`` protocol factory for `uvicorn.Config`."""
    return functools.partial(LimitedH11Protocol, limits=limits, stats=stats)


def uvicorn_options(limits: ConnectionLimits, stats: ConnectionStats) -> dict[str, Any]:
    """`uvicorn.Config` keyword arguments for `limits`: the protocol and the keep-alive."""
    return {"http": protocol(limits, stats), "timeout_keep_alive": limits.keepalive_s}


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files toward `wanted` + `RESERVED_FDS` (at
    most the hard limit); returns the soft limit now. A default soft limit of 1024 would
    stop the router far below `max_connections`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted + RESERVED_FDS
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-files limit to %d: %s", target, e)
    return soft


__all__ = ["HEADER_TIMEOUT_S", "KEEPALIVE_S", "LIMIT_ENVS", "MAX_CONNECTIONS",
           "ConnectionLimits", "ConnectionStats", "LimitedH11Protocol", "limits_from_env",
           "protocol", "raise_fd_limit", "uvicorn_options"]
