"""Connection limits of `floodway serve`, on uvicorn's h11 protocol: every phase of a
connection has a deadline, and the connection cap keeps room for new clients.

uvicorn (0.3x-0.5x) closes a keep-alive connection that stays idle `timeout_keep_alive`
seconds after a response, and nothing else: a socket that sends nothing or trickles its
headers (slow loris), a request whose announced body never comes, a body byte sent after
the answer (it cancels the keep-alive timer for good) each hold a connection for ever, and
enough of them fill the cap. Here each phase has its deadline (`ConnectionLimits`):

- headers: `header_timeout_s` from when the connection opens, or from the first byte of a
  later request (between requests uvicorn's keep-alive timeout governs);
- body: `body_timeout_s` from when the headers are complete to the body's last byte;
- after the answer: an answer sent before the request's body was complete (a 408 or 413
  from the app, a 404 that never read the body) ends the connection: the router sends its
  FIN at once and reads and discards what still comes (closing with unread data would
  reset the connection and could destroy the answer) until the client closes, or
  `linger_s` after the answer, as nginx's lingering close does.

A connection past a header or body deadline is closed, with a 408 first when part of a
request came and no answer started (as nginx and Apache's mod_reqtimeout answer).

At the cap (`max_connections` open), the connection idle longest (its last byte received,
or its last answer sent, the longest ago) is closed to make room
(evicted): one that sent nothing, is stalled in its headers or body, idles between
requests or lingers after its answer; a connection whose request the app is answering is
never evicted, and only when every open connection is such one is the new one closed on
arrival. Eviction rather than slots kept for health checks: it keeps room for every client,
`/healthz` and ordinary requests alike, it needs no request line read before deciding, and
what it closes had nothing in progress; an attacker holding the cap only makes its own
oldest sockets go first. Closes are counted by reason (`ConnectionStats`, on ``/metrics``
as ``floodway_connections_closed_total{reason}``, with ``floodway_connections_open``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import resource
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from floodway.errors import FloodwayError

log = logging.getLogger("floodway.server")

# Defaults: nginx's client_header_timeout is 60 s and its keepalive_timeout 75 s; a router
# in front of GPUs wants idle sockets gone sooner. 10 s still lets a slow mobile client
# send its headers; 5 s is uvicorn's own keep-alive default. The body deadline is above
# the app's own (floodway.http.admit.BODY_TIMEOUT_S, 30 s), whose 408 names the endpoint:
# this one is the backstop for what the app does not read. 5 s of lingering is nginx's
# lingering_timeout.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
LINGER_S = 5.0
KEEPALIVE_S = 5.0
MAX_CONNECTIONS = 8192
# Descriptors kept for what is not a client connection: worker pipes, SQLite, logs.
RESERVED_FDS = 256
# Why the router closed a connection (`ConnectionStats.closed`).
CLOSE_REASONS = ("header_timeout", "body_timeout", "unread_body", "evicted", "over_cap")
REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n"
                   b"connection: close\r\n\r\n")


@dataclass(frozen=True)
class ConnectionLimits:
    """`header_timeout_s`: seconds a connection may take to send a request's headers (from
    when it opened, or from the first byte of a later request); `body_timeout_s`: seconds
    from the headers to the body's last byte; `linger_s`: seconds a connection answered
    before its body was complete is read (and discarded) before it is closed;
    `keepalive_s`: seconds an idle keep-alive connection is kept; `max_connections`: open
    connections at most (beyond: the one idle longest is evicted, see the module)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    linger_s: float = LINGER_S
    keepalive_s: float = KEEPALIVE_S
    max_connections: int = MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name in LIMIT_ENVS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise FloodwayError(f"ConnectionLimits.{name}={value!r}: a positive number "
                                    "is needed")


LIMIT_ENVS = {"header_timeout_s": "FLOODWAY_HEADER_TIMEOUT_S",
              "body_timeout_s": "FLOODWAY_BODY_TIMEOUT_S",
              "linger_s": "FLOODWAY_LINGER_S",
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
    """Open connections now, least recently active first, and closes by reason
    (`CLOSE_REASONS`)."""

    open: OrderedDict[Any, None] = field(default_factory=OrderedDict)
    closed: Counter[str] = field(default_factory=Counter)

    def touch(self, conn: Any) -> None:
        """`conn` was active now (a byte came, an answer went): the last to be evicted."""
        if conn in self.open:
            self.open.move_to_end(conn)

    def snapshot(self) -> dict[str, Any]:
        return {"open": len(self.open), "closed": {r: self.closed[r] for r in CLOSE_REASONS}}


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on every phase of a connection and a
    connection cap that evicts the connection idle longest (see the module)."""

    def __init__(self, *args: Any, limits: ConnectionLimits, stats: ConnectionStats,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits, self.stats = limits, stats
        self._timer: asyncio.TimerHandle | None = None
        self._phase: str | None = None   # the deadline armed: "header", "body", "linger"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.stats.open) >= self.limits.max_connections and not self._evict():
            self.stats.closed["over_cap"] += 1
            transport.close()
            return
        self.stats.open[self] = None
        self._arm("header")

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats.open.pop(self, None)
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == "linger":
            return      # answered: what still comes is read only to be discarded
        self.stats.touch(self)
        # The first bytes of a request on a kept-alive connection (idle until now, under
        # uvicorn's keep-alive timeout): its headers are due within the timeout too.
        if self._phase is None and self.conn.their_state is h11.IDLE:
            self._arm("header")
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self._phase == "linger" or self.transport.is_closing():
            return
        their = self.conn.their_state
        if their is h11.SEND_BODY and not self._answered():
            if self._phase != "body":    # headers complete: the body is due
                self._arm("body")
        elif their is not h11.IDLE and self._phase is not None:
            self._disarm()               # the whole request came: the app's now

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        self.stats.touch(self)
        if self.conn.their_state is h11.SEND_BODY:
            # Answered before the body was complete: the connection cannot serve another
            # request before that body's end, which may never come.
            self.stats.closed["unread_body"] += 1
            self._unset_keepalive_if_required()
            self._arm("linger")
            if self.transport.can_write_eof():
                self.transport.write_eof()

    def _answered(self) -> bool:
        return self.cycle is not None and self.cycle.response_complete

    def _working(self) -> bool:
        """The app is answering a request that came whole: never evicted."""
        return (self._phase != "linger" and self.cycle is not None
                and not self.cycle.response_complete
                and self.conn.their_state in (h11.DONE, h11.MUST_CLOSE))

    def _evict(self) -> bool:
        """Close the open connection idle longest that is not `_working`; False when every
        one is. One skipped goes to the back (it is touched again once answered), so each
        is looked at once per request."""
        for _ in range(len(self.stats.open)):
            victim = next(iter(self.stats.open))
            if victim._working():
                self.stats.open.move_to_end(victim)
                continue
            del self.stats.open[victim]
            self.stats.closed["evicted"] += 1
            victim._end()
            return True
        return False

    def _arm(self, phase: str) -> None:
        self._disarm()
        seconds = {"header": self.limits.header_timeout_s, "body": self.limits.body_timeout_s,
                   "linger": self.limits.linger_s}[phase]
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expire, phase)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _expire(self, phase: str) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if phase != "linger":
            self.stats.closed[f"{phase}_timeout"] += 1
        self._end()

    def _end(self) -> None:
        """Close now: with a 408 first when part of a request came and no answer started."""
        self._disarm()
        their = self.conn.their_state
        started = self.cycle is not None and self.cycle.response_started
        if not self.transport.is_closing() and (
                (their is h11.IDLE and self.conn.trailing_data[0])
                or (their is h11.SEND_BODY and not started)):
            self.transport.write(REQUEST_TIMEOUT)
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


__all__ = ["BODY_TIMEOUT_S", "CLOSE_REASONS", "HEADER_TIMEOUT_S", "KEEPALIVE_S", "LIMIT_ENVS",
           "LINGER_S", "MAX_CONNECTIONS",
           "ConnectionLimits", "ConnectionStats", "LimitedH11Protocol", "limits_from_env",
           "protocol", "raise_fd_limit", "uvicorn_options"]
