"""The `floodway.modal` package: the user's import, and the real Modal client inside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import floodway
import floodway.deploy
import floodway.modal


def test_the_users_import_is_the_packages_to_modal():
    from floodway.deploy import to_modal

    assert to_modal is floodway.modal.to_modal
    assert floodway.deploy.NO_MODAL_ENV == floodway.modal.NO_MODAL_ENV == "FLOODWAY_NO_MODAL"
    assert floodway.deploy.__all__ == floodway.modal.__all__


def test_import_modal_inside_the_package_is_the_modal_client():
    """No module of `floodway.modal` shadows the ``modal`` library it deploys with."""
    from floodway.modal.app import images, objects

    package = Path(floodway.__file__).parent
    for module in (images, objects):
        assert module.modal is sys.modules["modal"]
        assert package not in Path(module.modal.__file__).resolve().parents
        assert hasattr(module.modal, "App") and hasattr(module.modal, "Cls")


def test_importing_the_package_imports_no_modal():
    code = ("import sys, floodway.deploy, floodway.modal, floodway.modal.extra; "
            "print('modal' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"
