"""Deployers: turn a floodway `App` into a platform's objects (`to_modal` -> `modal.App`)."""

from floodway.deploy.modal_objects import ModalBackend, to_modal

__all__ = ["ModalBackend", "to_modal"]
