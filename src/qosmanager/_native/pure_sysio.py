"""Plain-Python twin of :mod:`qosmanager._native.sysio` (used when QOSMANAGER_PURE=1)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import numpy as np

IMPLEMENTATION = "pure"


def statfs_magic(path: str) -> int | None:
    """Python's standard library cannot read ``f_type``: unknown, callers fall back."""
    return None


def fstatfs_magic(fd: int) -> int | None:
    return None


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


def close_batch(fds: np.ndarray) -> None:
    for fd in fds.tolist():
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
