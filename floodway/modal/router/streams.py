"""Streaming endpoints on Modal, the router's side: one ``stream.remote_gen.aio(item)`` per
input, read into the same `StreamPending` as the local pool's, cancelled by call id.

The GPU class of a streaming endpoint has, instead of the batched ``predict``, one generator
method ``stream(item)`` (`floodway.modal.worker.stream`), called once per input; Modal runs
up to ``max_sequences`` of them at once in one container. Its first message is
``{CALL_HEADER: "<function call id>"}``, which the router needs to cancel the call, because
closing ``remote_gen`` does not cancel the input on Modal (modal 1.6.4's
``_Invocation.run_generator`` only stops reading); a failure ends it with
``{ITEM_ERROR: "Type: message"}``, which the router answers as the local router does
(`floodway.routers.batch_item.item_failed`: 422, kind "input_error", the field, for an
``InputError``).

`remote_chunks` reads one input; when its consumer stops early (a client that
disconnected), it closes that generator and cancels the call (``FunctionCall.cancel``):
Modal delivers the cancellation to the container with its next heartbeat, which cancels the
input's task, which closes the function's generator (for a sync generator: after the step
under way, on the thread running it). `stream_pending` stops an input the same way at its
deadlines (`floodway.runtime.pending.StreamPending`): no first chunk within the request's
deadline, or `Generation.max_stream_s` past its first chunk. It also keeps each input in the
endpoint's `modal_book` (`floodway.modal.router.sequences`), which the router's stream
snapshot reads.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from floodway.modal.contract import CALL_HEADER, ITEM_ERROR
from floodway.modal.router.calls import call_failure
from floodway.modal.router.sequences import FIFO, ModalSequence
from floodway.routers.batch_item import item_failed

log = logging.getLogger(__name__)

DEFAULT_MAX_STREAM_S = 600.0

_cancels: set[asyncio.Task] = set()     # cancel RPCs under way (strong references)
_requests = itertools.count(1)          # sequence ids: "<request>:<index>", unique per router


def max_stream_s(ep: Any) -> float:
    """How long one sequence of `ep` may stream: ``generation.max_stream_s`` (600 s, the
    default, without a fw.Generation)."""
    generation = getattr(ep, "generation", None)
    return float(getattr(generation, "max_stream_s", DEFAULT_MAX_STREAM_S))


async def _cancel_call(call_id: str) -> None:
    """Cancel the Modal function call `call_id` (``FunctionCall.cancel``); a failure is
    logged. The RPC runs in a task of its own, so that it is sent even when the stream's
    consumer is cancelled again while waiting for it."""
    import modal

    async def cancel() -> None:
        try:
            await modal.FunctionCall.from_id(call_id).cancel.aio()
        except Exception as e:  # noqa: BLE001 - best effort: the call ends by itself too
            log.warning("cancelling Modal call %s: %s: %s", call_id, type(e).__name__, e)

    task = asyncio.ensure_future(cancel())
    _cancels.add(task)
    task.add_done_callback(_cancels.discard)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        pass        # the task goes on; the stream is closing anyway


async def remote_chunks(endpoint: str, method: Any, item: Any,
                        on_call: Callable[[str], None] | None = None, *,
                        index: int = 0) -> AsyncIterator[Any]:
    """The chunks of input `index` of a request to streaming endpoint `endpoint`, as they
    arrive: ``method.remote_gen.aio(item)`` (`method`: the class's ``stream``) without its
    header.

    Raises EndpointError when the sequence failed in the container, as the local router
    answers a worker's item error (`floodway.routers.batch_item.item_failed`: status 422,
    kind "input_error" and field ``inputs[<index>]...`` for an ``InputError``, else 500 with
    its message), or failed on Modal; Unavailable for a Modal client error (the input may
    succeed on a retry). Closed (or cancelled) before its end, it closes the Modal generator
    and cancels the call. `on_call(call_id)` is told the Modal function call id once known.
    """
    gen = method.remote_gen.aio(item)
    call_id, ended = "", False
    try:
        try:
            async for msg in gen:
                if isinstance(msg, dict) and len(msg) == 1:
                    if CALL_HEADER in msg and not call_id:
                        call_id = str(msg[CALL_HEADER])
                        if on_call is not None:
                            on_call(call_id)
                        continue
                    if ITEM_ERROR in msg:
                        ended = True
                        raise item_failed(endpoint, str(index), str(msg[ITEM_ERROR]))
                yield msg
            ended = True
        except (GeneratorExit, asyncio.CancelledError):
            raise
        except Exception as e:  # noqa: BLE001 - mapped as the batched calls' are
            ended = True
            raise call_failure(endpoint, e) from e
    finally:
        if not ended and call_id:
            await _cancel_call(call_id)
        await _close(gen)


def stream_pending(endpoint: str, method: Any, inputs: list[Any], *, clock: Any,
                   timeout_s: float, max_stream_s: float, book: Any = None,
                   tenant: str = "") -> Any:
    """Start one ``method.remote_gen.aio(item)`` per input now (`remote_chunks`, each in a
    task of its own) -> the request's `floodway.runtime.pending.StreamPending`, the same
    stream interface as the local pool's: events as chunks arrive, or awaited, one combined
    output per input (`floodway.functions.streams.combine`). Its deadlines (first chunk
    within `timeout_s`, the stream within `max_stream_s` of its first chunk) and a client
    that leaves cancel the tasks, which cancels the Modal calls. Never `dispatched` (Modal
    cannot hand calls under way to a job: a hand-off submits the inputs as a new job).

    `book` (the endpoint's `modal_book`, shared by its requests; None: measures nothing)
    keeps each input as a `ModalSequence` of `tenant`: in its queue from now (synchronously,
    so the next decision sees it) until its call header arrives, then running (its chunks
    counted) until its end."""
    from floodway.runtime.pending import StreamPending

    pending = StreamPending(endpoint, len(inputs), clock=clock, timeout_s=timeout_s,
                            max_stream_s=max_stream_s)
    request = next(_requests)
    seqs: list[ModalSequence | None] = [None] * len(inputs)
    if book is not None:
        for i, item in enumerate(inputs):
            seq = seqs[i] = ModalSequence(f"{request}:{i}", book.cost(item), tenant)
            book.queued(seq, FIFO)
            seq.waiting = True

    def unqueue(seq: ModalSequence) -> None:
        if seq.waiting:
            seq.waiting = False
            book.unqueued(seq, FIFO)

    def ended(seq: ModalSequence, task: asyncio.Future) -> None:
        # A done callback, not a `finally`: a task cancelled before its first step never
        # runs its body, and its sequence must still leave the book.
        unqueue(seq)
        book.ended(seq, not task.cancelled() and task.exception() is None)

    async def run(index: int, item: Any, seq: ModalSequence | None) -> None:
        def started(_call_id: str) -> None:
            if seq is not None:
                unqueue(seq)
                book.sent(seq, None, clock.monotonic())

        async for chunk in remote_chunks(endpoint, method, item, on_call=started, index=index):
            if seq is not None:
                seq.chunks += 1
                book.chunk(seq, chunk, clock.monotonic())
            pending.on_chunk(index, chunk)

    tasks = [asyncio.ensure_future(run(i, x, seqs[i])) for i, x in enumerate(inputs)]
    for seq, task in zip(seqs, tasks, strict=True):
        if seq is not None:
            task.add_done_callback(functools.partial(ended, seq))
    pending.attach(tasks, lambda: False)
    return pending


async def _close(gen: Any) -> None:
    """Close the Modal generator (stops reading its data; a failure is only logged)."""
    try:
        await gen.aclose()
    except Exception as e:  # noqa: BLE001 - it is being dropped anyway
        log.debug("closing a Modal generator: %s: %s", type(e).__name__, e)


__all__ = ["DEFAULT_MAX_STREAM_S", "max_stream_s", "remote_chunks", "stream_pending"]
