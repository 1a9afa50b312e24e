"""The artifact store: ``<root>/<endpoint>/<build key>/`` folders and a LATEST pointer.

Publishing is atomic: a build is written into a staging folder beside its final place and
renamed into it; then ``LATEST`` is replaced by rename too. A reader never sees half a build.

Root: ``FLOODWAY_STORE`` if set, else ``$XDG_CACHE_HOME/floodway/artifacts`` (default
``~/.cache/floodway/artifacts``); on Modal, the artifact Volume's mount path.
"""

from __future__ import annotations

import os
from pathlib import Path

LATEST = "LATEST"


def default_root() -> Path:
    env = os.environ.get("FLOODWAY_STORE")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "floodway" / "artifacts"


class ArtifactStore:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def build_dir(self, endpoint: str, key: str) -> Path:
        return self.root / endpoint / key

    def staging_dir(self, endpoint: str) -> Path:
        import tempfile

        base = self.root / endpoint
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".staging-", dir=base))

    def publish(self, endpoint: str, key: str, staging: Path) -> Path:
        """Move a finished staging folder to its build-key folder and point LATEST at it."""
        import shutil

        final = self.build_dir(endpoint, key)
        if final.exists():
            shutil.rmtree(staging, ignore_errors=True)
        else:
            os.rename(staging, final)
        self._point_latest(endpoint, key)
        return final

    def _point_latest(self, endpoint: str, key: str) -> None:
        base = self.root / endpoint
        tmp = base / f".{LATEST}.{os.getpid()}.{os.urandom(8).hex()}"
        tmp.write_text(key + "\n")
        os.replace(tmp, base / LATEST)

    def latest(self, endpoint: str) -> Path:
        """The folder of the endpoint's latest published build.

        Raises ArtifactError (with the command to run) when there is none.
        """
        pointer = self.root / endpoint / LATEST
        if not pointer.is_file():
            raise _artifact_error(f"no build of endpoint {endpoint!r} in {self.root}; run "
                                  f"`floodway build APP` first (or set FLOODWAY_STORE)")
        folder = self.build_dir(endpoint, pointer.read_text().strip())
        if not folder.is_dir():
            raise _artifact_error(f"{pointer} names build {folder.name}, which is missing")
        return folder


def _artifact_error(message: str) -> Exception:
    # Imported on failure only: a container resolves its build before its prefetch starts,
    # and floodway.errors (dataclasses) would delay that by ~3 ms.
    from floodway.errors import ArtifactError

    return ArtifactError(message)
