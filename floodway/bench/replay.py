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
"""

from __future__ import annotations

import asyncio
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
    its end state and `job_done_s` when it finished (NaN: not followed, or never)."""

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


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


Client = aiohttp.ClientSession | httpx.AsyncClient


async def _post(client: Client, path: str, body: dict, headers: dict[str, str]
                ) -> tuple[int, dict[str, str]]:
    """POST and read the whole answer -> (status, headers with lower-case names)."""
    if isinstance(client, httpx.AsyncClient):
        r = await client.post(path, json=body, headers=headers)
        await r.aread()
        return r.status_code, dict(r.headers)
    async with client.post(path, json=body, headers=headers) as a:
        await a.read()
        return a.status, {k.lower(): v for k, v in a.headers.items()}


async def send(client: Client, path: str, body: dict, headers: dict[str, str],
               res: Result, start: float, clock: Clock) -> None:
    """POST `body` to `path` and fill `res` in (status, latency, decision, error); never
    raises for a failed request: no answer is an outcome too."""
    try:
        status, hdrs = await _post(client, path, body, headers)
    except (httpx.HTTPError, aiohttp.ClientError, TimeoutError) as e:
        res.latency_s = clock() - start
        res.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return
    res.latency_s = clock() - start
    res.status = status
    res.decision = hdrs.get("x-floodway-decision", "")
    res.router_s = router_seconds(hdrs.get("server-timing", ""))
    if status == 202:
        res.job = hdrs.get("location", "")


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
                 on_answer: Callable[[Result], None] | None = None) -> list[Result]:
    """Send every request of `plan` to ``POST /v1/<endpoint>`` at its `send_s` (open loop)
    with ``X-Deadline-Ms: deadline_ms`` and `headers`; return one `Result` per request, in
    plan order, once all are answered (or failed: the client's timeout bounds each).
    `on_answer` is called as each one ends (progress)."""
    hdrs = {"X-Deadline-Ms": f"{deadline_ms:g}", **(headers or {})}
    path = f"v1/{endpoint}"     # relative: kept under a base URL's own path
    results = [Result(p.index, p.send_s) for p in plan]
    tasks: list[asyncio.Task] = []
    t0 = clock()

    async def one(p: Planned, res: Result) -> None:
        start = clock()
        res.lag_s = max(0.0, start - t0 - p.send_s)
        await send(client, path, {"inputs": p.inputs}, hdrs, res, start, clock)
        if on_answer is not None:
            on_answer(res)

    for p, res in zip(plan, results, strict=True):
        delay = t0 + p.send_s - clock()
        if delay > 0:
            await sleep(delay)
        tasks.append(asyncio.create_task(one(p, res)))
    await asyncio.gather(*tasks)
    return results


__all__ = ["Client", "Result", "replay", "router_seconds", "send"]
