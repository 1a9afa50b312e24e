"""Named objects: Secrets, Volumes, Dicts, and the blob store.

Lookups follow Modal's creation types (``api_pb2.ObjectCreationType``): a plain
``from_name`` (UNSPECIFIED) answers NOT_FOUND for a missing name, as the real server does, so
``modal.Secret.from_name("missing")`` fails when it is resolved (at deploy);
CREATE_IF_MISSING makes it; CREATE_FAIL_IF_EXISTS answers ALREADY_EXISTS for an existing one;
EPHEMERAL and ANONYMOUS_OWNED_BY_APP objects (``Secret.from_dict``, ``Dict.ephemeral``) are
kept under their id. A Secret lookup with ``required_keys`` the secret lacks answers
NOT_FOUND naming them.

Dicts hold modal's serialized bytes (``modal._serialization.serialize``), compared as bytes:
the client serializes keys deterministically for plain data. Volumes are records only (no
file operations). Blobs (``BlobCreate``/``BlobGet``) point at the loopback HTTP server of
`tests.modal_fake.server`, which stores them in ``state.blobs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_pb2

from tests.modal_fake.state import DictRecord, SecretRecord, VolumeRecord
from tests.modal_fake.stubs import new_id, unary

_ANONYMOUS = (api_pb2.OBJECT_CREATION_TYPE_EPHEMERAL,
              api_pb2.OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP)


def get_or_create(kind: str, table: dict[str, Any], req: Any, make: Callable[[str], Any]) -> Any:
    """The record `req` asks for in `table` (name -> record), per its creation type (see the
    module doc). `make(name)` builds a new record. Raises GRPCError NOT_FOUND or
    ALREADY_EXISTS as Modal does."""
    how, name = req.object_creation_type, req.deployment_name
    if how in _ANONYMOUS:
        rec = make("")
        table[_record_id(rec)] = rec
        return rec
    exists = name in table
    if how == api_pb2.OBJECT_CREATION_TYPE_UNSPECIFIED and not exists:
        raise GRPCError(Status.NOT_FOUND, f"{kind} '{name}' not found in environment 'main'")
    if how == api_pb2.OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS and exists:
        raise GRPCError(Status.ALREADY_EXISTS, f"{kind} '{name}' already exists")
    if not exists or how == api_pb2.OBJECT_CREATION_TYPE_CREATE_OVERWRITE_IF_EXISTS:
        table[name] = make(name)
    return table[name]


def _record_id(rec: Any) -> str:
    for attr in ("secret_id", "volume_id", "dict_id"):
        if hasattr(rec, attr):
            return getattr(rec, attr)
    raise TypeError(rec)


class ObjectsSide:
    """Secret, Volume, Dict and blob RPCs. Needs ``self.state`` and ``self.blob_url``."""

    state: Any
    blob_url: str

    # ------------------------------------------------------------ secrets

    @unary
    async def SecretGetOrCreate(self, req: api_pb2.SecretGetOrCreateRequest
                                ) -> api_pb2.SecretGetOrCreateResponse:
        rec = get_or_create("Secret", self.state.secrets, req,
                            lambda name: SecretRecord(new_id("st"), name, dict(req.env_dict)))
        missing = sorted(set(req.required_keys) - set(rec.env))
        if missing:
            raise GRPCError(Status.NOT_FOUND,
                            f"Secret '{rec.name}' is missing required keys: {', '.join(missing)}")
        return api_pb2.SecretGetOrCreateResponse(
            secret_id=rec.secret_id, metadata=api_pb2.SecretMetadata(name=rec.name))

    # ------------------------------------------------------------ volumes

    @unary
    async def VolumeGetOrCreate(self, req: api_pb2.VolumeGetOrCreateRequest
                                ) -> api_pb2.VolumeGetOrCreateResponse:
        rec = get_or_create("Volume", self.state.volumes, req,
                            lambda name: VolumeRecord(new_id("vo"), name))
        return api_pb2.VolumeGetOrCreateResponse(
            volume_id=rec.volume_id, version=req.version or api_pb2.VOLUME_FS_VERSION_V2,
            metadata=api_pb2.VolumeMetadata(name=rec.name,
                                            version=req.version or api_pb2.VOLUME_FS_VERSION_V2))

    @unary
    async def VolumeHeartbeat(self, req: api_pb2.VolumeHeartbeatRequest) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    # ------------------------------------------------------------ dicts

    def _dict(self, dict_id: str) -> DictRecord:
        for rec in self.state.dicts.values():
            if rec.dict_id == dict_id:
                return rec
        raise GRPCError(Status.NOT_FOUND, f"Dict {dict_id} not found")

    @unary
    async def DictGetOrCreate(self, req: api_pb2.DictGetOrCreateRequest
                              ) -> api_pb2.DictGetOrCreateResponse:
        rec = get_or_create("Dict", self.state.dicts, req,
                            lambda name: DictRecord(new_id("di"), name))
        for entry in req.data:
            rec.data.setdefault(entry.key, entry.value)
        return api_pb2.DictGetOrCreateResponse(
            dict_id=rec.dict_id, metadata=api_pb2.DictMetadata(name=rec.name))

    @unary
    async def DictHeartbeat(self, req: api_pb2.DictHeartbeatRequest) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    @unary
    async def DictGet(self, req: api_pb2.DictGetRequest) -> api_pb2.DictGetResponse:
        data = self._dict(req.dict_id).data
        return api_pb2.DictGetResponse(found=req.key in data, value=data.get(req.key, b""))

    @unary
    async def DictContains(self, req: api_pb2.DictContainsRequest) -> api_pb2.DictContainsResponse:
        return api_pb2.DictContainsResponse(found=req.key in self._dict(req.dict_id).data)

    @unary
    async def DictLen(self, req: api_pb2.DictLenRequest) -> api_pb2.DictLenResponse:
        return api_pb2.DictLenResponse(len=len(self._dict(req.dict_id).data))

    @unary
    async def DictUpdate(self, req: api_pb2.DictUpdateRequest) -> api_pb2.DictUpdateResponse:
        data = self._dict(req.dict_id).data
        if req.if_not_exists and any(e.key in data for e in req.updates):
            return api_pb2.DictUpdateResponse(created=False)
        for e in req.updates:
            data[e.key] = e.value
        return api_pb2.DictUpdateResponse(created=True)

    @unary
    async def DictPop(self, req: api_pb2.DictPopRequest) -> api_pb2.DictPopResponse:
        data = self._dict(req.dict_id).data
        found = req.key in data
        return api_pb2.DictPopResponse(found=found, value=data.pop(req.key, b""))

    @unary
    async def DictClear(self, req: api_pb2.DictClearRequest) -> empty_pb2.Empty:
        self._dict(req.dict_id).data.clear()
        return empty_pb2.Empty()

    async def DictContents(self, stream: Any) -> None:
        req: api_pb2.DictContentsRequest = await stream.recv_message()
        for k, v in list(self._dict(req.dict_id).data.items()):
            await stream.send_message(api_pb2.DictEntry(key=k if req.keys else b"",
                                                        value=v if req.values else b""))

    # ------------------------------------------------------------ blobs

    @unary
    async def BlobCreate(self, req: api_pb2.BlobCreateRequest) -> api_pb2.BlobCreateResponse:
        blob_id = new_id("bl")
        return api_pb2.BlobCreateResponse(
            blob_ids=[blob_id],
            upload_urls=api_pb2.UploadUrlList(items=[f"{self.blob_url}/{blob_id}"]))

    @unary
    async def BlobGet(self, req: api_pb2.BlobGetRequest) -> api_pb2.BlobGetResponse:
        if req.blob_id not in self.state.blobs:
            raise GRPCError(Status.NOT_FOUND, f"blob {req.blob_id} not found")
        return api_pb2.BlobGetResponse(download_url=f"{self.blob_url}/{req.blob_id}")
