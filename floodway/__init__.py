"""floodway: serverless GPU model endpoints that survive traffic spikes.

Define endpoints with `App` and `@app.endpoint(...)`; build cold-start artifacts with
`floodway build`; serve locally with `floodway serve`; deploy with `modal deploy`.

Names are imported on first use (PEP 562), so that a container process importing
`floodway.runtime.worker` starts its artifact prefetch before numpy and friends load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "App": "floodway.functions.app",
    "Endpoint": "floodway.functions.endpoint",
    "Loaded": "floodway.functions.loaded", "Prompt": "floodway.functions.prompts",
    "Array": "floodway.functions.items", "ArraySpec": "floodway.functions.items",
    "ImageSpec": "floodway.functions.items", "Image": "floodway.functions.images",
    "Batching": "floodway.config",
    "Cache": "floodway.config",
    "Build": "floodway.config",
    "Generation": "floodway.config",
    "HFModel": "floodway.config",
    "LocalModel": "floodway.config",
    "Lane": "floodway.config",
    "Recycle": "floodway.config",
    "Route": "floodway.config",
    "WarmPool": "floodway.config",
    "Window": "floodway.config",
    "TorchModel": "floodway.config",
    "TensorSpec": "floodway.config",
    "Artifacts": "floodway.build.artifacts",
    "Client": "floodway.client", "AsyncClient": "floodway.client",
    "ArtifactError": "floodway.errors",
    "BuildError": "floodway.errors",
    "ConfigError": "floodway.errors",
    "EndpointError": "floodway.errors",
    "FloodwayError": "floodway.errors",
    "Problem": "floodway.errors",
    "RequestError": "floodway.errors",
    "Unauthorized": "floodway.errors",
    "Unavailable": "floodway.errors",
}

__all__ = [
    "Array", "ArraySpec", "Artifacts", "Image", "ImageSpec", "TensorSpec", "TorchModel",
    "App", "ArtifactError", "AsyncClient", "Client",
    "Batching", "Build", "BuildError", "Cache", "ConfigError",
    "Endpoint",
    "EndpointError", "FloodwayError", "Generation", "HFModel", "Lane", "Loaded", "LocalModel",
    "Problem",
    "Prompt", "Recycle",
    "RequestError", "Route", "Unauthorized", "Unavailable", "WarmPool", "Window", "__version__",
]

if TYPE_CHECKING:
    from floodway.build.artifacts import Artifacts
    from floodway.client import AsyncClient, Client
    from floodway.config import (
        Batching,
        Build,
        Cache,
        Generation,
        HFModel,
        Lane,
        LocalModel,
        Recycle,
        Route,
        TensorSpec,
        TorchModel,
        WarmPool,
        Window,
    )
    from floodway.errors import (
        ArtifactError,
        BuildError,
        ConfigError,
        EndpointError,
        FloodwayError,
        Problem,
        RequestError,
        Unauthorized,
        Unavailable,
    )
    from floodway.functions.app import App
    from floodway.functions.endpoint import Endpoint
    from floodway.functions.images import Image
    from floodway.functions.items import Array, ArraySpec, ImageSpec
    from floodway.functions.loaded import Loaded
    from floodway.functions.prompts import Prompt


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'floodway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
