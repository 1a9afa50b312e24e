"""In-memory state of the fake control plane, readable by tests.

Everything the client sent is kept as received (protobuf messages), plus a few plain views:

    state.apps[app_id]                -> AppRecord (name, published, function_ids, class_ids)
    state.functions[function_id]      -> FunctionRecord (tag, definition: api_pb2.Function)
    state.function("Embed.*")         -> the FunctionRecord of a tag (latest app by default)
    state.schedules(app)              -> {tag: (cron, timezone)} of its scheduled functions
    state.classes[class_id]           -> ClassRecord (tag, service function id)
    state.secrets[name]               -> SecretRecord (env); state.add_secret(name, {...})
    state.volumes[name], state.dicts[name]  (DictRecord: serialized key -> serialized value)
    state.dict_items(name)            -> {key: value} deserialized with modal's serializer
    state.autoscaler_updates          -> [AutoscalerUpdate(function_id, tag, settings)], in order
    state.calls[function_call_id]     -> CallRecord (inputs, each with its output once done;
                                         a generator's items in data_out)
    state.unimplemented               -> names of RPCs the client called that the fake lacks

All of it is mutated only on the server's event loop; tests read it between client calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modal._serialization import deserialize
from modal_proto import api_pb2

from tests.modal_fake.stubs import new_id


@dataclass
class AppRecord:
    app_id: str
    name: str                                  # the deployment name ("" until published)
    description: str = ""
    state: int = api_pb2.APP_STATE_INITIALIZING
    published: bool = False
    function_ids: dict[str, str] = field(default_factory=dict)   # tag -> fu-...
    class_ids: dict[str, str] = field(default_factory=dict)      # tag -> cs-...
    published_at: float = 0.0


@dataclass
class FunctionRecord:
    function_id: str
    app_id: str
    tag: str                                   # "router", "Embed.*" (a class service function)
    definition: api_pb2.Function | None = None  # FunctionCreate's definition, as received
    schedule: api_pb2.Schedule | None = None
    handle: api_pb2.FunctionHandleMetadata = field(
        default_factory=api_pb2.FunctionHandleMetadata)
    autoscaler: api_pb2.AutoscalerSettings = field(default_factory=api_pb2.AutoscalerSettings)

    @property
    def is_class(self) -> bool:
        return bool(self.definition and self.definition.is_class)


@dataclass
class ClassRecord:
    class_id: str
    app_id: str
    tag: str = ""                              # set when the app is published


@dataclass
class SecretRecord:
    secret_id: str
    name: str
    env: dict[str, str]


@dataclass
class VolumeRecord:
    volume_id: str
    name: str
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class DictRecord:
    dict_id: str
    name: str
    data: dict[bytes, bytes] = field(default_factory=dict)   # serialized key -> value


@dataclass
class AutoscalerUpdate:
    """One FunctionUpdateSchedulingParams call: the fields it set (unset ones omitted)."""

    function_id: str
    tag: str
    settings: dict[str, Any]


@dataclass
class InputRecord:
    input_id: str
    function_call_id: str
    idx: int
    input: api_pb2.FunctionInput
    enqueued_at: float                          # server-loop time (loop.time(), seconds)
    started_at: float | None = None
    finished_at: float | None = None
    result: api_pb2.GenericResult | None = None
    data_format: int = api_pb2.DATA_FORMAT_PICKLE
    container: str = ""                         # the fake container that ran it
    cleared: bool = False
    stopped: bool = False                       # its generator was stopped by a cancel


@dataclass
class CallRecord:
    function_call_id: str
    function_id: str
    invocation_type: int
    call_type: int = api_pb2.FUNCTION_CALL_TYPE_UNARY
    inputs: list[InputRecord] = field(default_factory=list)
    done_order: list[InputRecord] = field(default_factory=list)   # in order of finishing
    cancelled: bool = False
    data_out: list[api_pb2.DataChunk] = field(default_factory=list)  # generator items

    def unfinished(self) -> int:
        return sum(1 for i in self.inputs if i.result is None)


class State:
    """The fake's whole state (see the module doc)."""

    def __init__(self) -> None:
        self.apps: dict[str, AppRecord] = {}
        self.functions: dict[str, FunctionRecord] = {}
        self.classes: dict[str, ClassRecord] = {}
        self.images: dict[str, api_pb2.ImageGetOrCreateRequest] = {}
        self.mounts: dict[str, dict[str, str]] = {}      # mount id -> {path: sha256}
        self.mount_files: dict[str, bytes] = {}          # sha256 -> content
        self.secrets: dict[str, SecretRecord] = {}
        self.volumes: dict[str, VolumeRecord] = {}
        self.dicts: dict[str, DictRecord] = {}
        self.blobs: dict[str, bytes] = {}
        self.autoscaler_updates: list[AutoscalerUpdate] = []
        self.calls: dict[str, CallRecord] = {}
        self.inputs: dict[str, InputRecord] = {}
        self.unimplemented: list[str] = []

    # ------------------------------------------------------------ lookups

    def deployed(self, name: str) -> AppRecord | None:
        """The latest deployed app named `name` (None: none; ephemeral runs never count)."""
        apps = [a for a in self.apps.values()
                if a.state == api_pb2.APP_STATE_DEPLOYED and a.name == name]
        return max(apps, key=lambda a: a.published_at) if apps else None

    def function(self, tag: str, app: str | None = None) -> FunctionRecord:
        """The function of `tag` in the published app `app` (default: the latest function
        created with that tag). Raises KeyError naming the tags there are."""
        if app is not None:
            rec = self.deployed(app)
            if rec is None or tag not in rec.function_ids:
                raise KeyError(f"no function {tag!r} in app {app!r}")
            return self.functions[rec.function_ids[tag]]
        found = [f for f in self.functions.values() if f.tag == tag]
        if not found:
            have = sorted({f.tag for f in self.functions.values()})
            raise KeyError(f"no function {tag!r}; have {have}")
        return found[-1]

    def function_tags(self, app: str) -> set[str]:
        rec = self.deployed(app)
        return set(rec.function_ids) if rec else set()

    def class_tags(self, app: str) -> set[str]:
        rec = self.deployed(app)
        return set(rec.class_ids) if rec else set()

    def schedules(self, app: str) -> dict[str, tuple[str, str]]:
        """Tag -> (cron string, timezone) of the scheduled functions of the deployed `app`."""
        rec = self.deployed(app)
        out = {}
        for tag, fid in (rec.function_ids.items() if rec else ()):
            sched = self.functions[fid].schedule
            if sched is not None and sched.HasField("cron"):
                out[tag] = (sched.cron.cron_string, sched.cron.timezone)
        return out

    def dict_items(self, name: str) -> dict[Any, Any]:
        """The Dict `name` with keys and values deserialized (empty when it does not exist)."""
        rec = self.dicts.get(name)
        if rec is None:
            return {}
        return {deserialize(k, None): deserialize(v, None) for k, v in rec.data.items()}

    def updates_for(self, tag: str) -> list[dict[str, Any]]:
        """The autoscaler settings sent for the function `tag`, in order."""
        return [u.settings for u in self.autoscaler_updates if u.tag == tag]

    # ------------------------------------------------------------ setup by tests

    def add_secret(self, name: str, env: dict[str, str]) -> SecretRecord:
        """A named secret as `modal secret create NAME K=V ...` would make it."""
        rec = SecretRecord(new_id("st"), name, dict(env))
        self.secrets[name] = rec
        return rec
