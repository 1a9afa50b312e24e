"""Open-loop replay: each planned request is sent at its time whether or not earlier ones
were answered (a slow server cannot slow the client down, so overload shows up as latency
and sheds, not as fewer requests), and each answer is recorded as it comes.

    await replay(client, endpoint, plan, deadline_ms, timeout_s=...) -> list[Result]

`client` is an ``aiohttp.ClientSession`` or an ``httpx.AsyncClient`` whose base URL is the
router. `floodway bench` sends with aiohttp: measured on 2 cores at 240 requests/s of one
30-word text, httpx spent 7.1 ms of the client's CPU per request and aiohttp 0.75 ms (the
router 1.6-2.1 ms), so with httpx the client's own backlog added up to 5 s to what it
timed, and the run measured its client rather than the router. An httpx client takes any
transport (``httpx.ASGITransport`` for an in-process app, in tests); `clock` and `sleep`
are injectable so that tests drive the replay on a fake clock.

A server may close an idle keep-alive connection just as a request goes out on it (the
router closes one idle for `floodway.runtime.connections.KEEPALIVE_S`): the client then
sees the connection closed with no byte of an answer (aiohttp's ServerDisconnectedError,
or a reset). That is the connection's end, not the request's failure: with a session from
`sessions`, which knows which requests went out on a reused connection, such a request
is sent once more on a fresh connection (RFC 9112 9.3.1 lets a client retry there) and
marked `Result.reconnected`; the answer it then gets is its outcome. Its latency counts
from the first send. `sessions` also drops idle connections sooner (`KEEPALIVE_S`) than
the router does, so that this is rare.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
import httpx

from floodway.bench.plan import Planned


@dataclass
class Result:
    """One replayed request. Times in seconds from the replay's start (`clock`).

    `send_s` the planned send time, `lag_s` how late it actually went out, `latency_s`
    send -> answer (headers and body read), `status` the HTTP status (0: no answer, then
    `error` says why), `decision` the router's X-Floodway-Decision header, `router_s` the
    router's own time for it (``Server-Timing: router;dur=<ms>``: arrival at the router to
    its answer; NaN when not sent), so that time spent outside the router (the client's and
    the router's event loops, the connection) is latency_s - router_s. For a 202, `job` is
    its Location (the job's URL) and, once followed (`floodway.bench.jobs`), `job_status`
    its end state and `job_done_s` when it finished (NaN: not followed, or never). An
    answer of status >= 400 puts the router's error message in `error`; `reconnected`: the
    request was sent again on a fresh connection (module docstring)."""

    index: int
    send_s: float
    lag_s: float = 0.0
    status: int = 0
    latency_s: float = math.nan
    decision: str = ""
    error: str = ""
    router_s: float = math.nan
    job: str = ""
    job_status: str = ""
    job_done_s: float = math.nan
    reconnected: bool = False


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


Client = aiohttp.ClientSession | httpx.AsyncClient


# Seconds an idle connection of `sessions` is kept: below the router's 5 s.
KEEPALIVE_S = 2.0
# Characters of an error answer's message kept in `Result.error`.
ERROR_CHARS = 300


async def _reused(session: aiohttp.ClientSession, ctx: object, params: object) -> None:
    """aiohttp's on_connection_reuseconn: mark the request's trace context."""
    marks = getattr(ctx, "trace_request_ctx", None)
    if isinstance(marks, dict):
        marks["reused"] = True


def sessions(base: str, headers: dict[str, str], timeout_s: float
             ) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
    """bench's aiohttp sessions on `base` (module docstring): the load's (no connection
    limit, idle connections kept `KEEPALIVE_S`, the reuse of a connection traced) and the
    one a request closed on a reused connection is sent again through (a new connection
    for each request)."""
    traced = aiohttp.TraceConfig()
    traced.on_connection_reuseconn.append(_reused)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    load = aiohttp.ClientSession(
        base_url=base + "/", headers=headers, timeout=timeout, trace_configs=[traced],
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S))
    fresh = aiohttp.ClientSession(base_url=base + "/", headers=headers, timeout=timeout,
                                  connector=aiohttp.TCPConnector(limit=0, force_close=True))
    return load, fresh


@dataclass
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    reconnected: bool = False


async def _post(client: Client, path: str, body: dict, headers: dict[str, str],
                fresh: aiohttp.ClientSession | None = None) -> _Answer:
    """POST and read the whole answer (headers with lower-case names)."""
    if isinstance(client, httpx.AsyncClient):
        r = await client.post(path, json=body, headers=headers)
        return _Answer(r.status_code, dict(r.headers), await r.aread())
    marks = {"reused": False}
    again = False
    try:
        a = await client.post(path, json=body, headers=headers, trace_request_ctx=marks)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        if not marks["reused"]:
            raise
        again = True            # closed on a reused connection before any answer
        a = await (fresh or client).post(path, json=body, headers=headers)
    async with a:
        data = await a.read()
        return _Answer(a.status, {k.lower(): v for k, v in a.headers.items()}, data, again)


def error_message(body: bytes) -> str:
    """The message of an error answer: floodway's ``{"error": {"message", "field"}}`` (the
    field first when the message does not name it), else the body's first characters."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        msg, field = err["message"], err.get("field")
        if isinstance(field, str) and field and field not in msg:
            msg = f"{field}: {msg}"
    else:
        msg = body.decode("utf-8", "replace").strip()
    msg = " ".join(msg.split())
    return msg if len(msg) <= ERROR_CHARS else msg[:ERROR_CHARS - 3] + "..."


async def send(client: Client, path: str, body: dict, headers: dict[str, str],
               res: Result, start: float, clock: Clock,
               fresh: aiohttp.ClientSession | None = None) -> None:
    """POST `body` to `path` and fill `res` in (status, latency, decision, error); never
    raises for a failed request: no answer is an outcome too. `fresh`: the session a
    request closed on a reused connection is sent again through (module docstring)."""
    try:
        a = await _post(client, path, body, headers, fresh)
    except (httpx.HTTPError, aiohttp.ClientError, TimeoutError) as e:
        res.latency_s = clock() - start
        res.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return
    res.latency_s = clock() - start
    res.status, hdrs, res.reconnected = a.status, a.headers, a.reconnected
    res.decision = hdrs.get("x-floodway-decision", "")
    res.router_s = router_seconds(hdrs.get("server-timing", ""))
    if a.status == 202:
        res.job = hdrs.get("location", "")
    elif a.status >= 400:
        res.error = error_message(a.body)


def router_seconds(server_timing: str) -> float:
    """Seconds of the ``router`` metric of a Server-Timing header (NaN: none there)."""
    for part in server_timing.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() == "router":
            for p in params.split(";"):
                k, _, v = p.strip().partition("=")
                if k == "dur":
                    try:
                        return float(v) / 1000.0
                    except ValueError:
                        return math.nan
    return math.nan


async def replay(client: Client, endpoint: str, plan: Sequence[Planned],
                 deadline_ms: float, *, headers: dict[str, str] | None = None,
                 clock: Clock = time.perf_counter, sleep: Sleep = asyncio.sleep,
                 on_answer: Callable[[Result], None] | None = None,
                 fresh: aiohttp.ClientSession | None = None) -> list[Result]:
    """Send every request of `plan` to ``POST /v1/<endpoint>`` at its `send_s` (open loop)
    with ``X-Deadline-Ms: deadline_ms`` and `headers`; return one `Result` per request, in
    plan order, once all are answered (or failed: the client's timeout bounds each).
    `on_answer` is called as each one ends (progress); `fresh` as `send`'s."""
    hdrs = {"X-Deadline-Ms": f"{deadline_ms:g}", **(headers or {})}
    path = f"v1/{endpoint}"     # relative: kept under a base URL's own path
    results = [Result(p.index, p.send_s) for p in plan]
    tasks: list[asyncio.Task] = []
    t0 = clock()

    async def one(p: Planned, res: Result) -> None:
        start = clock()
        res.lag_s = max(0.0, start - t0 - p.send_s)
        await send(client, path, {"inputs": p.inputs}, hdrs, res, start, clock, fresh)
        if on_answer is not None:
            on_answer(res)

    for p, res in zip(plan, results, strict=True):
        delay = t0 + p.send_s - clock()
        if delay > 0:
            await sleep(delay)
        tasks.append(asyncio.create_task(one(p, res)))
    await asyncio.gather(*tasks)
    return results


__all__ = ["KEEPALIVE_S", "Client", "Result", "error_message", "replay", "router_seconds",
           "send", "sessions"]
