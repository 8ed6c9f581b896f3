"""The plain-Python sysio twin tells filesystems apart as the native module does (f_type)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qosmanager._native import pure_sysio

native = pytest.importorskip("qosmanager._native.sysio")

PATHS = ["/", "/proc", "/proc/self/stat", "/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/unified",
         "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory/memory.stat", "/dev/shm", "/tmp"]


@pytest.mark.parametrize("path", PATHS)
def test_statfs_magic_agrees_with_native(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist on this machine")
    expected = native.statfs_magic(path)
    got = pure_sysio.statfs_magic(path)
    if got is None:  # a filesystem the twin has no name for: it says unknown, never a wrong type
        assert expected not in pure_sysio.FS_MAGIC.values()
    else:
        assert got == expected


def test_fstatfs_magic_agrees_with_native(tmp_path: Path) -> None:
    paths = [tmp_path / "plain", Path("/proc/self/status")]
    paths[0].write_text("x")
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            want = native.fstatfs_magic(fd)
            got = pure_sysio.fstatfs_magic(fd)
            assert got == want or (got is None and want not in pure_sysio.FS_MAGIC.values()), p
        finally:
            os.close(fd)


def test_mount_points_with_escaped_names(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "2 1 0:5 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
        "3 1 0:6 / /mnt rw shared:1 - cgroup2 cgroup2 rw\n"
        "4 3 0:7 / /mnt rw - proc proc rw\n"  # mounted over /mnt later: it shadows the cgroup2 mount
        "garbage line\n")
    assert pure_sysio._fs_type("/mnt/with space/x", str(info)) == "tmpfs"
    assert pure_sysio._fs_type("/mnt/other", str(info)) == "proc"
    assert pure_sysio._fs_type("/mntx", str(info)) == "ext4"
    assert pure_sysio._fs_type("/", str(info)) == "ext4"
    assert pure_sysio._fs_type("/x", str(tmp_path / "absent")) is None
