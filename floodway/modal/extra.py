"""The Modal client is an optional extra: whether it is there, and where it must not load.

``FLOODWAY_NO_MODAL`` (`NO_MODAL_ENV`) set: `to_modal` returns None and imports nothing of
Modal. Local worker processes and `floodway build` / `floodway serve` set it, because
importing the Modal client costs most of a second (of a local container's cold start, or of
a no-op rebuild) and they never use the Modal objects. The client is the ``modal`` extra
(`MODAL_EXTRA`): the serving path runs without it.
"""

from __future__ import annotations

import importlib.util

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


__all__ = ["MODAL_EXTRA", "NO_MODAL_ENV", "require_modal"]
