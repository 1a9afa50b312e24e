"""The decorator API: App, @app.endpoint, the Endpoint record and the Loaded model contract."""

from floodway.functions.app import App
from floodway.functions.endpoint import Endpoint
from floodway.functions.loaded import Loaded

__all__ = ["App", "Endpoint", "Loaded"]
