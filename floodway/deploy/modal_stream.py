"""Streaming endpoints on Modal: the GPU class's generator method and the router's side of it.

A streaming endpoint (its function a sync or async generator, ``fn(model, item)`` yielding
chunks) gets, instead of the batched ``predict``, one generator method ``stream(item)`` on its
class (`floodway.deploy.modal_worker`), called once per input with the item in its wire form.
Modal runs up to `max_sequences` of them at once in one container (the class's
``@modal.concurrent(max_inputs=...)``); there is no ``@modal.batched``: the model or engine
the function calls batches the running sequences itself (continuous batching).

What ``stream`` yields (`container_chunks`), in order:

- first ``{CALL_HEADER: "<function call id>"}`` (``modal.current_function_call_id()``): the
  router needs the id to cancel the call, because closing ``remote_gen`` does not cancel the
  input on Modal (modal 1.6.4's ``_Invocation.run_generator`` only stops reading);
- each chunk the function yields, as JSON values (`floodway.runtime.worker._to_jsonable`);
- on failure, one last ``{ITEM_ERROR: "Type: message"}``, named as the local worker names it
  (`floodway.runtime.worker.error_text`: an input that does not decode, or a
  `floodway.errors.RequestError` the endpoint raised, such as the engine refusing a prompt
  too long for its context, is an ``InputError``; a chunk JSON cannot carry a
  ``ContractError``), then the generator ends: a failing sequence never fails the container
  or the other sequences. The router answers an ``InputError`` as the local router does
  (`floodway.routers.batch_item.item_failed`: 422, kind "input_error", the field).

The router consumes one ``stream.remote_gen.aio(item)`` per input (`remote_chunks`); when its
consumer stops early (a client that disconnected), it closes that generator and cancels the
call (``FunctionCall.cancel``): Modal delivers the cancellation to the container with its
next heartbeat, which cancels the input's task, which closes the function's generator (for a
sync generator: after the step under way, on the thread running it). `stream_pending` stops
an input the same way at its deadlines (`floodway.runtime.pending.StreamPending`): no first
chunk within the request's deadline, or `Generation.max_stream_s` past its first chunk. It
also keeps each input in the endpoint's `modal_book` (`floodway.deploy.modal_sequences`),
which the router's stream snapshot reads.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from floodway.deploy.modal_calls import ITEM_ERROR, TRANSIENT
from floodway.deploy.modal_sequences import (
    DEFAULT_MAX_SEQUENCES,
    FIFO,
    ModalSequence,
    max_sequences,
    modal_book,
    modal_stream_snapshot,
)
from floodway.errors import EndpointError, Unavailable
from floodway.routers.batch_item import item_failed

log = logging.getLogger(__name__)

STREAM_METHOD = "stream"
# The first message of every stream: {CALL_HEADER: function call id}.
CALL_HEADER = "__floodway_call__"
DEFAULT_MAX_STREAM_S = 600.0

_cancels: set[asyncio.Task] = set()     # cancel RPCs under way (strong references)
_requests = itertools.count(1)          # sequence ids: "<request>:<index>", unique per router


def is_streaming(ep: Any) -> bool:
    """Whether `ep` is a streaming endpoint: ``Endpoint.streaming`` where it exists, else
    whether its function is a (sync or async) generator function."""
    flag = getattr(type(ep), "streaming", None)
    if flag is not None:
        return bool(ep.streaming)
    return inspect.isgeneratorfunction(ep.fn) or inspect.isasyncgenfunction(ep.fn)


def max_stream_s(ep: Any) -> float:
    """How long one sequence of `ep` may stream: ``generation.max_stream_s`` (600 s, the
    default, without a fw.Generation)."""
    generation = getattr(ep, "generation", None)
    return float(getattr(generation, "max_stream_s", DEFAULT_MAX_STREAM_S))


# ------------------------------------------------------------ the container's side


async def _sync_chunks(gen: Iterator[Any]) -> AsyncIterator[Any]:
    """The items of sync generator `gen`, each step run on a thread (so the container's
    event loop, and the other sequences on it, go on meanwhile). Closing this closes `gen`
    on a thread too, once the step under way (if any) has returned: a generator cannot be
    closed while it runs."""
    loop = asyncio.get_running_loop()
    done = object()
    step: asyncio.Future | None = None
    try:
        while True:
            step = loop.run_in_executor(None, next, gen, done)
            item = await step
            step = None
            if item is done:
                return
            yield item
    finally:
        if step is not None and not step.done():
            step.add_done_callback(lambda _: loop.run_in_executor(None, gen.close))
        else:
            await loop.run_in_executor(None, gen.close)


def _chunks_of(fn: Callable[..., Any], model: Any, item: Any) -> AsyncIterator[Any]:
    """The chunks ``fn(model, item)`` yields, as an async iterator. Raises ContractError
    (floodway.runtime.worker) when `fn` does not return a generator."""
    from floodway.runtime.worker import ContractError

    out = fn(model, item)
    if inspect.isasyncgen(out):
        return out
    if inspect.isgenerator(out):
        return _sync_chunks(out)
    raise ContractError(f"a streaming endpoint must yield its chunks (a generator); it "
                        f"returned a {type(out).__name__}")


def _decode(fn: Callable[..., Any], item: Any) -> Any:
    """The item as `fn` receives it (`floodway.functions.items.item_decoder`)."""
    from floodway.functions.items import item_decoder

    decode = item_decoder(fn)
    return item if decode is None else decode(item)


async def container_chunks(fn: Callable[..., Any], model: Any, item: Any) -> AsyncIterator[Any]:
    """What the class's ``stream`` method yields for one input (see the module doc): the
    call header, the chunks as JSON values, and on failure one ``{ITEM_ERROR: ...}``."""
    import modal

    from floodway.runtime.worker import _fatal, _to_jsonable, error_text

    yield {CALL_HEADER: modal.current_function_call_id() or ""}
    try:
        value = _decode(fn, item)
    except Exception as e:  # noqa: BLE001 - the input was bad, not the function
        why = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
        yield {ITEM_ERROR: f"InputError: {why}"}
        return
    failed: str | None = None
    chunks: AsyncIterator[Any] | None = None
    try:
        chunks = _chunks_of(fn, model, value)
        async for chunk in chunks:
            out = _to_jsonable(chunk)
            yield out
    except BaseException as e:  # noqa: BLE001 - a failing sequence fails only itself
        if _fatal(e) or isinstance(e, asyncio.CancelledError):
            raise
        failed = error_text(e)
    finally:
        if chunks is not None:
            await chunks.aclose()   # type: ignore[attr-defined]
    if failed is not None:
        yield {ITEM_ERROR: failed}


# ------------------------------------------------------------ the router's side


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


def _failure(endpoint: str, exc: BaseException) -> Exception:
    if isinstance(exc, (EndpointError, Unavailable)):
        return exc
    if isinstance(exc, TRANSIENT):
        return Unavailable(f"Modal did not take the input: {type(exc).__name__}: {exc}",
                           retry_after_s=1.0)
    return EndpointError(f"endpoint {endpoint!r} failed on Modal: {type(exc).__name__}: {exc}")


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
            raise _failure(endpoint, e) from e
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


__all__ = ["CALL_HEADER", "DEFAULT_MAX_SEQUENCES", "STREAM_METHOD", "container_chunks",
           "is_streaming", "max_sequences", "max_stream_s", "modal_book", "modal_stream_snapshot",
           "remote_chunks", "stream_pending"]
