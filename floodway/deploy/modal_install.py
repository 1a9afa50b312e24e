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


__all__ = ["install", "make_global"]
