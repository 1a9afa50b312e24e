"""Per-stage build cache: each stage's output kept under ``<store>/.stages/<stage>/<key>/``.

A stage's key hashes its inputs (the previous stage's key plus its own settings and tool
versions), so changing, say, only the TensorRT profile re-runs compile and verify but reuses
snapshot, export and optimize. Outputs are hard-linked into the build being assembled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

DONE = ".done"


def stage_key(*parts: object) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class StageCache:
    def __init__(self, store_root: Path):
        self.root = Path(store_root) / ".stages"

    def run(self, stage: str, key: str, produce: Callable[[Path], None]) -> tuple[Path, bool]:
        """The folder holding `stage`'s output for `key`, and whether it was already there.

        `produce(folder)` writes the output into a fresh folder, which is renamed into place
        only once complete (a crash mid-stage leaves nothing that looks finished).
        """
        final = self.root / stage / key
        if (final / DONE).is_file():
            return final, True
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
        try:
            produce(tmp)
            (tmp / DONE).touch()
            if final.exists():   # a stale partial folder, or a concurrent build won
                shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final, False


def link_into(src: Path, dst: Path) -> None:
    """Hard-link (or copy, across filesystems) every file of `src` into `dst`. A symbolic
    link (a Hugging Face cache snapshot is made of them) is followed: its target's bytes
    are linked, never the link, whose relative target would dangle in `dst`."""
    for f in src.rglob("*"):
        if not f.is_file() or f.name == DONE:
            continue
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        real = f.resolve() if f.is_symlink() else f
        try:
            os.link(real, target)
        except OSError:
            shutil.copyfile(real, target)
