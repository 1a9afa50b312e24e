"""Find the App (and optionally one endpoint) named by a CLI argument.

``APP`` is a file path (``modal_app.py``) or a module name (``pkg.mod``), optionally followed by
``::ENDPOINT``. The module must hold exactly one `floodway.App` at top level, or name it
with ``:VAR`` (``modal_app.py:endpoints``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from floodway.errors import ConfigError, FloodwayError
from floodway.functions.app import App, collecting
from floodway.functions.endpoint import Endpoint


def import_target(target: str):  # -> module
    path = Path(target)
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise FloodwayError(f"app file {target} does not exist")
        name = path.stem
        parent = str(path.resolve().parent)
        if parent not in sys.path:
            sys.path.insert(0, parent)
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__file__", None) == str(path.resolve()):
            return loaded
        spec = importlib.util.spec_from_file_location(name, path.resolve())
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(target)


def load_app(spec: str) -> tuple[App, list[Endpoint]]:
    """Resolve ``FILE_OR_MODULE[:VAR][::ENDPOINT]`` to an App and the endpoints it selects.

    Raises FloodwayError naming what was not found and what exists instead; ConfigError
    listing the problems of every endpoint the file defines wrongly (not only the first).
    """
    target, _, ep_name = spec.partition("::")
    var = None
    if ":" in target and not Path(target).exists():
        target, _, var = target.rpartition(":")
    with collecting() as errors:
        module = import_target(target)
    if errors:
        raise ConfigError.combine(errors, target)
    if var:
        app = getattr(module, var, None)
        if not isinstance(app, App):
            raise FloodwayError(f"{target}:{var} is not a floodway.App")
    else:
        apps = [v for v in vars(module).values() if isinstance(v, App)]
        if len(apps) != 1:
            raise FloodwayError(f"{target} defines {len(apps)} floodway.App objects; expected "
                                f"exactly one, or name it as {target}:VARIABLE")
        app = apps[0]
    if ep_name:
        try:
            return app, [app[ep_name]]
        except KeyError as e:
            raise FloodwayError(str(e.args[0])) from None
    return app, list(app)
