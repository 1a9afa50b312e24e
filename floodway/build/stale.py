"""Whether the builds about to be served were made from the endpoints as they are defined now.

A build's key hashes its source files, toolchain and hardware as well as the endpoint's
definition, so a serving machine cannot recompute it without fetching the model and having
the build tools. What can change between `floodway build` and `floodway serve` without
anyone noticing is the definition, and the manifest records it: every `fw.Build` field, the
model source, its task and `allow_random_head`, and the runtime (floodway's or the
endpoint's own, `load=`). `stale_builds` compares those field by field and names each change.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from floodway.build.store import ArtifactStore
from floodway.errors import ArtifactError

log = logging.getLogger("floodway.serve")
MANIFEST = "manifest.json"


def _plain(v: Any) -> Any:
    """`v` as JSON gives it back (tuples are lists), for comparing with a manifest's."""
    return json.loads(json.dumps(v, default=str))


def changes(ep: Any, manifest: dict[str, Any], where: str) -> list[str]:
    """How `ep` (as defined in `where`) differs from what the build with `manifest` was made
    from, one phrase per changed field (empty: the build is current). A field the manifest
    does not record (a build made before the field existed) counts as its default."""
    out = []
    built = manifest.get("build") or {}
    for f in dataclasses.fields(ep.build):
        now = _plain(getattr(ep.build, f.name))
        default = f.default if f.default is not dataclasses.MISSING else None
        was = _plain(built.get(f.name, default))
        if now != was:
            out.append(f"Build({f.name}) is {now!r} in {where} but the artifacts were built "
                       f"with {was!r}")
    src = ep.model
    source = manifest.get("source") or {}
    display = src.display if src is not None else "none"
    if display != source.get("display", display):
        out.append(f"the model source is {display} in {where} but the artifacts were built "
                   f"from {source.get('display')}")
    task = manifest.get("task")
    if src is not None and isinstance(task, dict) and src.task != task.get("name", src.task):
        out.append(f"the task is {src.task!r} in {where} but the artifacts were built for "
                   f"{task.get('name')!r}")
    runtime = "own" if ep.own_runtime else "floodway"
    if runtime != manifest.get("runtime", "floodway"):
        hook = "set" if ep.load is not None else "not set"
        out.append(f"the runtime is {runtime!r} in {where} (load= {hook}) but the artifacts "
                   f"were built for {manifest.get('runtime')!r}")
    random_head = bool(getattr(src, "allow_random_head", False))
    if random_head != bool(source.get("allow_random_head", False)):
        out.append(f"allow_random_head is {random_head} in {where} but the artifacts were "
                   f"built with {not random_head}")
    return out


def stale_builds(eps: Iterable[Any], store: ArtifactStore, where: str) -> dict[str, list[str]]:
    """Each endpoint of `eps` whose latest build in `store` was made from another definition
    than its current one in `where` -> the changes (`changes`). Raises ArtifactError, with the
    command to run, for an endpoint with no build at all (`ArtifactStore.latest`)."""
    out = {}
    for ep in eps:
        folder: Path = store.latest(ep.name)
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError):
            continue   # the container's loader names what is wrong with it
        if isinstance(manifest, dict) and (found := changes(ep, manifest, where)):
            out[ep.name] = found
    return out


def check_builds(eps: Iterable[Any], store: ArtifactStore, where: str, *,
                 allow_stale: bool = False) -> None:
    """Refuse (ArtifactError naming every stale endpoint and each change, with the command
    that rebuilds them) to serve builds made from another definition of their endpoints;
    with `allow_stale`, log the same as a warning and go on."""
    stale = stale_builds(eps, store, where)
    if not stale:
        return
    lines = "; ".join(f"endpoint {name!r}: {', '.join(found)}" for name, found in stale.items())
    if allow_stale:
        log.warning("serving stale builds (--allow-stale): %s; rebuild with `floodway build "
                    "%s`", lines, where)
        return
    raise ArtifactError(f"{lines}: run `floodway build {where}` (or pass --allow-stale to "
                        f"serve the old artifacts anyway)")


__all__ = ["changes", "check_builds", "stale_builds"]
