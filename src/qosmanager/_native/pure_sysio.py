"""Plain-Python twin of :mod:`qosmanager._native.sysio` (used when QOSMANAGER_PURE=1)."""

from __future__ import annotations

import contextlib
import errno
import os
import select
from collections.abc import Sequence

import numpy as np

IMPLEMENTATION = "pure"


# f_type of the filesystems the agent tells apart, by the name /proc/self/mountinfo gives them
FS_MAGIC = {
    "cgroup": 0x27E0EB,
    "cgroup2": 0x63677270,
    "tmpfs": 0x01021994,
    "proc": 0x9FA0,
    "sysfs": 0x62656572,
    "resctrl": 0x07655821,
    "debugfs": 0x64626720,
    "tracefs": 0x74726163,
    "ext4": 0xEF53,
    "xfs": 0x58465342,
    "btrfs": 0x9123683E,
    "overlay": 0x794C7630,
    "9p": 0x01021997,
}


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as three octal digits."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the filesystem ``path`` lies on: the last-mounted longest mount point above it."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best, best_len = None, -1
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        mp = _unescape(fields[4])
        inside = path == mp or mp == "/" or path.startswith(mp.rstrip("/") + "/")
        if inside and len(mp) >= best_len:
            best, best_len = tail.split()[0], len(mp)
    return best


def statfs_magic(path: str) -> int | None:
    """``f_type`` of ``path``'s filesystem, from /proc/self/mountinfo (the standard library has no statfs);
    None when unknown, and callers fall back."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    fs = _fs_type(real)
    return FS_MAGIC.get(fs) if fs is not None else None


def fstatfs_magic(fd: int) -> int | None:
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not path.startswith("/"):
        return None
    fs = _fs_type(path.removesuffix(" (deleted)"))
    return FS_MAGIC.get(fs) if fs is not None else None


def open_batch(paths: Sequence[str], flags: int) -> np.ndarray:
    out = np.empty(len(paths), dtype=np.int32)
    for i, p in enumerate(paths):
        try:
            out[i] = os.open(p, flags | os.O_CLOEXEC)
        except OSError as e:
            out[i] = -(e.errno or 5)
    return out


def pwrite_batch(fds: np.ndarray, payloads: Sequence[bytes], truncate: np.ndarray) -> np.ndarray:
    err = np.zeros(len(payloads), dtype=np.int32)
    for i, (fd, data) in enumerate(zip(fds.tolist(), payloads)):
        try:
            n = os.pwrite(fd, data, 0)
            if n != len(data):
                err[i] = 5  # EIO
                continue
            if truncate[i]:
                os.ftruncate(fd, len(data))
        except OSError as e:
            err[i] = e.errno or 5
    return err


def pread_batch(fds: np.ndarray, maxlen: int = 4096) -> list[bytes | int]:
    out: list[bytes | int] = []
    for fd in fds.tolist():
        try:
            out.append(os.pread(fd, maxlen, 0))
        except OSError as e:
            out.append(-(e.errno or 5))
    return out


COMPARE_MAX = 4096

Packed = tuple[bytes, np.ndarray, np.ndarray]


def pack(contents: Sequence[bytes]) -> Packed:
    lengths = np.array([len(c) for c in contents], dtype=np.int64)
    offsets = np.zeros(len(contents), dtype=np.int64)
    if len(contents) > 1:
        np.cumsum(lengths[:-1], out=offsets[1:])
    return b"".join(contents), offsets, lengths


def pread_compare(fds: np.ndarray, expected: Sequence[bytes] | Packed) -> np.ndarray:
    data, offsets, lengths = expected if isinstance(expected, tuple) else pack(expected)
    same = np.zeros(len(lengths), dtype=bool)
    for i, (fd, off, n) in enumerate(zip(fds.tolist(), offsets.tolist(), lengths.tolist())):
        if n >= COMPARE_MAX:
            continue
        with contextlib.suppress(OSError):
            same[i] = os.pread(fd, n + 1, 0) == data[off:off + n]
    return same


def close_batch(fds: np.ndarray) -> None:
    for fd in fds.tolist():
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def mkdir(path: str, mode: int = 0o777) -> None:
    """``mkdir(2)``: the agent makes directories through here (the executor's MakeDir), so a fake host's
    kernel (:mod:`qosmanager.sim.fakekernel`) can create the files the real kernel puts in a new group."""
    os.mkdir(path, mode)


def psi_trigger(path: str, line: bytes) -> int:
    """Register a PSI trigger (``line``: ``b"some <stall µs> <window µs>"``) on the pressure file ``path``;
    the descriptor that holds it (the kernel drops the trigger when it is closed).  The kernel ends the
    string at the last byte it is given, so a NUL goes after the line.  Raises OSError (EINVAL: a line
    the kernel refuses; EOPNOTSUPP: PSI off for cgroups; EBUSY: a trigger on this descriptor already).
    The agent registers through here (the executor), so a fake host's kernel can model triggers.  A file
    on neither procfs nor cgroup2 (a plain copy of one) is refused with EOPNOTSUPP, not written."""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if fstatfs_magic(fd) not in (FS_MAGIC["proc"], FS_MAGIC["cgroup2"]):
            raise OSError(errno.EOPNOTSUPP, f"{path}: not a pressure file of procfs or cgroup2")
        os.write(fd, line + b"\0")
    except BaseException:
        os.close(fd)
        raise
    return fd


def psi_poll(watch: Sequence[tuple[int, int]], timeout_ms: float) -> list[tuple[int, int]]:
    """``poll(2)`` on ``(descriptor, events)`` pairs for up to ``timeout_ms`` (negative: no limit); the
    ``(descriptor, revents)`` that are ready.  A PSI trigger's descriptor reports ``POLLPRI`` once per
    event (the poll that reports it consumes it), ``POLLERR | POLLPRI`` when its file is gone."""
    p = select.poll()
    for fd, events in watch:
        p.register(fd, events)
    return p.poll(timeout_ms)
