"""One request's calls to a Modal class: the pending work and each row's result.

    pending = ModalPending(endpoint, calls, timeout_s, started_s, clock, on_answered)
    results = await pending        # one entry per row: output, EndpointError or Unavailable

The router sends one ``predict.remote.aio(row)`` per row (`floodway.modal.router.backend`);
``@modal.batched`` regroups them in the containers. A row that raised in the container comes
back as ``{ITEM_ERROR: "Type: message"}`` (the GPU class answers so rather than failing every
row of its Modal batch), a Modal client error as Unavailable (the row may succeed on a
retry), anything else as EndpointError. A row that failed on its input (the container
names it ``"InputError: ..."``, as the local worker does: it did not decode, or the endpoint
raised a `floodway.errors.RequestError`) is answered as the local router answers it
(`floodway.routers.batch_item.item_failed`): an EndpointError with status 422, kind
"input_error" and the field ``inputs[i]`` (``inputs[i].<field>`` when the message names one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import modal

from floodway.core.clock import Clock, within
from floodway.errors import EndpointError, Unavailable
from floodway.modal.contract import ITEM_ERROR
from floodway.routers.batch_item import item_failed

# Errors of the Modal client itself (not of the endpoint): the row may succeed on a retry.
TRANSIENT = (modal.exception.ConnectionError, modal.exception.ServiceError,
             modal.exception.InternalError, modal.exception.ResourceExhaustedError)


def row_result(endpoint: str, call: asyncio.Future, index: int = 0) -> Any:
    """One finished row's result (`index`: its input's place in the request): its output,
    or the exception that failed it alone (`item_failed` for an item error: 422 when the
    input was to blame)."""
    exc = call.exception()
    if exc is None:
        out = call.result()
        if isinstance(out, dict) and set(out) == {ITEM_ERROR}:
            return item_failed(endpoint, str(index), str(out[ITEM_ERROR]))
        return out
    return call_failure(endpoint, exc)


def call_failure(endpoint: str, exc: BaseException) -> Exception:
    """What a failed Modal call of `endpoint` is answered with: an EndpointError or
    Unavailable as it is, Unavailable for a Modal client error (`TRANSIENT`: the input may
    succeed on a retry), else an EndpointError naming the failure."""
    if isinstance(exc, (EndpointError, Unavailable)):
        return exc
    if isinstance(exc, TRANSIENT):
        return Unavailable(f"Modal did not take the input: {type(exc).__name__}: {exc}",
                           retry_after_s=1.0)
    return EndpointError(f"endpoint {endpoint!r} failed on Modal: {type(exc).__name__}: {exc}")


class ModalPending:
    """The work of one request on Modal (`floodway.core.backend.Pending`): its calls,
    already sent at `started_s` (``clock.monotonic()`` seconds). Await it for one entry per
    row, in order; TimeoutError once `timeout_s` seconds of `clock` have passed, with the
    calls still running cancelled (also when the await is cancelled). `on_answered(rows,
    seconds)` is told the round trip of a request answered in time (the service-time
    fit)."""

    def __init__(self, endpoint: str, calls: list[asyncio.Future], timeout_s: float,
                 started_s: float, clock: Clock,
                 on_answered: Callable[[int, float], None]):
        self.endpoint, self.calls, self.timeout_s = endpoint, calls, timeout_s
        self.started_s, self._clock, self._on_answered = started_s, clock, on_answered

    def __await__(self) -> Generator[Any, None, list[Any]]:
        return self._results().__await__()

    def dispatched(self) -> bool:
        """Always False: Modal cannot hand calls under way to a job, so a hand-off submits
        the inputs as a new job."""
        return False

    def adopt(self) -> Any:
        """Never called (`dispatched` is False). Raises NotImplementedError."""
        raise NotImplementedError("Modal calls under way cannot be adopted by a job")

    async def _results(self) -> list[Any]:
        calls = self.calls
        try:
            if calls:
                await within(self._clock, asyncio.wait(calls), self.timeout_s)
        except TimeoutError:
            for c in calls:             # mark finished failures as seen (no asyncio warning)
                if c.done() and not c.cancelled():
                    c.exception()
            raise TimeoutError(f"endpoint {self.endpoint!r} did not answer within "
                               f"{self.timeout_s:g} s") from None
        finally:
            for c in calls:
                c.cancel()              # no-op for the finished ones
        self._on_answered(len(calls), self._clock.monotonic() - self.started_s)
        return [row_result(self.endpoint, c, i) for i, c in enumerate(calls)]


__all__ = ["TRANSIENT", "ModalPending", "call_failure", "row_result"]
