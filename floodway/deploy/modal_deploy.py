"""Talking to Modal for the warmers and `floodway deploy`: credentials, the deploy itself,
and the ``update_autoscaler`` call on an endpoint's class.

    autoscale = class_autoscale(classes)           # inside the deployed app
    autoscale = deployed_autoscale(app_name)       # from outside Modal
    autoscale(endpoint, {"min_containers": 2, ...})

The call is ``Cls().update_autoscaler(min_containers=, buffer_containers=,
scaledown_window=)`` on the endpoint's class: unspecified settings keep their value, and a
later deploy of the app resets all of them to the decorator's static values
(https://modal.com/docs/reference/modal.Cls, ``update_autoscaler``). In modal 1.6 the Cls
method goes through the service function's ``update_autoscaler``, which warns that it is
deprecated in favour of ``Function.autoscaler.update`` (Cls has no such namespace yet): a log
line, not an error. Modal is imported only when one of these runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# (endpoint name, settings) -> anything; settings are update_autoscaler's keyword arguments.
Autoscale = Callable[[str, dict[str, int]], Any]


def class_autoscale(classes: Mapping[str, Any]) -> Autoscale:
    """`Autoscale` through the app's own classes (inside a container of the deployed app,
    where they are hydrated): ``classes[endpoint]().update_autoscaler(**settings)``."""
    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return classes[endpoint]().update_autoscaler(**settings)
    return call


def deployed_autoscale(app_name: str) -> Autoscale:
    """`Autoscale` through the deployed app, looked up by name (from outside Modal):
    ``modal.Cls.from_name(app_name, ClassName)().update_autoscaler(**settings)``."""
    import modal

    from floodway.deploy.modal_objects import class_name

    def call(endpoint: str, settings: dict[str, int]) -> Any:
        return modal.Cls.from_name(app_name, class_name(endpoint))().update_autoscaler(
            **settings)
    return call


def credentials_configured(get: Callable[[str], Any] | None = None) -> bool:
    """Whether Modal credentials are configured: a token id and secret, or an OAuth refresh
    token, client id and secret, from ``MODAL_*`` variables or the active ``~/.modal.toml``
    profile (modal.config's resolution). `get`: a config lookup (default Modal's)."""
    if get is None:
        import modal.config

        get = modal.config.config.get
    token = get("token_id") and get("token_secret")
    oauth = get("oauth_refresh_token") and get("oauth_client_id") and get("oauth_client_secret")
    return bool(token or oauth)


def modal_deploy(module_app: Any) -> None:
    """Deploy `module_app` as ``modal deploy`` does, with Modal's output shown
    (``App.deploy()``, https://modal.com/docs/reference/modal.App#deploy)."""
    import modal

    with modal.enable_output():
        module_app.deploy()


__all__ = ["Autoscale", "class_autoscale", "credentials_configured", "deployed_autoscale",
           "modal_deploy"]
