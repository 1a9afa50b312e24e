"""Fake time for the client's tests: a clock that moves only when the client sleeps, and
the sleeps it asked for. Nothing here waits on real time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx


class FakeTime:
    """`monotonic()` starts at 0 and moves by each `sleep(s)` (recorded in `sleeps`)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


def error(status: int, kind: str, message: str, field: str | None = None,
          headers: dict[str, str] | None = None, **extra: Any) -> httpx.Response:
    """An error answer as the router gives it (`floodway.http.errors`)."""
    detail = {"type": kind, "message": message} | ({"field": field} if field else {})
    return httpx.Response(status, json={"error": detail, **extra}, headers=headers)


def sse(*events: Any, done: bool = True) -> bytes:
    """An SSE body of `events` (JSON), closed by [DONE] unless `done` is False."""
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def mock_http(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))
