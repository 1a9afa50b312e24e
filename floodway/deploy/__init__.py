"""Deployers: turn a floodway `App` into a platform's objects (`to_modal` -> `modal.App`).

`modal` is imported only when `to_modal` runs, and not at all inside a local worker process
(``FLOODWAY_LOCAL_WORKER`` set): importing the Modal client costs a local container's cold
start most of a second and the container never uses it.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import modal

    from floodway.functions.app import App

LOCAL_WORKER_ENV = "FLOODWAY_LOCAL_WORKER"


def to_modal(fw_app: App, **kwargs: Any) -> modal.App | None:
    """The `modal.App` for `fw_app`; see `floodway.deploy.modal_objects.to_modal`.

    Returns None inside a local worker process, where no Modal object is needed.
    """
    if os.environ.get(LOCAL_WORKER_ENV):
        return None
    from floodway.deploy import modal_objects

    module = kwargs.pop("module", None) or sys._getframe(1).f_globals["__name__"]
    return modal_objects.to_modal(fw_app, module=module, **kwargs)


__all__ = ["LOCAL_WORKER_ENV", "to_modal"]
