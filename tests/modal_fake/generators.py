"""Generator calls through the control plane: ``remote_gen`` of a generator function or method.

The client (modal 1.6.4, ``modal._functions._Invocation.run_generator``) makes the call as any
other (``FunctionMap``, invocation type ``SYNC_LEGACY``), then reads two things at once:

- the call's ``data_out`` stream, ``FunctionCallGetDataOut`` (a unary-stream RPC): one
  ``DataChunk`` per yielded item, numbered from 1, each serialized in the input's data format;
  the client asks again from its ``last_index`` when a stream ends;
- the input's output (``FunctionGetOutputs``): on success a ``GeneratorDone(items_total=n)``
  in ``DATA_FORMAT_GENERATOR_DONE``, once every item is on ``data_out``; on failure the
  exception, as for any call. The client stops once it has read ``items_total`` items, and
  raises a failure as soon as it sees it.

This is what Modal's container does for a generator (``modal/_container_entrypoint.py``:
``generator_output_sender`` puts the items with ``FunctionCallPutDataOut``, then the
GeneratorDone goes out as the input's output). Here a handler stands in for the container:

    async def stream(item):           # server.handle("Chat.stream", stream)
        yield ...                     # a sync or async generator function

It runs with Modal's context ids set (``modal.current_function_call_id()`` and
``modal.current_input_id()`` answer as in a container). ``FunctionCallCancel`` of a call whose
generator is running stops it (the handler's task is cancelled, so its ``finally`` runs) and
its output is ``TERMINATED``; `InputRecord.stopped` records it. Closing ``remote_gen`` on the
client sends nothing (1.6.4 only stops reading): a caller that wants the input stopped cancels
the call itself.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from modal._runtime.execution_context import _set_current_context_ids
from modal._serialization import serialize_data_format
from modal_proto import api_pb2

from tests.modal_fake.state import CallRecord, FunctionRecord, InputRecord

# Seconds a FunctionCallGetDataOut stream stays open without new data before it ends (the
# client then asks again from its last index).
DATA_HOLD_S = 30.0
_SUCCESS = api_pb2.GenericResult.GENERIC_STATUS_SUCCESS
_TERMINATED = api_pb2.GenericResult.GENERIC_STATUS_TERMINATED


def is_generator(record: FunctionRecord, method_name: str) -> bool:
    """Whether the function (or the class's method `method_name`) was deployed as a
    generator (``FUNCTION_TYPE_GENERATOR``, as the client derives it from the code)."""
    d = record.definition
    if d is None:
        return False
    if method_name and method_name in d.method_definitions:
        return d.method_definitions[method_name].function_type == \
            api_pb2.Function.FUNCTION_TYPE_GENERATOR
    return d.function_type == api_pb2.Function.FUNCTION_TYPE_GENERATOR


def _more(call: CallRecord, sent: int) -> bool:
    return len(call.data_out) > sent


class GeneratorSide:
    """Generator inputs and the ``data_out`` stream (see the module doc). Needs
    ``self.state``; `tests.modal_fake.calls.CallSide` runs generator inputs through
    `run_generator` and stops them through `stop_generators`."""

    state: Any

    def _gen_tasks(self) -> dict[str, asyncio.Task]:
        return self.__dict__.setdefault("_generator_tasks", {})

    def _data_changed(self, call_id: str) -> asyncio.Condition:
        conds = self.__dict__.setdefault("_data_conds", {})
        if call_id not in conds:
            conds[call_id] = asyncio.Condition()
        return conds[call_id]

    async def _put_data(self, call: CallRecord, item: Any, fmt: int) -> None:
        call.data_out.append(api_pb2.DataChunk(
            data_format=fmt, data=serialize_data_format(item, fmt), index=len(call.data_out) + 1))
        cond = self._data_changed(call.function_call_id)
        async with cond:
            cond.notify_all()

    async def _iterate(self, inp: InputRecord, handler: Callable[..., Any], args: tuple,
                       kwargs: dict) -> int:
        """Run the handler's generator for `inp`, each item onto the call's data_out;
        returns how many there were. Raises TypeError when the handler is no generator."""
        _set_current_context_ids([inp.input_id], [inp.function_call_id], [""])
        call = self.state.calls[inp.function_call_id]
        fmt = inp.input.data_format or api_pb2.DATA_FORMAT_PICKLE
        out = handler(*args, **kwargs)
        n = 0
        if inspect.isasyncgen(out):
            try:
                async for item in out:
                    await self._put_data(call, item, fmt)
                    n += 1
            finally:
                await out.aclose()
        elif inspect.isgenerator(out):
            try:
                for item in out:
                    await self._put_data(call, item, fmt)
                    n += 1
            finally:
                out.close()
        else:
            raise TypeError(f"the handler of generator input {inp.input_id} returned a "
                            f"{type(out).__name__}, not a generator")
        return n

    async def run_generator(self, inp: InputRecord, handler: Callable[..., Any], args: tuple,
                            kwargs: dict) -> api_pb2.GenericResult:
        """Run one generator input (see the module doc) -> its output: GeneratorDone, the
        failure (as `failure` makes it), or TERMINATED when `stop_generators` stopped it."""
        from tests.modal_fake.calls import _failure

        task = asyncio.ensure_future(self._iterate(inp, handler, args, kwargs))
        self._gen_tasks()[inp.input_id] = task
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:      # the pool is closing
            task.cancel()
            raise
        finally:
            self._gen_tasks().pop(inp.input_id, None)
        if task.cancelled():
            inp.stopped = True
            return api_pb2.GenericResult(status=_TERMINATED, exception="cancelled")
        exc = task.exception()
        if exc is not None:
            return _failure(exc)
        inp.data_format = api_pb2.DATA_FORMAT_GENERATOR_DONE
        return api_pb2.GenericResult(status=_SUCCESS, data=serialize_data_format(
            api_pb2.GeneratorDone(items_total=task.result()),
            api_pb2.DATA_FORMAT_GENERATOR_DONE))

    async def generator_ended(self, inp: InputRecord) -> None:
        """`inp`'s output is recorded: wake `until_stopped` (called by CallSide)."""
        cond = self._data_changed(inp.function_call_id)
        async with cond:
            cond.notify_all()

    async def until_stopped(self, call_id: str, timeout_s: float = 10.0) -> bool:
        """Wait (on the server's loop: ``server.run(...)``) until a generator input of the
        call `call_id` was stopped by a cancel and its TERMINATED output recorded, at most
        `timeout_s`; whether it was."""
        call = self.state.calls[call_id]
        cond = self._data_changed(call_id)
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(
                    lambda: any(i.stopped and i.result for i in call.inputs)), timeout_s)
            except TimeoutError:
                return False
        return True

    def stop_generators(self, call: CallRecord) -> int:
        """Cancel the running generators of `call`'s inputs; returns how many."""
        tasks = [self._gen_tasks().get(i.input_id) for i in call.inputs]
        running = [t for t in tasks if t is not None and not t.done()]
        for t in running:
            t.cancel()
        return len(running)

    async def FunctionCallGetDataOut(self, stream: Any) -> None:
        """The call's data_out from ``last_index`` on, sent as the items come; the stream
        ends after `DATA_HOLD_S` without new data (or when the client goes)."""
        from grpclib import GRPCError, Status

        req: api_pb2.FunctionCallGetDataRequest = await stream.recv_message()
        call = self.state.calls.get(req.function_call_id)
        if call is None:
            raise GRPCError(Status.NOT_FOUND, f"function call {req.function_call_id} not found")
        sent = req.last_index
        cond = self._data_changed(call.function_call_id)
        while True:
            async with cond:
                try:
                    await asyncio.wait_for(cond.wait_for(functools.partial(_more, call, sent)),
                                           DATA_HOLD_S)
                except TimeoutError:
                    return
            for chunk in list(call.data_out[sent:]):
                await stream.send_message(chunk)
                sent = chunk.index


__all__ = ["DATA_HOLD_S", "GeneratorSide", "is_generator"]
