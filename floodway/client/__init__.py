"""floodway's Python client: `Client` (blocking) and `AsyncClient` (asyncio), over httpx.

    client = floodway.Client("http://127.0.0.1:8000", api_key=None)
    client.call("embed", ["Hello, world!"], deadline_ms=2000)   -> one output per input
    client.submit("embed", texts) -> Job;  client.result(job)  -> its outputs
    with client.stream("generate", [{"prompt": "Hi"}]) as events: ...

Each call sends a deadline and one Idempotency-Key for all its attempts, retries 429/503
after Retry-After (with jitter) and failed connections within a per-client retry budget,
follows a 202 to the job's result, and raises `floodway.client.errors`' typed errors.
It imports httpx, floodway's errors and field checks only: nothing of the server.
"""

from floodway.client.aio import AsyncClient, AsyncStream
from floodway.client.calls import Job
from floodway.client.errors import (
    AuthenticationFailed,
    BadArgument,
    BadResponse,
    ClientConfigError,
    ClientError,
    ConnectionFailed,
    DeadlineExceeded,
    JobExpired,
    JobFailed,
    JobTimeout,
    Overloaded,
    RequestRefused,
    RetryBudgetExhausted,
    ServerError,
)
from floodway.client.retry import PollPolicy, RetryBudget, RetryPolicy
from floodway.client.stream import StreamChunk, StreamError, StreamEvent, StreamOutput
from floodway.client.sync import Client, Stream

__all__ = ["AsyncClient", "AsyncStream", "AuthenticationFailed", "BadArgument", "BadResponse",
           "Client", "ClientConfigError", "ClientError", "ConnectionFailed",
           "DeadlineExceeded", "Job", "JobExpired", "JobFailed", "JobTimeout", "Overloaded",
           "PollPolicy", "RequestRefused", "RetryBudget", "RetryBudgetExhausted",
           "RetryPolicy", "ServerError", "Stream", "StreamChunk", "StreamError",
           "StreamEvent", "StreamOutput"]
