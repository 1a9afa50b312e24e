"""Network filesystems are read sequentially, local ones mapped."""

import pytest

from floodway.build.netfs import is_network_fs, mount_fs_type, read_mode

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
server:/export /mnt/models nfs4 rw 0 0
modal-volume /artifacts fuse.modalfs rw 0 0
tmpfs /mnt/models/scratch tmpfs rw 0 0
"""


@pytest.fixture
def mounts(tmp_path):
    p = tmp_path / "mounts"
    p.write_text(MOUNTS)
    return str(p)


@pytest.mark.parametrize("path,fs,mode", [
    ("/home/user/.cache/floodway", "ext4", "mmap"),
    ("/mnt/models/embed/abc/model.onnx", "nfs4", "read"),
    ("/artifacts/embed", "fuse.modalfs", "read"),
    ("/mnt/models/scratch/x", "tmpfs", "mmap"),     # the longest mount point wins
    ("/mnt/modelsX", "ext4", "mmap"),               # a prefix of a name is not a mount
])
def test_mode_by_mount(mounts, path, fs, mode, monkeypatch):
    monkeypatch.delenv("FLOODWAY_WEIGHT_READ", raising=False)
    assert mount_fs_type(path, mounts) == fs
    assert read_mode(path, mounts) == mode


def test_override(mounts, monkeypatch):
    monkeypatch.setenv("FLOODWAY_WEIGHT_READ", "read")
    assert read_mode("/home/x", mounts) == "read"


def test_unknown_or_missing_mount_table():
    assert not is_network_fs(None) and is_network_fs("cifs") and not is_network_fs("xfs")
    assert mount_fs_type("/x", "/nonexistent/mounts") is None
