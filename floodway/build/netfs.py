"""Is a path on a network filesystem? Then read weights sequentially instead of mmap.

Random page faults through mmap on network filesystems (NFS, SMB, FUSE-backed volumes) are
reported 30-50x slower than one sequential read (e.g. safetensors issue #300 and Modal's
Volume docs on large files), so the loader reads whole files into memory there.
"""

from __future__ import annotations

import os
from pathlib import Path

NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs",
                        "lustre", "gpfs", "beegfs", "afs", "virtiofs", "fuse", "fuseblk"})
READ_MODE_ENV = "FLOODWAY_WEIGHT_READ"   # "mmap" | "read" | unset (auto)


def mount_fs_type(path: str | Path, mounts_file: str = "/proc/mounts") -> str | None:
    """The filesystem type of the mount holding `path` (longest mount-point prefix)."""
    target = os.path.realpath(path)
    best, fs = "", None
    try:
        with open(mounts_file) as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) > len(best):
            best, fs = mnt, parts[2]
    return fs


def is_network_fs(fs_type: str | None) -> bool:
    if fs_type is None:
        return False
    return fs_type in NETWORK_FS or fs_type.startswith("fuse.")


def read_mode(path: str | Path, mounts_file: str = "/proc/mounts") -> str:
    """"read" (sequential into memory) on network filesystems, else "mmap";
    ``FLOODWAY_WEIGHT_READ`` overrides."""
    forced = os.environ.get(READ_MODE_ENV)
    if forced in ("read", "mmap"):
        return forced
    return "read" if is_network_fs(mount_fs_type(path, mounts_file)) else "mmap"
