"""Where Modal finds the objects `to_modal` generates, in a container.

Modal records each class/function as (module, top-level name) and, in the container, imports
that module and looks the name up. So the objects made by `to_modal` claim the module that
called it (``modal_app``) and are installed there as globals; importing that module in the
container runs `to_modal` again, which puts them back. We do not use ``serialized=True``
(cloudpickle): that would tie the container's Python to the deploying machine's and ship a
pickled closure instead of the source that is in git.
"""

from __future__ import annotations

import sys
from typing import Any

import modal

from floodway.errors import FloodwayError

# The module global naming the app whose Modal objects the module holds.
CLAIM_GLOBAL = "__floodway_modal_app__"


def claim(module: str, app_name: str) -> None:
    """Mark `module` as holding the Modal objects of app `app_name`. Raises FloodwayError when
    it already holds another app's: the generated names (``router``, ``run_job``, one class
    per endpoint) would be bound to the second app's objects, and the first app's containers,
    which look their function up by name, would run the second app's code. Running the same
    `to_modal` again (a re-import or reload) is allowed."""
    namespace = sys.modules[module].__dict__
    owner = namespace.get(CLAIM_GLOBAL)
    if owner is not None and owner != app_name:
        raise FloodwayError(f"{module} already holds the Modal objects of app {owner!r}; call "
                            f"to_modal once per module (put app {app_name!r} in its own file)")
    namespace[CLAIM_GLOBAL] = app_name


def make_global(obj: Any, name: str, module: str) -> None:
    """Give a factory-made class/function a top-level identity in `module` (see module doc)."""
    obj.__name__ = name
    obj.__qualname__ = name
    obj.__module__ = module


def install(module: str, name: str, obj: Any) -> None:
    """Bind `obj` as ``module.name`` so a container importing `module` finds it there."""
    namespace = sys.modules[module].__dict__
    existing = namespace.get(name)
    if existing is not None and not isinstance(existing, (modal.Cls, modal.Function)):
        raise FloodwayError(f"to_modal needs the global name {module}.{name} for a Modal object, "
                            f"but it is already bound to {existing!r}; rename it")
    namespace[name] = obj


__all__ = ["CLAIM_GLOBAL", "claim", "install", "make_global"]
