"""The user's import of the Modal deployer: ``from floodway.deploy import to_modal``.

The deployer itself is `floodway.modal`; this package names its public API.
"""

from floodway.modal import MODAL_EXTRA, NO_MODAL_ENV, require_modal, to_modal

__all__ = ["MODAL_EXTRA", "NO_MODAL_ENV", "require_modal", "to_modal"]
