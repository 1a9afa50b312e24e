"""Fetch stage: resolve a model source to a complete local HF-format folder.

`HFModel` goes through `huggingface_hub.snapshot_download` with a pinned commit and
`allow_patterns`, so it honours ``HF_HUB_OFFLINE`` / ``HF_HUB_CACHE`` like any Hub user.
huggingface_hub does not prove an offline snapshot complete, so `check_complete` does:
the files the source's task needs (config, and a tokenizer for text or
preprocessor_config.json for images: `floodway.tasks.base.Task.required_files`) and weights
present, sharded indexes whole, safetensors headers consistent with file sizes (a truncated
download is caught here, not at load).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from floodway.build.prefetch import sha256_path
from floodway.config import HFModel, LocalModel
from floodway.errors import BuildError

WEIGHT_PATTERNS = ["*.safetensors", "*.safetensors.index.json"]
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
META_PATTERNS = ["*.json", "*.txt", "tokenizer*", "*.model"]
# What a text model's folder must hold: config.json, and tokenizer.json or vocab.txt.
TEXT_FILES: tuple[tuple[str, ...], ...] = (("config.json",), ("tokenizer.json", "vocab.txt"))


def required_files(source: HFModel | LocalModel) -> tuple[tuple[str, ...], ...]:
    """The files `source`'s task needs (each inner tuple: one of them)."""
    from floodway import tasks

    return tasks.get(source.task).required_files()


def allow_patterns(source: HFModel | LocalModel) -> list[str]:
    """The files a build needs from a repo: weights, config, tokenizer (+pickles if opted in)."""
    pats = META_PATTERNS + WEIGHT_PATTERNS
    if source.allow_pickle:
        pats += ["*.bin", "*.pt", "*.bin.index.json"]
    return pats


def fetch(source: HFModel | LocalModel, *, cache_dir: str | Path | None = None,
          prefer_cache: bool = True, own_runtime: bool = False) -> Path:
    """Return a complete local folder for `source`.

    `prefer_cache`: use an already complete cached snapshot of the pinned commit without
    calling the Hub client (see `cached_snapshot`). `own_runtime`: the endpoint loads the
    files itself (`load=`), so no task's files are required (a diffusers repository, say, keeps
    its weights in subfolders); safetensors files anywhere in it must still be whole.

    Raises BuildError('fetch') when the source cannot be found (offline and not cached, a wrong
    revision) or is incomplete.
    """
    if isinstance(source, LocalModel):
        folder = Path(source.path).resolve()
        if not folder.is_dir():
            raise BuildError("fetch", f"local model folder {folder} does not exist")
    elif prefer_cache and (cached := cached_snapshot(source, cache_dir,
                                                     own_runtime=own_runtime)) is not None:
        folder = cached
    else:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        try:
            folder = Path(snapshot_download(
                source.repo_id, revision=source.revision, allow_patterns=allow_patterns(source),
                cache_dir=str(cache_dir) if cache_dir else None))
        except LocalEntryNotFoundError as e:
            raise BuildError("fetch", f"{source.display} is not in the Hub cache "
                                      f"({hub_cache_dir(cache_dir)}) and the Hub cannot be "
                                      f"reached ({e}). Connect, or put a local copy of the "
                                      "repo in that cache: `floodway hub-seed FOLDER REPO_ID "
                                      "REVISION` (HF_HUB_CACHE or --cache-dir pick the cache)."
                              ) from e
        except HfHubHTTPError as e:
            raise BuildError("fetch", f"{source.display}: {e}") from e
    check_source(folder, source, own_runtime=own_runtime)
    return folder


def check_source(folder: Path, source: HFModel | LocalModel, *, own_runtime: bool = False,
                 ) -> None:
    """`check_complete` with what `source` needs (see `fetch`'s `own_runtime`)."""
    if own_runtime:
        check_complete(folder, allow_pickle=source.allow_pickle, required=(), weights=False)
    else:
        check_complete(folder, allow_pickle=source.allow_pickle,
                       required=required_files(source))


def hub_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The Hub cache folder huggingface_hub uses (HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub), computed without importing huggingface_hub."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(home) / "hub"


def cached_snapshot(source: HFModel, cache_dir: str | Path | None = None, *,
                    own_runtime: bool = False) -> Path | None:
    """The cached snapshot of a pinned commit, if it is already complete.

    A commit sha is immutable, so a complete cached snapshot is exactly what
    `snapshot_download` would return; skipping the call (and the huggingface_hub import)
    keeps an unchanged rebuild well under a second.
    """
    snap = (hub_cache_dir(cache_dir) / ("models--" + source.repo_id.replace("/", "--"))
            / "snapshots" / source.revision)
    if not snap.is_dir():
        return None
    try:
        check_source(snap, source, own_runtime=own_runtime)
    except BuildError:
        return None   # let snapshot_download repair or report it
    return snap


def safetensors_payload_end(path: Path) -> int:
    """Bytes a safetensors file must have according to its own header (8 + header + data).

    Raises BuildError when the header is unreadable. Format: little-endian u64 header length,
    JSON header with per-tensor data_offsets (https://github.com/huggingface/safetensors).
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise BuildError("fetch", f"{path.name}: {size} bytes, too short for a "
                                      "safetensors header")
        (hlen,) = struct.unpack("<Q", raw)
        if hlen > size - 8 or hlen > 100_000_000:
            raise BuildError("fetch", f"{path.name}: header length {hlen} exceeds file size {size}"
                                      " (truncated or not safetensors)")
        try:
            header = json.loads(f.read(hlen))
        except ValueError as e:
            raise BuildError("fetch", f"{path.name}: unreadable safetensors header ({e})") from e
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
              default=0)
    return 8 + hlen + end


def check_complete(folder: Path, *, allow_pickle: bool,
                   required: tuple[tuple[str, ...], ...] = TEXT_FILES,
                   weights: bool = True) -> None:
    """Raise BuildError('fetch') unless `folder` holds a whole model (see module doc):
    `required` files (each inner tuple: one of them) and, with `weights`, its weights at the
    top level; without, only that every safetensors file in it (any depth) is whole."""
    missing = [names[0] for names in required
               if not any((folder / n).is_file() for n in names)]
    if missing:
        raise BuildError("fetch", f"{folder} is incomplete: missing {', '.join(missing)}")
    if not weights:
        _check_payloads(sorted(folder.rglob("*.safetensors")))
        return
    safes = sorted(folder.glob("*.safetensors"))
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if not safes:
        if pickles and not allow_pickle:
            names = ", ".join(p.name for p in pickles)
            raise BuildError("fetch", f"{folder} has only pickled weights ({names}); pickles can "
                                      "run code when loaded. Convert them to safetensors, or opt "
                                      "in with allow_pickle=True (then loaded with "
                                      "weights_only=True)")
        if not pickles:
            raise BuildError("fetch", f"{folder} is incomplete: no *.safetensors weights")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text())["weight_map"].values())
        absent = sorted(s for s in shards if not (folder / s).is_file())
        if absent:
            raise BuildError("fetch", f"{folder} is incomplete: shards {absent} listed in "
                                      f"{index.name} are missing")
    _check_payloads(safes)


def _check_payloads(safes: list[Path]) -> None:
    for p in safes:
        need, have = safetensors_payload_end(p), p.stat().st_size
        if have < need:
            raise BuildError("fetch", f"{p.name} is truncated: {have} bytes, its header "
                                      f"describes {need}")


def seed_hub_cache(folder: str | Path, repo_id: str, revision: str,
                   cache_dir: str | Path | None = None) -> Path:
    """Place a local HF-format folder into the Hub cache as `repo_id` at commit `revision`.

    Uses the cache's own layout (blobs/, snapshots/<rev>/ links, refs/main), so that
    `snapshot_download(repo_id, revision=...)` resolves it with ``HF_HUB_OFFLINE=1``: the real
    Hub code path, for machines that cannot reach the Hub. Returns the snapshot folder.
    """
    from huggingface_hub.constants import HF_HUB_CACHE

    src = Path(folder).resolve()
    repo_dir = Path(cache_dir or HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))
    snap = repo_dir / "snapshots" / revision
    blobs = repo_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = f.relative_to(src)
        digest = sha256_path(f)
        blob = blobs / digest
        if not blob.exists():
            tmp = blob.with_suffix(".incomplete")
            shutil.copyfile(f, tmp)
            os.replace(tmp, blob)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return snap
