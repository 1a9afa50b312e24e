"""Autoscaler updates of a unit's Modal class, for the warmers and `floodway deploy`.

    autoscale = class_autoscale(classes)           # inside the deployed app
    autoscale = deployed_autoscale(app_name)       # from outside Modal
    autoscale(unit, {"min_containers": 2, ...})

An endpoint's class is served by one class service function; its settings are changed with
``Function.autoscaler.update(min_containers=, buffer_containers=, scaledown_window=)``
(modal 1.6: `modal.functions.FunctionAutoscalerManager.update`). Unspecified settings keep
their value, and a later deploy of the app resets all of them to the decorator's static
values. The older ``Cls().update_autoscaler(...)`` does the same but, since modal 1.6, warns
that it is deprecated in favour of ``Function.autoscaler.update``; `update_class_autoscaler`
uses the namespace where the client has it and falls back to ``update_autoscaler`` on older
clients (feature-detected, no version parsing). Modal is imported only when one runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from floodway.modal.contract import class_name

# (unit, settings) -> anything; settings are the autoscaler's keyword arguments.
Autoscale = Callable[[str, dict[str, int]], Any]


def update_class_autoscaler(cls: Any, settings: Mapping[str, int]) -> Any:
    """Apply `settings` to the autoscaler of Modal class `cls` (a `modal.Cls` without
    parameters) -> what Modal answers (its settings after the update).

    Through its class service function's ``autoscaler.update`` where the client has that
    namespace (modal 1.6: no deprecation warning), else ``cls().update_autoscaler``.
    """
    service_of = getattr(type(cls), "_get_class_service_function", None)
    service = service_of(cls) if callable(service_of) else None
    manager = getattr(service, "autoscaler", None) if service is not None else None
    if manager is not None and callable(getattr(manager, "update", None)):
        return manager.update(**settings)
    return cls().update_autoscaler(**settings)


def class_autoscale(classes: Mapping[str, Any]) -> Autoscale:
    """`Autoscale` through the app's own classes (inside a container of the deployed app,
    where they are hydrated): `update_class_autoscaler` on ``classes[unit]`` (`classes`
    keyed by unit: an endpoint's name, or a lane's key ``"embed:short"``)."""
    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return update_class_autoscaler(classes[endpoint], settings)
    return call


def deployed_autoscale(app_name: str) -> Autoscale:
    """`Autoscale` through the deployed app, looked up by name (from outside Modal):
    `update_class_autoscaler` on ``modal.Cls.from_name(app_name, class_name(unit))``
    (``"embed:short"`` -> ``EmbedShort``)."""
    import modal

    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return update_class_autoscaler(modal.Cls.from_name(app_name, class_name(endpoint)),
                                       settings)
    return call


__all__ = ["Autoscale", "class_autoscale", "deployed_autoscale", "update_class_autoscaler"]
