"""Deployers: turn a floodway `App` into a platform's objects (`to_modal` -> `modal.App`).

`modal` is imported only when `to_modal` runs, and not at all where ``FLOODWAY_NO_MODAL`` is
set: local worker processes and `floodway build` / `floodway serve` set it, because importing
the Modal client costs most of a second (of a local container's cold start, or of a no-op
rebuild) and they never use the Modal objects. The Modal client is the ``modal`` extra
(``pip install 'floodway[modal]'``): the serving path runs without it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import modal

    from floodway.functions.app import App

NO_MODAL_ENV = "FLOODWAY_NO_MODAL"
# What installs the Modal client floodway deploys with.
MODAL_EXTRA = "pip install 'floodway[modal]'"


def require_modal(what: str) -> None:
    """Raise FloodwayError naming the extra to install when the Modal client is missing
    (`what`: what needs it, e.g. "floodway deploy")."""
    if importlib.util.find_spec("modal") is None:
        from floodway.errors import FloodwayError

        raise FloodwayError(f"{what} needs the Modal client, which is not installed: "
                            f"{MODAL_EXTRA}")


def to_modal(fw_app: App, **kwargs: Any) -> modal.App | None:
    """The `modal.App` for `fw_app`; see `floodway.deploy.modal_objects.to_modal`.

    Returns None where ``FLOODWAY_NO_MODAL`` is set (no Modal object is needed there).
    """
    if os.environ.get(NO_MODAL_ENV):
        return None
    require_modal("to_modal")
    from floodway.deploy import modal_objects

    module = kwargs.pop("module", None) or sys._getframe(1).f_globals["__name__"]
    return modal_objects.to_modal(fw_app, module=module, **kwargs)


__all__ = ["MODAL_EXTRA", "NO_MODAL_ENV", "require_modal", "to_modal"]
