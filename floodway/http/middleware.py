"""Per-request observation of the API routes, as pure ASGI middleware.

`Observe` wraps each API route (``POST /v1/<endpoint>``, its ``/jobs``, ``GET
/v1/jobs/<id>``): it counts the answer in the metrics by endpoint and outcome, adds the W3C
``Server-Timing: router;dur=<ms>`` header (arrival at the router to its answer: queueing and
the model included, the network and the client not), and the headers a handler noted for
every answer of the request, error answers included (`Notes.headers`). It is plain ASGI, not
Starlette's BaseHTTPMiddleware, so that the handler still sees the client's disconnect and a
streamed body is passed on as it comes.

Outcomes: "ok" (2xx), "accepted" (202), else the error type of the answer (`Notes`, set by
`floodway.http.errors`), else the status code.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floodway.core.clock import Clock
from floodway.http.metrics import Metrics

NOTES_KEY = "floodway.notes"
JOBS_LABEL = "(jobs)"          # GET /v1/jobs/<id>: no endpoint in the path
UNKNOWN_LABEL = "(unknown)"    # a client must not be able to grow the label set


@dataclass
class Notes:
    """What the handling of one request tells `Observe` about its answer: the error type
    (the metrics' outcome) and headers every answer carries (e.g. X-Floodway-Decision)."""

    error_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # The endpoint, where the path does not name it (the OpenAI routes: the body's "model").
    endpoint: str | None = None
    # When `Observe` first saw the request (its clock's monotonic seconds): its deadline
    # runs from here (`floodway.http.admit.Admitted.arrival_s`).
    arrival_s: float | None = None


def notes(scope: Scope) -> Notes:
    """The request's `Notes`, kept in its ASGI scope (made on first use)."""
    found = scope.get(NOTES_KEY)
    if found is None:
        found = scope[NOTES_KEY] = Notes()
    return found


def outcome(status: int, error_type: str | None) -> str:
    if status == 202:
        return "accepted"
    if status < 300:
        return "ok"
    return error_type or str(status)


class Observe:
    """Pure ASGI middleware for one route (`starlette.routing.Route(middleware=...)`, so
    that it runs inside routing: the path parameters are known). `endpoints`: the names
    that get their own label; `clock`: durations; `pathless`: the label of a route whose
    path names no endpoint, until its handler notes one (`Notes.endpoint`)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, endpoints: Collection[str],
                 clock: Clock, pathless: str = JOBS_LABEL):
        self.app, self.metrics, self.endpoints, self.clock = app, metrics, endpoints, clock
        self.pathless = pathless

    def _label(self, scope: Scope) -> str:
        name = scope.get("path_params", {}).get("endpoint", self.pathless)
        return name if name == self.pathless or name in self.endpoints else UNKNOWN_LABEL

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0_s, label, note = self.clock.monotonic(), self._label(scope), notes(scope)
        note.arrival_s = t0_s
        started = False

        async def observed(message: Message) -> None:
            nonlocal started, label
            if message["type"] == "http.response.start":
                started = True
                took_s = self.clock.monotonic() - t0_s
                if note.endpoint is not None and note.endpoint in self.endpoints:
                    label = note.endpoint
                headers = MutableHeaders(scope=message)
                for name, value in note.headers.items():
                    headers[name] = value
                headers["Server-Timing"] = f"router;dur={took_s * 1000:.1f}"
                self.metrics.observe(label, outcome(message["status"], note.error_type),
                                     took_s)
            await send(message)

        try:
            await self.app(scope, receive, observed)
        except Exception:
            if not started:   # an unexpected error: answered 500 further out
                self.metrics.observe(label, "500", self.clock.monotonic() - t0_s)
            raise


__all__ = ["JOBS_LABEL", "NOTES_KEY", "UNKNOWN_LABEL", "Notes", "Observe", "notes", "outcome"]
