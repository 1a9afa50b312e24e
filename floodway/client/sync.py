"""`floodway.Client`: the blocking client (httpx). `floodway.client.aio.AsyncClient` is the
same client for asyncio."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
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
from floodway.client.stream import EventReader, StreamEvent, outputs_as_events


class Client(ClientBase):
    """A floodway router's client: `base_url` (``http://127.0.0.1:8000``, or the Modal
    router's ``https://<workspace>--<app>-router.modal.run``), `api_key` (the bearer key;
    None where the router needs none).

    Every call sends a deadline (``X-Deadline-Ms``, what is left of `deadline_ms` at each
    attempt) and one ``Idempotency-Key`` made once per call and sent again on each retry,
    so a retry never runs the work twice where the router can tell (a job, or a request
    handed to one). 429 and 503 answers are retried after their ``Retry-After`` (plus up to
    `RetryPolicy.jitter_ratio` more, never less), a connection refused or dropped before
    the answer after a backoff, as `retry` allows and within this client's retry budget
    (`floodway.client.retry.RetryBudget`: retries add at most a fifth to the calls plus a
    small floor per second, shared by every call of this client). A ``202`` is followed to
    the job's result (polled as `poll` says, for up to the call's `wait_s`).

    `timeout_s`: per request (connect, each read, each write). `http`: an httpx.Client of
    your own (its transport, proxies, limits; it is not closed by `close()`); by default
    one that follows redirects (Modal answers a request running past 150 s with a 303 to
    its result). `clock`, `sleep`, `rng`: monotonic seconds, the sleep and the jitter's
    random source (for tests). Raises ClientConfigError naming each bad setting.
    Thread-safe; `close()` it, or use it as a context manager."""

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy = DEFAULT_RETRY,
                 poll: PollPolicy = DEFAULT_POLL, http: httpx.Client | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None):
        super().__init__(base_url, api_key=api_key, timeout_s=timeout_s, retry=retry,
                         poll=poll, clock=clock, rng=rng)
        self._own = http is None
        self._http = http if http is not None else httpx.Client(follow_redirects=True)
        self._sleep = sleep

    # ------------------------------------------------------------------ calls
    def call(self, endpoint: str, inputs: list[Any], *, deadline_ms: float | None = None,
             priority: str | None = None, wait_s: float = DEFAULT_WAIT_S,
             idempotency_key: str | None = None) -> list[Any]:
        """``POST /v1/<endpoint>`` -> one output per input, in order (a streaming
        endpoint's: each input's chunks combined). `deadline_ms`: the call's deadline from
        now (None: the route's `timeout_s`); `priority`: high, normal or low; `wait_s`: how
        long to follow a job (202) to its result. Raises RequestRefused (4xx, naming the
        field), Overloaded, RetryBudgetExhausted, ConnectionFailed, ServerError,
        DeadlineExceeded, JobFailed, JobTimeout (`floodway.client.errors`)."""
        url, body, headers = self._post_parts(endpoint, inputs, priority)
        attempts = self._attempts(deadline_ms, idempotency_key)
        got = self._answer(self._send("POST", url, body, headers, attempts))
        return got if isinstance(got, list) else self.result(got, wait_s=wait_s)

    def submit(self, endpoint: str, inputs: list[Any], *, priority: str | None = None,
               idempotency_key: str | None = None) -> Job:
        """``POST /v1/<endpoint>/jobs`` -> the job (stored before the router answers).
        Retried as `call` is, under one Idempotency-Key: a retry after a lost answer gets
        the same job, never a second one. `Client.result(job)` waits for its outputs."""
        url, body, headers = self._post_parts(endpoint, inputs, priority, jobs=True)
        got = self._answer(self._send("POST", url, body, headers,
                                      self._attempts(None, idempotency_key)))
        if isinstance(got, list):
            raise BadResponse("the router answered a job submission with outputs", status=200)
        return got

    def result(self, job: Job | str, *, wait_s: float = DEFAULT_WAIT_S) -> list[Any]:
        """The outputs of `job` (a Job, or its id), polling ``GET /v1/jobs/<id>`` for up
        to `wait_s` seconds. Raises JobFailed, JobExpired (410), JobTimeout (the job still
        runs), RequestRefused (404: unknown, or another tenant's)."""
        job, url = self._job_url(job)
        wait = self._wait(job, wait_s)
        got = wait.first()
        while got is None:
            self._sleep(wait.next_wait())
            try:
                r = self._http.get(url, headers=self._get_headers(), timeout=self.timeout)
            except httpx.TransportError as e:
                wait.failed(e)
                continue
            got = wait.read(r.status_code, r.headers, r.content)
        return got

    def get_job(self, job: Job | str) -> Job:
        """One ``GET /v1/jobs/<id>``: the job as it is now (`Job.wire` its wire form).
        Raises JobExpired (410), RequestRefused (404), ConnectionFailed."""
        job, url = self._job_url(job)
        try:
            r = self._http.get(url, headers=self._get_headers(), timeout=self.timeout)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise error_from_answer(r.status_code, r.content)
        return Job.of(read_json(r.status_code, r.content), job.location)

    def stream(self, endpoint: str, inputs: list[Any], *, deadline_ms: float | None = None,
               priority: str | None = None, wait_s: float = DEFAULT_WAIT_S,
               idempotency_key: str | None = None) -> Stream:
        """A streaming endpoint's events (`floodway.client.stream`: StreamChunk,
        StreamOutput, StreamError), as they come (SSE). Opening it is retried as `call`
        is; a stream that broke after its first event is not (ConnectionFailed). Closing
        it (``close()``, leaving a ``with`` block) closes the connection, which cancels
        the inputs still running on the router. When the router answers with a job (202)
        or a buffered answer instead, it yields one StreamOutput per input. Raises as
        `call` does, when opened and while iterated."""
        url, body, headers = self._post_parts(endpoint, inputs, priority, accept=SSE_ACCEPT)
        r = self._send("POST", url, body, headers, self._attempts(deadline_ms,
                                                                  idempotency_key),
                       stream=True)
        if r.status_code == 200 and r.headers.get("content-type", "").startswith(SSE_ACCEPT):
            return Stream(sse_events(r), r)
        r.read()
        r.close()
        got = self._answer(r)
        if isinstance(got, list):
            return Stream(outputs_as_events(got), None)
        return Stream(self._followed(got, wait_s), None)

    # ------------------------------------------------------------------ plumbing
    def _followed(self, job: Job, wait_s: float) -> Iterator[StreamEvent]:
        yield from outputs_as_events(self.result(job, wait_s=wait_s))

    def _answer(self, r: httpx.Response) -> list[Any] | Job:
        return read_answer(r.status_code, r.headers, r.content)

    def _send(self, method: str, url: str, body: bytes, headers: dict[str, str],
              attempts: Attempts, *, stream: bool = False) -> httpx.Response:
        """Send until an answer that is not retried: retries 429/503 after their
        Retry-After and failed connections after a backoff, as `attempts` allows (it raises
        when no retry is left)."""
        while True:
            request = self._http.build_request(method, url, content=body, timeout=self.timeout,
                                               headers={**headers, **attempts.headers()})
            try:
                r = self._http.send(request, stream=stream)
            except RETRIED_ERRORS as e:
                delay = attempts.after_failure(e)
            except httpx.TransportError as e:
                raise attempts.failed(e) from e
            else:
                if r.status_code not in self.retry.retry_statuses:
                    return r
                content = r.read()
                r.close()
                delay = attempts.after_answer(r.status_code, r.headers, content)
            self._sleep(delay)

    def close(self) -> None:
        """Close the connections (of the httpx client this client made)."""
        if self._own:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Stream:
    """The events of one streamed request, an iterator; `close()` (or leaving a ``with``
    block) closes the connection, which cancels what still runs on the router."""

    def __init__(self, events: Iterator[StreamEvent], response: httpx.Response | None):
        self._events, self.response = events, response

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()
        if self.response is not None:
            self.response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sse_events(r: httpx.Response) -> Iterator[StreamEvent]:
    """The events of an SSE answer, until ``[DONE]``; the answer closed however it ends.
    Raises ConnectionFailed when the connection breaks or ends before ``[DONE]``."""
    reader = EventReader()
    try:
        for line in r.iter_lines():
            event = reader.feed(line)
            if event is not None:
                yield event
            if reader.done:
                return
        raise ConnectionFailed("the stream ended before its end ([DONE])")
    except httpx.TransportError as e:
        raise ConnectionFailed(f"the stream broke: {type(e).__name__}: {e}") from e
    finally:
        r.close()


__all__ = ["Client", "Stream", "sse_events"]
