"""What `Client` and `AsyncClient` share: their settings, checked when made, and the
pieces of a call that do not touch the network (its attempts, its headers, a job's handle
and its wait)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import httpx

from floodway.checks import check_num
from floodway.client.calls import Attempts, Job, base_headers, encode_inputs, url_of
from floodway.client.errors import BadArgument, ClientConfigError
from floodway.client.jobs import JobWait
from floodway.client.retry import PollPolicy, RetryBudget, RetryPolicy
from floodway.errors import Problem

# Per request: connect, each read, each write. Above Modal's 150 s limit on a web request,
# after which Modal answers 303 to a URL that waits for the result (followed, as every
# redirect): a shorter timeout would give up before that redirect could come.
DEFAULT_TIMEOUT_S = 180.0
# How long a call follows a job (a 202) to its result before JobTimeout.
DEFAULT_WAIT_S = 300.0
SSE_ACCEPT = "text/event-stream"
# The defaults (frozen: safe to share).
DEFAULT_RETRY = RetryPolicy()
DEFAULT_POLL = PollPolicy()


class ClientBase:
    """Settings and the network-free half of a call (see `floodway.client.sync.Client`
    for what each one means). Raises ClientConfigError naming each bad setting."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_s: float,
                 retry: RetryPolicy, poll: PollPolicy, clock: Callable[[], float],
                 rng: random.Random | None):
        out: list[Problem] = []
        if not (isinstance(base_url, str) and base_url.startswith(("http://", "https://"))):
            out.append(Problem("base_url", base_url, "an http:// or https:// URL, e.g. "
                               "http://127.0.0.1:8000 or https://<workspace>--<app>-router"
                               ".modal.run"))
        check_num(out, "timeout_s", timeout_s, 0, 86400, lo_open=True)
        if api_key is not None and not (isinstance(api_key, str) and api_key.isprintable()
                                        and api_key.strip() == api_key and api_key):
            out.append(Problem("api_key", "<hidden>", "None or the key as printable text"))
        if not isinstance(retry, RetryPolicy):
            out.append(Problem("retry", retry, "a floodway.client.RetryPolicy"))
        if not isinstance(poll, PollPolicy):
            out.append(Problem("poll", poll, "a floodway.client.PollPolicy"))
        if out:
            raise ClientConfigError(out)
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = httpx.Timeout(timeout_s)
        self.retry, self.poll = retry, poll
        self.clock = clock
        self.rng = rng or random.Random()
        self.budget = RetryBudget.of(retry, clock)

    def _attempts(self, deadline_ms: float | None, key: str | None) -> Attempts:
        if deadline_ms is not None and not (
                isinstance(deadline_ms, int | float) and not isinstance(deadline_ms, bool)
                and math.isfinite(deadline_ms) and 0 < deadline_ms <= 3_600_000):
            raise BadArgument("deadline_ms", deadline_ms,
                              "None (the route's timeout) or milliseconds in (0, 3600000]")
        if key is not None and not (isinstance(key, str) and 0 < len(key) <= 255
                                    and all("\x21" <= c <= "\x7e" for c in key)):
            raise BadArgument("idempotency_key", key,
                              "None (one is made) or 1 to 255 visible ASCII characters")
        return Attempts(self.retry, self.budget, clock=self.clock, rng=self.rng,
                        deadline_ms=deadline_ms, key=key)

    def _post_parts(self, endpoint: str, inputs: list[Any], priority: str | None, *,
                    jobs: bool = False, accept: str | None = None
                    ) -> tuple[str, bytes, dict[str, str]]:
        """(url, body, headers) of a POST to `endpoint` (its ``/jobs`` route with `jobs`)."""
        if not (isinstance(endpoint, str) and endpoint and "/" not in endpoint):
            raise BadArgument("endpoint", endpoint, "an endpoint's name, e.g. 'embed'")
        try:
            body = encode_inputs(inputs)
        except (TypeError, ValueError) as e:
            raise BadArgument("inputs", type(inputs).__name__,
                              f"a list of JSON values ({e})") from None
        headers = base_headers(self.api_key, priority)
        if accept:
            headers["Accept"] = accept
        path = f"/v1/{endpoint}/jobs" if jobs else f"/v1/{endpoint}"
        return url_of(self.base_url, path), body, headers

    def _get_headers(self) -> dict[str, str]:
        headers = base_headers(self.api_key, None)
        del headers["Content-Type"]
        return headers

    def _job_url(self, job: Job | str) -> tuple[Job, str]:
        if isinstance(job, str):
            if not job or "/" in job:
                raise BadArgument("job", job, "a Job, or a job's id")
            job = Job(id=job, location=f"/v1/jobs/{job}", status="queued")
        return job, url_of(self.base_url, job.location)

    def _wait(self, job: Job, wait_s: float) -> JobWait:
        if not (isinstance(wait_s, int | float) and not isinstance(wait_s, bool)
                and 0 <= wait_s < math.inf):
            raise BadArgument("wait_s", wait_s, "seconds >= 0 (0: do not wait for a job)")
        return JobWait(job, wait_s=wait_s, policy=self.poll, clock=self.clock, rng=self.rng)


__all__ = ["DEFAULT_POLL", "DEFAULT_RETRY", "DEFAULT_TIMEOUT_S", "DEFAULT_WAIT_S", "SSE_ACCEPT",
           "ClientBase"]
