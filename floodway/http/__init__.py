"""The router's HTTP surface, shared by the local runtime and the Modal router:
`make_asgi_app` (`floodway.http.app`) over a `Backend` (`floodway.core.backend`) and a `Jobs`
(`floodway.core.job_queue`).

`make_asgi_app` is imported on first use (PEP 562): importing one of the package's modules
does not load Starlette and the metrics.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "make_asgi_app":
        from floodway.http.app import make_asgi_app

        return make_asgi_app
    raise AttributeError(f"module 'floodway.http' has no attribute {name!r}")


__all__ = ["make_asgi_app"]
