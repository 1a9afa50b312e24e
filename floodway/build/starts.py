"""What the artifact store knows of an endpoint's cold starts before a router times one: the
build's cold-start probe (`Manifest.cold_start_s`, `floodway.build.probe`) and the starts
earlier `floodway serve` runs measured of the same build, kept in
``<store>/<endpoint>/.cold_starts.json`` (``{"build_key", "samples"}``: the last few, of the
latest build only; a new build starts afresh).

    known = known_starts(store, "embed")      # KnownStarts(build_key, probe_s, samples)
    remember_start(store, "embed", build_key, seconds)

Both are advisory: a store that cannot be read or written gives and keeps nothing.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from floodway.build.store import ArtifactStore
from floodway.core.estimators import COLD_SAMPLES
from floodway.errors import FloodwayError

STARTS_FILE = ".cold_starts.json"


@dataclass(frozen=True)
class KnownStarts:
    build_key: str | None = None        # the latest build's (None: no build readable)
    probe_s: float | None = None        # its probe's seconds (None: not measured)
    samples: tuple[float, ...] = ()     # its starts measured by earlier runs


def _seconds(v: object) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def known_starts(store: ArtifactStore, endpoint: str) -> KnownStarts:
    """The cold starts `store` knows of `endpoint`'s latest build (see the module doc)."""
    try:
        folder = store.latest(endpoint)
        manifest = json.loads((folder / "manifest.json").read_text())
    except (FloodwayError, OSError, ValueError):
        return KnownStarts()
    probe = _seconds(manifest.get("cold_start_s")) if isinstance(manifest, dict) else None
    samples: tuple[float, ...] = ()
    try:
        kept = json.loads((store.root / endpoint / STARTS_FILE).read_text())
        if isinstance(kept, dict) and kept.get("build_key") == folder.name:
            samples = tuple(s for s in map(_seconds, kept.get("samples") or ()) if s is not None)
    except (OSError, ValueError, TypeError):
        pass
    return KnownStarts(folder.name, probe, samples[-COLD_SAMPLES:])


def remember_start(store: ArtifactStore, endpoint: str, build_key: str, seconds: float,
                   *, keep: int = COLD_SAMPLES) -> None:
    """Add a start of `build_key` that took `seconds` to the ones kept (the last `keep`; those
    of another build are dropped), replaced atomically. Never raises."""
    path = store.root / endpoint / STARTS_FILE
    if _seconds(seconds) is None or not (store.root / endpoint / build_key).is_dir():
        return
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    samples = list(kept.get("samples") or ()) if isinstance(kept, dict) and kept.get(
        "build_key") == build_key else []
    record = {"build_key": build_key, "samples": [*samples, round(seconds, 4)][-keep:]}
    tmp = path.with_name(f"{STARTS_FILE}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


__all__ = ["STARTS_FILE", "KnownStarts", "known_starts", "remember_start"]
