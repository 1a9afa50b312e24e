"""The response cache on Modal: the build key the router keys outputs by, and the shared
tier's `modal.Dict`.

    builds = DeployedBuilds(store_root)        # the artifact Volume, mounted read-only
    builds.key(endpoint) -> str | None         # the build LATEST named when first read
    shared_cache(fw_app) -> ModalDictKV | None # ``floodway-cache``, when an endpoint shares

A GPU class serves the build that was latest when its memory snapshot was taken, and a new
build reaches the classes only with the next ``modal deploy`` (docs/modal.md), which also
starts new router containers. So a router reads each endpoint's ``LATEST`` once, from the
Volume `to_modal` mounts read-only in the router, and keeps it for its life: its own memory
tier then never mixes builds. An unreadable pointer (no build yet) is read again after
`RETRY_S`; until then that endpoint is not cached.

Known gap, for the shared tier only (it outlives deploys): a router container that starts
after a build was published but before the deploy that serves it keys the old build's
outputs under the new key. Publish and deploy together (`floodway deploy` does), or leave
``Cache(shared=False)`` (the default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from floodway.build.store import ArtifactStore
from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.modal.kv import ModalDictKV

CACHE_DICT = "floodway-cache"
RETRY_S = 30.0


class DeployedBuilds:
    """Each endpoint's build key as the store at `root` names it, read on first ask and
    kept (see the module doc); `monotonic()`: seconds, for the retry of a missing one."""

    def __init__(self, root: str | Path, *, monotonic: Callable[[], float] = time.monotonic):
        self.store, self.monotonic = ArtifactStore(root), monotonic
        self._keys: dict[str, str] = {}
        self._tried: dict[str, float] = {}

    def key(self, endpoint: str) -> str | None:
        """The endpoint's build key, None while none can be read."""
        if endpoint in self._keys:
            return self._keys[endpoint]
        now = self.monotonic()
        if now - self._tried.get(endpoint, -RETRY_S) < RETRY_S:
            return None
        self._tried[endpoint] = now
        try:
            self._keys[endpoint] = self.store.latest(endpoint).name
        except (FloodwayError, OSError):
            return None
        return self._keys[endpoint]


def shared_cache(fw_app: App) -> ModalDictKV | None:
    """The shared tier's store, when some endpoint of `fw_app` asks for it
    (``fw.Cache(shared=True)``); None otherwise."""
    if any(ep.cache is not None and ep.cache.shared for ep in fw_app):
        return ModalDictKV(CACHE_DICT)
    return None


__all__ = ["CACHE_DICT", "RETRY_S", "DeployedBuilds", "shared_cache"]
