"""Deploying: apps, images, mounts, functions and classes, and looking them up by name.

What ``modal deploy`` / ``App.deploy()`` / ``App.run()`` send (modal 1.6.4, ``modal.runner``):
ClientHello; EnvironmentGetOrCreate; AppGetByDeploymentName (then AppGetLayout for an app
already deployed) or AppCreate; per object ImageGetOrCreate (answered as built at once:
nothing is built), MountBatchedCheckExistence / MountPutFile / MountGetOrCreate (the local
source is stored, by sha256), FunctionPrecreate + FunctionCreate, ClassCreate; then
AppPublish with the tags. ``App.run()`` is the same on an ephemeral app, ended by
AppClientDisconnect (AppGetLogs, which ``modal.enable_output()`` follows, answers no logs and
``app_done`` then). Lookups: FunctionGet / ClassGet by app name and tag (a class's service
function has the tag ``"<Class>.*"``), FunctionGetById.

The handle metadata returned for a function is built from its definition as the server
would: name, type, web URL (``https://<app>--<tag>.fake.modal.run`` for web endpoints),
schema, data formats and one entry per method of a class. No ``input_plane_url``: calls go
through the control plane (`tests.modal_fake.calls`). A redeploy under the same name reuses
the function ids and resets the autoscaler to the decorator's settings, as Modal does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal._utils.blob_utils import MAX_ASYNC_OBJECT_SIZE_BYTES, MAX_OBJECT_SIZE_BYTES
from modal._utils.jwt_utils import DecodedJwt
from modal_proto import api_pb2

from tests.modal_fake.state import AppRecord, ClassRecord, FunctionRecord
from tests.modal_fake.stubs import new_id, unary

IMAGE_BUILDER_VERSION = "2025.06"   # one of modal._image.ImageBuilderVersion


def function_data(d: api_pb2.Function) -> api_pb2.FunctionData:
    """The FunctionData the server returns for definition `d`: the fields both messages share,
    and `d` as the only ranked function (``modal.types.FunctionInfo._from_function_proto``
    reads it)."""
    data = api_pb2.FunctionData()
    names = data.DESCRIPTOR.fields_by_name
    for fd, value in d.ListFields():
        target = names.get(fd.name)
        if target is None or fd.name == "ranked_functions" or target.type != fd.type:
            continue
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out = getattr(data, fd.name)
            for k, v in value.items():
                if hasattr(v, "CopyFrom"):
                    out[k].CopyFrom(v)
                else:
                    out[k] = v
        elif fd.is_repeated:
            getattr(data, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(data, fd.name).CopyFrom(value)
        else:
            setattr(data, fd.name, value)
    data.ranked_functions.add(rank=0, function=d)
    return data


def _web_url(app: AppRecord, tag: str, webhook: api_pb2.WebhookConfig) -> str:
    if webhook.type == api_pb2.WEBHOOK_TYPE_UNSPECIFIED:
        return ""
    name = (app.name or app.description or "app").replace("_", "-")
    return f"https://{name}--{tag.replace('.', '-').replace('*', 'x').lower()}.fake.modal.run"


def handle_metadata(record: FunctionRecord, app: AppRecord, source: Any
                    ) -> api_pb2.FunctionHandleMetadata:
    """The FunctionHandleMetadata of `record` from `source` (its api_pb2.Function, or the
    FunctionPrecreateRequest before that)."""
    h = api_pb2.FunctionHandleMetadata(
        function_name=source.function_name, function_type=source.function_type,
        web_url=_web_url(app, record.tag, source.webhook_config),
        function_schema=source.function_schema, app_id=app.app_id,
        supported_input_formats=source.supported_input_formats,
        supported_output_formats=source.supported_output_formats,
        max_object_size_bytes=MAX_OBJECT_SIZE_BYTES,
        max_async_object_size_bytes=MAX_ASYNC_OBJECT_SIZE_BYTES,
        definition_id=f"de-{record.function_id}")
    if isinstance(source, api_pb2.Function):
        h.class_parameter_info.CopyFrom(source.class_parameter_info)
    for name, m in source.method_definitions.items():
        h.method_handle_metadata[name].CopyFrom(api_pb2.FunctionHandleMetadata(
            function_name=m.function_name, function_type=m.function_type,
            web_url=_web_url(app, f"{record.tag}-{name}", m.webhook_config),
            is_method=True, use_method_name=name, function_schema=m.function_schema,
            class_parameter_info=h.class_parameter_info, app_id=app.app_id,
            supported_input_formats=m.supported_input_formats,
            supported_output_formats=m.supported_output_formats,
            max_object_size_bytes=MAX_OBJECT_SIZE_BYTES,
            max_async_object_size_bytes=MAX_ASYNC_OBJECT_SIZE_BYTES))
    return h


class DeploySide:
    """The deploy and lookup RPCs (see the module doc). Needs ``self.state``."""

    state: Any

    def _app(self, app_id: str) -> AppRecord:
        if app_id not in self.state.apps:
            raise GRPCError(Status.NOT_FOUND, f"app {app_id} not found")
        return self.state.apps[app_id]

    # ------------------------------------------------------------ client

    @unary
    async def ClientHello(self, req: empty_pb2.Empty) -> api_pb2.ClientHelloResponse:
        return api_pb2.ClientHelloResponse(image_builder_version=IMAGE_BUILDER_VERSION)

    @unary
    async def AuthTokenGet(self, req: api_pb2.AuthTokenGetRequest) -> api_pb2.AuthTokenGetResponse:
        token = DecodedJwt.encode_without_signature({"exp": int(time.time()) + 86400 * 365})
        return api_pb2.AuthTokenGetResponse(token=token)

    @unary
    async def EnvironmentGetOrCreate(self, req: api_pb2.EnvironmentGetOrCreateRequest
                                     ) -> api_pb2.EnvironmentGetOrCreateResponse:
        return api_pb2.EnvironmentGetOrCreateResponse(
            environment_id="en-fake", metadata=api_pb2.EnvironmentMetadata(
                name=req.deployment_name or "main",
                settings=api_pb2.EnvironmentSettings(image_builder_version=IMAGE_BUILDER_VERSION,
                                                     webhook_suffix="fake.modal.run")))

    # ------------------------------------------------------------ apps

    @unary
    async def AppCreate(self, req: api_pb2.AppCreateRequest) -> api_pb2.AppCreateResponse:
        app = AppRecord(new_id("ap"), "", description=req.description, state=req.app_state)
        self.state.apps[app.app_id] = app
        return api_pb2.AppCreateResponse(app_id=app.app_id,
                                         app_page_url=f"https://fake.modal/apps/{app.app_id}",
                                         app_logs_url=f"https://fake.modal/logs/{app.app_id}")

    @unary
    async def AppGetByDeploymentName(self, req: api_pb2.AppGetByDeploymentNameRequest
                                     ) -> api_pb2.AppGetByDeploymentNameResponse:
        app = self.state.deployed(req.name)
        return api_pb2.AppGetByDeploymentNameResponse(app_id=app.app_id if app else "")

    @unary
    async def AppGetLayout(self, req: api_pb2.AppGetLayoutRequest) -> api_pb2.AppGetLayoutResponse:
        app = self._app(req.app_id)
        layout = api_pb2.AppLayout(function_ids=app.function_ids, class_ids=app.class_ids)
        for fid in app.function_ids.values():
            layout.objects.add(object_id=fid,
                               function_handle_metadata=self.state.functions[fid].handle)
        for cid in app.class_ids.values():
            layout.objects.add(object_id=cid, class_handle_metadata=api_pb2.ClassHandleMetadata())
        return api_pb2.AppGetLayoutResponse(app_layout=layout)

    @unary
    async def AppPublish(self, req: api_pb2.AppPublishRequest) -> api_pb2.AppPublishResponse:
        app = self._app(req.app_id)
        app.name = req.name or app.name
        app.state, app.published = req.app_state, True
        app.function_ids, app.class_ids = dict(req.function_ids), dict(req.class_ids)
        app.published_at = time.time()
        for tag, fid in app.function_ids.items():
            record = self.state.functions[fid]
            record.tag = tag
            source = record.definition or api_pb2.Function(function_name=tag)
            record.handle.CopyFrom(handle_metadata(record, app, source))
        for tag, cid in app.class_ids.items():
            self.state.classes[cid].tag = tag
        return api_pb2.AppPublishResponse(url=f"https://fake.modal/apps/{app.app_id}",
                                          deployed_at=app.published_at)

    @unary
    async def AppHeartbeat(self, req: api_pb2.AppHeartbeatRequest) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    def _stopped(self, app_id: str) -> asyncio.Event:
        events = self.__dict__.setdefault("_app_stopped", {})
        return events.setdefault(app_id, asyncio.Event())

    @unary
    async def AppClientDisconnect(self, req: api_pb2.AppClientDisconnectRequest) -> empty_pb2.Empty:
        app = self.state.apps.get(req.app_id)
        if app is not None and app.state != api_pb2.APP_STATE_DEPLOYED:
            app.state = api_pb2.APP_STATE_STOPPED
        self._stopped(req.app_id).set()
        return empty_pb2.Empty()

    async def AppGetLogs(self, stream: Any) -> None:
        """No logs (nothing runs in the fake); ``app_done`` once the app's client
        disconnected, so that ``App.run()`` with output enabled ends its log loop."""
        req: api_pb2.AppGetLogsRequest = await stream.recv_message()
        try:
            await asyncio.wait_for(self._stopped(req.app_id).wait(), max(0.0, req.timeout))
        except TimeoutError:
            return
        await stream.send_message(api_pb2.TaskLogsBatch(app_done=True, entry_id="0-1"))

    # ------------------------------------------------------------ images and mounts

    @unary
    async def ImageGetOrCreate(self, req: api_pb2.ImageGetOrCreateRequest
                               ) -> api_pb2.ImageGetOrCreateResponse:
        image_id = new_id("im")
        self.state.images[image_id] = req
        return api_pb2.ImageGetOrCreateResponse(
            image_id=image_id,
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS),
            metadata=api_pb2.ImageMetadata(python_version_info="3.11.0"))

    async def ImageJoinStreaming(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(api_pb2.ImageJoinStreamingResponse(
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS),
            eof=True))

    @unary
    async def MountBatchedCheckExistence(self, req: api_pb2.MountBatchedCheckExistenceRequest
                                         ) -> api_pb2.MountBatchedCheckExistenceResponse:
        missing = [h for h in req.sha256_hex_hashes if h not in self.state.mount_files]
        return api_pb2.MountBatchedCheckExistenceResponse(missing_sha256_hex_hashes=missing)

    @unary
    async def MountPutFile(self, req: api_pb2.MountPutFileRequest) -> api_pb2.MountPutFileResponse:
        if req.WhichOneof("data_oneof") == "data":
            self.state.mount_files[req.sha256_hex] = req.data
        elif req.data_blob_id:
            self.state.mount_files[req.sha256_hex] = self.state.blobs[req.data_blob_id]
        return api_pb2.MountPutFileResponse(exists=req.sha256_hex in self.state.mount_files)

    @unary
    async def MountGetOrCreate(self, req: api_pb2.MountGetOrCreateRequest
                               ) -> api_pb2.MountGetOrCreateResponse:
        mount_id = new_id("mo")
        self.state.mounts[mount_id] = {f.filename: f.sha256_hex for f in req.files}
        return api_pb2.MountGetOrCreateResponse(
            mount_id=mount_id,
            handle_metadata=api_pb2.MountHandleMetadata(content_checksum_sha256_hex=mount_id))

    # ------------------------------------------------------------ functions and classes

    def _function_for(self, app_id: str, existing: str, tag: str) -> FunctionRecord:
        if existing and existing in self.state.functions:
            return self.state.functions[existing]
        record = FunctionRecord(new_id("fu"), app_id, tag)
        self.state.functions[record.function_id] = record
        return record

    @unary
    async def FunctionPrecreate(self, req: api_pb2.FunctionPrecreateRequest
                                ) -> api_pb2.FunctionPrecreateResponse:
        app = self._app(req.app_id)
        record = self._function_for(req.app_id, req.existing_function_id, req.function_name)
        record.handle.CopyFrom(handle_metadata(record, app, req))
        return api_pb2.FunctionPrecreateResponse(function_id=record.function_id,
                                                 handle_metadata=record.handle)

    @unary
    async def FunctionCreate(self, req: api_pb2.FunctionCreateRequest
                             ) -> api_pb2.FunctionCreateResponse:
        app = self._app(req.app_id)
        if req.HasField("function"):
            d = req.function
        else:                       # a GPU list: one definition per GPU, the first one kept
            d = api_pb2.Function()
            d.CopyFrom(req.function_data.ranked_functions[0].function)
            if req.function_data.HasField("schedule"):
                d.schedule.CopyFrom(req.function_data.schedule)
        record = self._function_for(req.app_id, req.existing_function_id, d.function_name)
        record.definition = d
        record.schedule = d.schedule if d.HasField("schedule") else (
            req.schedule if req.HasField("schedule") else None)
        record.autoscaler = api_pb2.AutoscalerSettings()
        record.autoscaler.CopyFrom(d.autoscaler_settings)
        record.handle.CopyFrom(handle_metadata(record, app, d))
        return api_pb2.FunctionCreateResponse(
            function_id=record.function_id, function=d, handle_metadata=record.handle,
            function_data=function_data(d))

    @unary
    async def ClassCreate(self, req: api_pb2.ClassCreateRequest) -> api_pb2.ClassCreateResponse:
        self._app(req.app_id)
        if req.existing_class_id and req.existing_class_id in self.state.classes:
            record = self.state.classes[req.existing_class_id]
        else:
            record = ClassRecord(new_id("cs"), req.app_id)
            self.state.classes[record.class_id] = record
        return api_pb2.ClassCreateResponse(class_id=record.class_id,
                                           handle_metadata=api_pb2.ClassHandleMetadata())

    def _lookup(self, app_name: str, tag: str, kind: str) -> tuple[AppRecord, str]:
        app = self.state.deployed(app_name)
        ids = (app.function_ids if kind == "Function" else app.class_ids) if app else {}
        if tag not in ids:
            where = f"app '{app_name}'" if app else f"no deployed app '{app_name}'"
            raise GRPCError(Status.NOT_FOUND, f"{kind} '{tag}' not found ({where})")
        return app, ids[tag]

    @unary
    async def FunctionGet(self, req: api_pb2.FunctionGetRequest) -> api_pb2.FunctionGetResponse:
        _, fid = self._lookup(req.app_name, req.object_tag, "Function")
        record = self.state.functions[fid]
        return api_pb2.FunctionGetResponse(function_id=fid, handle_metadata=record.handle,
                                           function=function_data(record.definition))

    @unary
    async def FunctionGetById(self, req: api_pb2.FunctionGetByIdRequest
                              ) -> api_pb2.FunctionGetByIdResponse:
        record = self.state.functions.get(req.function_id)
        if record is None or record.definition is None:
            raise GRPCError(Status.NOT_FOUND, f"function {req.function_id} not found")
        return api_pb2.FunctionGetByIdResponse(handle_metadata=record.handle,
                                               function=function_data(record.definition))

    @unary
    async def ClassGet(self, req: api_pb2.ClassGetRequest) -> api_pb2.ClassGetResponse:
        _, cid = self._lookup(req.app_name, req.object_tag, "Class")
        return api_pb2.ClassGetResponse(class_id=cid, handle_metadata=api_pb2.ClassHandleMetadata())
