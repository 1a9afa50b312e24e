"""Streaming endpoints on Modal, the container's side: what the GPU class's generator method
``stream(item)`` yields for one input (`container_chunks`), in order:

- first ``{CALL_HEADER: "<function call id>"}`` (``modal.current_function_call_id()``): the
  router cancels the call by this id (`floodway.modal.router.streams`);
- each chunk the function yields, as JSON values (as the local worker sends them);
- on failure, one last ``{ITEM_ERROR: "Type: message"}``, named as the local worker names it
  (`floodway.runtime.worker.error_text`: an input that does not decode, or a
  `floodway.errors.RequestError` the endpoint raised, such as the engine refusing a prompt
  too long for its context, is an ``InputError``; a chunk JSON cannot carry a
  ``ContractError``), then the generator ends: a failing sequence never fails the container
  or the other sequences.

There is no ``@modal.batched``: the model or engine the function calls batches the running
sequences itself (continuous batching).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from floodway.modal.contract import CALL_HEADER, ITEM_ERROR


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
    from floodway.runtime.calling import ContractError

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

    from floodway.runtime.calling import error_text, is_fatal, to_jsonable

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
            out = to_jsonable(chunk)
            yield out
    except BaseException as e:  # noqa: BLE001 - a failing sequence fails only itself
        if is_fatal(e) or isinstance(e, asyncio.CancelledError):
            raise
        failed = error_text(e)
    finally:
        if chunks is not None:
            await chunks.aclose()   # type: ignore[attr-defined]
    if failed is not None:
        yield {ITEM_ERROR: failed}


__all__ = ["container_chunks"]
