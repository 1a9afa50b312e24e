"""Autoscaler updates of a class, offline: through ``Function.autoscaler`` (the real modal 1.6
objects, their client replaced by a recording stub), with the fallback for older clients,
and by name in a deployed app."""

from __future__ import annotations

import types
import warnings

import modal
import pytest
from modal.exception import DeprecationError
from modal_proto import api_pb2

from floodway.modal import autoscaler
from tests.unit.modal.test_deploy import _app, _deploy_file, _impl

SETTINGS = {"min_containers": 2, "buffer_containers": 1, "scaledown_window": 90}


class _Stub:
    """The client's gRPC stub, recording ``FunctionUpdateSchedulingParams``."""

    def __init__(self):
        self.requests: list = []

    async def FunctionUpdateSchedulingParams(self, req):  # noqa: N802 - the RPC's name
        self.requests.append(req)
        return api_pb2.FunctionUpdateSchedulingParamsResponse(current_settings=req.settings)


def _hydrated_class(tmp_path, monkeypatch, name: str):
    """A to_modal class whose service function is hydrated as in a deployed container, its
    client a recording stub."""
    module = _deploy_file(tmp_path, name, _app(tmp_path), monkeypatch)
    stub = _Stub()
    service = _impl(module.Echo._get_class_service_function())
    service._hydrate("fu-echo", types.SimpleNamespace(_stub=stub, _snapshotted=False),
                     api_pb2.FunctionHandleMetadata(function_name="Echo.*"))
    return module, stub


def test_autoscaler_update_uses_the_current_api_without_warning(tmp_path, monkeypatch):
    module, stub = _hydrated_class(tmp_path, monkeypatch, "fw_deploy_autoscale")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        autoscaler.class_autoscale({"echo": module.Echo})("echo", dict(SETTINGS))
    assert [w for w in seen if issubclass(w.category, (DeprecationWarning, DeprecationError))] \
        == []
    (req,) = stub.requests
    assert req.function_id == "fu-echo"
    assert (req.settings.min_containers, req.settings.buffer_containers,
            req.settings.scaledown_window) == (2, 1, 90)
    assert not req.settings.HasField("max_containers")      # left as it is
    # The same client's older call warns: what the check above would have caught.
    with pytest.warns(DeprecationError, match="autoscaler.update"):
        module.Echo._get_class_service_function().update_autoscaler(min_containers=1)


def test_autoscaler_falls_back_on_older_clients():
    calls: list = []

    class OldObj:
        def update_autoscaler(self, **settings):
            calls.append(("update_autoscaler", settings))
            return "old"

    class OldCls:                       # no class service function accessor
        def __call__(self):
            return OldObj()

    class NoNamespaceCls(OldCls):       # a service function without ``autoscaler``
        def _get_class_service_function(self):
            return types.SimpleNamespace()

    assert autoscaler.update_class_autoscaler(OldCls(), SETTINGS) == "old"
    assert autoscaler.update_class_autoscaler(NoNamespaceCls(), SETTINGS) == "old"
    assert calls == [("update_autoscaler", SETTINGS)] * 2


def test_deployed_autoscale_looks_the_class_up_by_name(monkeypatch):
    updates: list = []
    service = types.SimpleNamespace(autoscaler=types.SimpleNamespace(
        update=lambda **settings: updates.append(settings)))

    class Looked:
        def __init__(self, app, name):
            self.where = (app, name)

        def _get_class_service_function(self):
            updates.append(self.where)
            return service

    monkeypatch.setattr(modal.Cls, "from_name", Looked)
    autoscaler.deployed_autoscale("floodway-demo")("big-model_v2", dict(SETTINGS))
    assert updates == [("floodway-demo", "BigModelV2"), SETTINGS]
