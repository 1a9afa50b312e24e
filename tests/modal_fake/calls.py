"""Calling functions through the control plane: ``.remote``, ``.spawn``, ``FunctionCall.get``,
``.map``, stats and autoscaler updates.

The client (modal 1.6.4, ``modal._functions._Invocation``) sends one ``FunctionMap`` with the
input pipelined (``FunctionPutInputs`` for more, as ``.map`` does), then polls
``FunctionGetOutputs``. Here each input goes to the function's `Pool`
(`tests.modal_fake.pools`), which runs the Python handler a test registered:

    server.handle("Embed.predict", fn)    # a class method: "<Class>.<method>"
    server.handle("run_job", fn)          # a function, by its tag

A handler gets the call's deserialized ``*args, **kwargs`` and returns the result; for a
``@modal.batched`` function it gets one list per argument (the batch, in order) and returns
one list of results, as Modal's batched bodies do. A handler may be ``async``. What it
raises is sent back pickled (the client raises it); no handler: a failure naming the key.

A generator function or method (``remote_gen``) is served by `tests.modal_fake.generators`:
its handler is a generator function whose items go onto the call's ``data_out`` stream.

Functions are never run from the definitions received (no user code runs in the fake).
The input plane (``AttemptStart``...) is not used: the fake never gives a function an
``input_plane_url``.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable
from typing import Any

from grpclib import GRPCError, Status
from modal._runtime.execution_context import _set_current_context_ids
from modal._serialization import deserialize_data_format, serialize, serialize_data_format
from modal_proto import api_pb2

from tests.modal_fake.generators import is_generator
from tests.modal_fake.pools import Container, Pool, Timing
from tests.modal_fake.state import AutoscalerUpdate, CallRecord, FunctionRecord, InputRecord
from tests.modal_fake.stubs import new_id, unary

Handler = Callable[..., Any]
_AUTOSCALER_FIELDS = ("min_containers", "max_containers", "buffer_containers",
                      "scaleup_window", "scaledown_window", "target_concurrency",
                      "target_concurrency_float", "scaledown_rate_limit")


def handler_key(record: FunctionRecord, method_name: str) -> str:
    """The `handle` key of an input: ``<Class>.<method>`` or the function's tag."""
    if record.tag.endswith(".*"):
        return f"{record.tag[:-2]}.{method_name}"
    return record.tag


def timing_key(record: FunctionRecord) -> str:
    """The `Timing` key of a function: its tag, or the class name for a class."""
    return record.tag[:-2] if record.tag.endswith(".*") else record.tag


def _failure(exc: BaseException) -> api_pb2.GenericResult:
    return api_pb2.GenericResult(
        status=api_pb2.GenericResult.GENERIC_STATUS_FAILURE,
        exception=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)), data=serialize(exc))


class CallSide:
    """The calling RPCs (see the module doc). Needs ``self.state``, ``self.handlers``,
    ``self.timings``, ``self.pools`` (set by `tests.modal_fake.server.FakeModal`)."""

    state: Any
    handlers: dict[str, Handler]
    timings: dict[str, Timing]
    pools: dict[str, Pool]

    # ------------------------------------------------------------ pools

    def pool(self, function_id: str) -> Pool:
        """The container pool of a function (made on first use)."""
        if function_id not in self.pools:
            record = self.state.functions[function_id]
            self.pools[function_id] = Pool(record, self._run_batch,
                                           self.timings.get(timing_key(record), Timing()))
        return self.pools[function_id]

    def _outputs_changed(self, call_id: str) -> asyncio.Condition:
        conds = self.__dict__.setdefault("_call_conds", {})
        if call_id not in conds:
            conds[call_id] = asyncio.Condition()
        return conds[call_id]

    async def _finish(self, inp: InputRecord, result: api_pb2.GenericResult) -> None:
        inp.result, inp.finished_at = result, asyncio.get_running_loop().time()
        self.state.calls[inp.function_call_id].done_order.append(inp)
        cond = self._outputs_changed(inp.function_call_id)
        async with cond:
            cond.notify_all()

    def _args(self, inp: InputRecord) -> tuple[tuple, dict]:
        raw = inp.input.args or self.state.blobs[inp.input.args_blob_id]
        args, kwargs = deserialize_data_format(raw, inp.input.data_format, None)
        return tuple(args), dict(kwargs)

    async def _run_batch(self, container: Container, batch: list[InputRecord]) -> None:
        record = self.state.functions[self.state.calls[batch[0].function_call_id].function_id]
        key = handler_key(record, batch[0].input.method_name)
        handler = self.handlers.get(key)
        try:
            if handler is None:
                raise LookupError(f"no handler registered in the fake for {key!r} "
                                  f"(server.handle({key!r}, fn))")
            calls = [self._args(i) for i in batch]
            if is_generator(record, batch[0].input.method_name):
                for i, (args, kwargs) in zip(batch, calls, strict=True):
                    await self._finish(i, await self.run_generator(i, handler, args, kwargs))
                    await self.generator_ended(i)
                return
            if record.definition is not None and record.definition.batch_max_size:
                cols = [list(c) for c in zip(*(a for a, _ in calls), strict=True)]
                kw = {k: [kws[k] for _, kws in calls] for k in calls[0][1]}
                out = handler(*cols, **kw)
                outs = list(await out if inspect.isawaitable(out) else out)
                if len(outs) != len(batch):
                    raise ValueError(f"batched handler {key!r} returned {len(outs)} results "
                                     f"for {len(batch)} inputs")
            else:
                outs = []
                for i, (args, kwargs) in zip(batch, calls, strict=True):
                    # As in a container: modal.current_function_call_id() etc. answer.
                    _set_current_context_ids([i.input_id], [i.function_call_id], [""])
                    out = handler(*args, **kwargs)
                    outs.append(await out if inspect.isawaitable(out) else out)
        except Exception as e:  # noqa: BLE001 - sent back to the caller, as Modal does
            for i in batch:
                await self._finish(i, _failure(e))
            return
        for i, out in zip(batch, outs, strict=True):
            fmt = i.input.data_format or api_pb2.DATA_FORMAT_PICKLE
            i.data_format = fmt
            await self._finish(i, api_pb2.GenericResult(
                status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS,
                data=serialize_data_format(out, fmt)))

    def _add_inputs(self, call: CallRecord, items: Any
                    ) -> list[api_pb2.FunctionPutInputsResponseItem]:
        now = asyncio.get_running_loop().time()
        made = []
        for item in items:
            inp = InputRecord(new_id("in"), call.function_call_id, item.idx, item.input, now)
            call.inputs.append(inp)
            self.state.inputs[inp.input_id] = inp
            made.append(inp)
        self.pool(call.function_id).submit(made)
        return [api_pb2.FunctionPutInputsResponseItem(idx=i.idx, input_id=i.input_id,
                                                      input_jwt=f"jwt-{i.input_id}")
                for i in made]

    # ------------------------------------------------------------ RPCs

    @unary
    async def FunctionMap(self, req: api_pb2.FunctionMapRequest) -> api_pb2.FunctionMapResponse:
        if req.function_id not in self.state.functions:
            raise GRPCError(Status.NOT_FOUND, f"function {req.function_id} not found")
        call = CallRecord(new_id("fc"), req.function_id, req.function_call_invocation_type,
                          call_type=req.function_call_type)
        self.state.calls[call.function_call_id] = call
        items = self._add_inputs(call, req.pipelined_inputs) if req.pipelined_inputs else []
        return api_pb2.FunctionMapResponse(
            function_call_id=call.function_call_id, pipelined_inputs=items,
            function_call_jwt=f"jwt-{call.function_call_id}", max_inputs_outstanding=1000)

    @unary
    async def FunctionPutInputs(self, req: api_pb2.FunctionPutInputsRequest
                                ) -> api_pb2.FunctionPutInputsResponse:
        call = self._call(req.function_call_id)
        return api_pb2.FunctionPutInputsResponse(inputs=self._add_inputs(call, req.inputs))

    @unary
    async def FunctionFinishInputs(self, req: Any) -> Any:
        from google.protobuf import empty_pb2

        return empty_pb2.Empty()

    def _call(self, call_id: str) -> CallRecord:
        if call_id not in self.state.calls:
            raise GRPCError(Status.NOT_FOUND, f"function call {call_id} not found")
        return self.state.calls[call_id]

    def _ready_outputs(self, call: CallRecord, req: api_pb2.FunctionGetOutputsRequest
                       ) -> list[InputRecord]:
        if call.call_type == api_pb2.FUNCTION_CALL_TYPE_MAP:
            return [i for i in call.done_order[_entry(req.last_entry_id):] if not i.cleared]
        return [i for i in call.inputs if i.result is not None and not i.cleared
                and req.start_idx <= i.idx <= max(req.start_idx, req.end_idx)]

    @unary
    async def FunctionGetOutputs(self, req: api_pb2.FunctionGetOutputsRequest
                                 ) -> api_pb2.FunctionGetOutputsResponse:
        call = self._call(req.function_call_id)
        cond = self._outputs_changed(call.function_call_id)
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: self._ready_outputs(call, req)),
                                       max(0.0, req.timeout))
            except TimeoutError:
                pass
            ready = self._ready_outputs(call, req)
        items = []
        for i in ready:
            items.append(api_pb2.FunctionGetOutputsItem(
                result=i.result, idx=i.idx, input_id=i.input_id, data_format=i.data_format,
                task_id=i.container))
            ok = i.result.status == api_pb2.GenericResult.GENERIC_STATUS_SUCCESS
            if req.clear_on_success and ok:
                i.cleared = True
        last = _entry(req.last_entry_id) + len(ready)
        return api_pb2.FunctionGetOutputsResponse(
            outputs=items, idxs=[i.idx for i in ready], last_entry_id=f"0-{last}",
            num_unfinished_inputs=call.unfinished())

    @unary
    async def FunctionCallFromId(self, req: api_pb2.FunctionCallFromIdRequest
                                 ) -> api_pb2.FunctionCallFromIdResponse:
        call = self._call(req.function_call_id)
        record = self.state.functions[call.function_id]
        return api_pb2.FunctionCallFromIdResponse(
            function_call_id=call.function_call_id, num_inputs=len(call.inputs),
            metadata=api_pb2.FunctionCallHandleMetadata(function_id=call.function_id,
                                                        app_id=record.app_id))

    @unary
    async def FunctionCallCancel(self, req: api_pb2.FunctionCallCancelRequest) -> Any:
        from google.protobuf import empty_pb2

        call = self._call(req.function_call_id)
        call.cancelled = True
        self.stop_generators(call)      # each finishes TERMINATED once stopped
        for inp in self.pool(call.function_id).withdraw(call.function_call_id):
            await self._finish(inp, api_pb2.GenericResult(
                status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED,
                exception="cancelled"))
        return empty_pb2.Empty()

    @unary
    async def FunctionGetCurrentStats(self, req: api_pb2.FunctionGetCurrentStatsRequest
                                      ) -> api_pb2.FunctionStats:
        if req.function_id not in self.state.functions:
            raise GRPCError(Status.NOT_FOUND, f"function {req.function_id} not found")
        return self.pool(req.function_id).stats()

    @unary
    async def FunctionUpdateSchedulingParams(
            self, req: api_pb2.FunctionUpdateSchedulingParamsRequest,
    ) -> api_pb2.FunctionUpdateSchedulingParamsResponse:
        if req.function_id not in self.state.functions:
            raise GRPCError(Status.NOT_FOUND, f"function {req.function_id} not found")
        record = self.state.functions[req.function_id]
        sent = {f: getattr(req.settings, f) for f in _AUTOSCALER_FIELDS
                if req.settings.HasField(f)}
        self.state.autoscaler_updates.append(AutoscalerUpdate(req.function_id, record.tag, sent))
        record.autoscaler.MergeFrom(req.settings)
        if req.function_id in self.pools:
            self.pools[req.function_id].settings_changed()
        return api_pb2.FunctionUpdateSchedulingParamsResponse(current_settings=record.autoscaler)


def _entry(entry_id: str) -> int:
    """Outputs already returned before `entry_id` ("0-0" at first; the fake's own "0-<n>")."""
    tail = entry_id.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0
