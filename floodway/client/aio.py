"""`floodway.AsyncClient`: `floodway.Client` for asyncio (httpx.AsyncClient), the same
calls awaited; `stream` gives an async iterator."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from floodway.client.base import (
    DEFAULT_POLL,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WAIT_S,
    SSE_ACCEPT,
    ClientBase,
)
from floodway.client.calls import RETRIED_ERRORS, Attempts, Job, read_answer, read_json
from floodway.client.errors import BadResponse, ConnectionFailed, error_from_answer
from floodway.client.retry import PollPolicy, RetryPolicy
from floodway.client.stream import EventReader, StreamEvent, StreamOutput


class AsyncClient(ClientBase):
    """`floodway.Client` for asyncio: the same settings, calls, retries, retry budget (one
    per client, shared by its concurrent calls) and errors, each call awaited. `http`: an
    httpx.AsyncClient of your own (e.g. with ``httpx.ASGITransport`` to call a router app
    in process); `sleep`: an async sleep (for tests). Close it with ``await aclose()``, or
    use it as an async context manager."""

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy = DEFAULT_RETRY,
                 poll: PollPolicy = DEFAULT_POLL, http: httpx.AsyncClient | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: random.Random | None = None):
        super().__init__(base_url, api_key=api_key, timeout_s=timeout_s, retry=retry,
                         poll=poll, clock=clock, rng=rng)
        self._own = http is None
        self._http = http if http is not None else httpx.AsyncClient(follow_redirects=True)
        self._sleep = sleep

    # ------------------------------------------------------------------ calls
    async def call(self, endpoint: str, inputs: list[Any], *,
                   deadline_ms: float | None = None, priority: str | None = None,
                   wait_s: float = DEFAULT_WAIT_S,
                   idempotency_key: str | None = None) -> list[Any]:
        """As `floodway.Client.call`."""
        url, body, headers = self._post_parts(endpoint, inputs, priority)
        attempts = self._attempts(deadline_ms, idempotency_key)
        got = _answer(await self._send("POST", url, body, headers, attempts))
        return got if isinstance(got, list) else await self.result(got, wait_s=wait_s)

    async def submit(self, endpoint: str, inputs: list[Any], *, priority: str | None = None,
                     idempotency_key: str | None = None) -> Job:
        """As `floodway.Client.submit`."""
        url, body, headers = self._post_parts(endpoint, inputs, priority, jobs=True)
        got = _answer(await self._send("POST", url, body, headers,
                                       self._attempts(None, idempotency_key)))
        if isinstance(got, list):
            raise BadResponse("the router answered a job submission with outputs", status=200)
        return got

    async def result(self, job: Job | str, *, wait_s: float = DEFAULT_WAIT_S) -> list[Any]:
        """As `floodway.Client.result`."""
        job, url = self._job_url(job)
        wait = self._wait(job, wait_s)
        got = wait.first()
        while got is None:
            await self._sleep(wait.next_wait())
            try:
                r = await self._http.get(url, headers=self._get_headers(), timeout=self.timeout)
            except httpx.TransportError as e:
                wait.failed(e)
                continue
            got = wait.read(r.status_code, r.headers, r.content)
        return got

    async def get_job(self, job: Job | str) -> Job:
        """As `floodway.Client.get_job`."""
        job, url = self._job_url(job)
        try:
            r = await self._http.get(url, headers=self._get_headers(), timeout=self.timeout)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise error_from_answer(r.status_code, r.content)
        return Job.of(read_json(r.status_code, r.content), job.location)

    async def stream(self, endpoint: str, inputs: list[Any], *,
                     deadline_ms: float | None = None, priority: str | None = None,
                     wait_s: float = DEFAULT_WAIT_S,
                     idempotency_key: str | None = None) -> AsyncStream:
        """As `floodway.Client.stream`, an async iterator: ``async with await
        client.stream(...) as events: async for ev in events: ...``; ``aclose()`` closes
        the connection, which cancels the inputs still running on the router."""
        url, body, headers = self._post_parts(endpoint, inputs, priority, accept=SSE_ACCEPT)
        r = await self._send("POST", url, body, headers,
                             self._attempts(deadline_ms, idempotency_key), stream=True)
        if r.status_code == 200 and r.headers.get("content-type", "").startswith(SSE_ACCEPT):
            return AsyncStream(sse_events(r), r)
        await r.aread()
        await r.aclose()
        got = _answer(r)
        if isinstance(got, list):
            return AsyncStream(_outputs(got), None)
        return AsyncStream(self._followed(got, wait_s), None)

    # ------------------------------------------------------------------ plumbing
    async def _followed(self, job: Job, wait_s: float) -> AsyncIterator[StreamEvent]:
        async for ev in _outputs(await self.result(job, wait_s=wait_s)):
            yield ev

    async def _send(self, method: str, url: str, body: bytes, headers: dict[str, str],
                    attempts: Attempts, *, stream: bool = False) -> httpx.Response:
        """As `floodway.client.sync.Client._send`, awaited."""
        while True:
            request = self._http.build_request(method, url, content=body, timeout=self.timeout,
                                               headers={**headers, **attempts.headers()})
            try:
                r = await self._http.send(request, stream=stream)
            except RETRIED_ERRORS as e:
                delay = attempts.after_failure(e)
            except httpx.TransportError as e:
                raise attempts.failed(e) from e
            else:
                if r.status_code not in self.retry.retry_statuses:
                    return r
                content = await r.aread()
                await r.aclose()
                delay = attempts.after_answer(r.status_code, r.headers, content)
            await self._sleep(delay)

    async def aclose(self) -> None:
        """Close the connections (of the httpx client this client made)."""
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncStream:
    """The events of one streamed request, an async iterator; `aclose()` (or leaving an
    ``async with`` block) closes the connection, which cancels what still runs on the
    router."""

    def __init__(self, events: AsyncIterator[StreamEvent], response: httpx.Response | None):
        self._events, self.response = events, response

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> StreamEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        close = getattr(self._events, "aclose", None)
        if close is not None:
            await close()
        if self.response is not None:
            await self.response.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _answer(r: httpx.Response) -> list[Any] | Job:
    return read_answer(r.status_code, r.headers, r.content)


async def _outputs(outputs: list[Any]) -> AsyncIterator[StreamEvent]:
    for i, output in enumerate(outputs):
        yield StreamOutput(i, output)


async def sse_events(r: httpx.Response) -> AsyncIterator[StreamEvent]:
    """As `floodway.client.sync.sse_events`, for an async answer."""
    reader = EventReader()
    try:
        async for line in r.aiter_lines():
            event = reader.feed(line)
            if event is not None:
                yield event
            if reader.done:
                return
        raise ConnectionFailed("the stream ended before its end ([DONE])")
    except httpx.TransportError as e:
        raise ConnectionFailed(f"the stream broke: {type(e).__name__}: {e}") from e
    finally:
        await r.aclose()


__all__ = ["AsyncClient", "AsyncStream", "sse_events"]
