"""floodway: serverless GPU model endpoints that survive traffic spikes.

Define endpoints with `App` and `@app.endpoint(...)`; build cold-start artifacts with
`floodway build`; serve locally with `floodway serve`; deploy with `modal deploy`.
"""

from floodway.config import Batching, Build, HFModel, LocalModel, Route, WarmPool, Window
from floodway.errors import (
    ArtifactError,
    BuildError,
    ConfigError,
    EndpointError,
    FloodwayError,
    Problem,
    RequestError,
    Unavailable,
)
from floodway.functions import App, Endpoint, Loaded

__version__ = "0.1.0"

__all__ = [
    "App", "ArtifactError", "Batching", "Build", "BuildError", "ConfigError", "Endpoint",
    "EndpointError", "Unavailable",
    "FloodwayError", "HFModel", "Loaded", "LocalModel", "Problem", "RequestError", "Route",
    "WarmPool", "Window", "__version__",
]
