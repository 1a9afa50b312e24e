"""floodway on Modal: `to_modal(fw_app) -> modal.App`, grouped by where each part runs.

- `app/`: deploy time, on the deploying machine and again wherever Modal imports the deploy
  file: the objects `to_modal` makes (`app.objects`), their images, where Modal finds them
  (`app.install`), the build functions (`app.build`, whose bodies run on Modal GPUs).
- `router/`: the router function's container: `ModalBackend` and its calls, streams,
  sequences, per-class state and response cache.
- `worker/`: the GPU class of each endpoint (or lane), in its container.
- `warmers/`: which cron functions an app gets (`warmers.plan`) and what they apply.
- `jobs.py`: async jobs (the ``run_job`` function and the router's `ModalJobs`).
- `deploy.py` (`floodway deploy`: credentials, the router's keys Secret, the deploy and the
  re-applied warm targets), `autoscaler.py` (autoscaler updates of a class).
- Shared by several of them: `contract.py` (what a GPU class and its callers agree on),
  `kv.py` (Dict interfaces), `stats.py` (what the classes and routers measure),
  `traffic.py` (per-minute arrivals), `extra.py` (the optional Modal client).

`modal` is imported only when `to_modal` runs, and not at all where ``FLOODWAY_NO_MODAL`` is
set (`floodway.modal.extra`). The user's import stays ``from floodway.deploy import to_modal``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from floodway.modal.extra import MODAL_EXTRA, NO_MODAL_ENV, require_modal

if TYPE_CHECKING:
    import modal

    from floodway.functions.app import App


def to_modal(fw_app: App, **kwargs: Any) -> modal.App | None:
    """The `modal.App` for `fw_app`; see `floodway.modal.app.objects.to_modal`.

    Returns None where ``FLOODWAY_NO_MODAL`` is set (no Modal object is needed there).
    """
    if os.environ.get(NO_MODAL_ENV):
        return None
    require_modal("to_modal")
    from floodway.modal.app import objects

    module = kwargs.pop("module", None) or sys._getframe(1).f_globals["__name__"]
    return objects.to_modal(fw_app, module=module, **kwargs)


__all__ = ["MODAL_EXTRA", "NO_MODAL_ENV", "require_modal", "to_modal"]
