"""Python face of the cffi module ``_sysio`` (see ``ext/sysio.h``).

All batch functions take and return numpy arrays so a caller never loops per file
in Python to talk to the kernel.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from qosmanager._native._sysio import ffi, lib
from qosmanager._native.pure_sysio import psi_poll, psi_trigger  # noqa: F401  (no batch to gain in C)

IMPLEMENTATION = "native"


def statfs_magic(path: str) -> int | None:
    """The filesystem magic number of ``path``, or None when it cannot be stat'ed."""
    r = lib.qm_statfs_magic(path.encode())
    return None if r < 0 else int(r)


def fstatfs_magic(fd: int) -> int | None:
    r = lib.qm_fstatfs_magic(fd)
    return None if r < 0 else int(r)


def _pack(items: Sequence[bytes], nul: bool) -> tuple[bytes, np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
    step = lengths + 1 if nul else lengths
    offsets = np.zeros(len(items), dtype=np.int64)
    if len(items) > 1:
        np.cumsum(step[:-1], out=offsets[1:])
    data = (b"\0".join(items) + b"\0") if nul else b"".join(items)
    return data, offsets, lengths


def open_batch(paths: Sequence[str], flags: int) -> np.ndarray:
    """Open every path; returns int32 descriptors, ``-errno`` where an open failed."""
    out = np.empty(len(paths), dtype=np.int32)
    if not paths:
        return out
    data, offsets, _ = _pack([p.encode() for p in paths], nul=True)
    lib.qm_open_batch(
        len(paths), ffi.from_buffer(data), ffi.from_buffer("int64_t[]", offsets), flags,
        ffi.from_buffer("int32_t[]", out),
    )
    return out


def pwrite_batch(fds: np.ndarray, payloads: Sequence[bytes], truncate: np.ndarray) -> np.ndarray:
    """Write ``payloads[i]`` at offset 0 of ``fds[i]``, in order; int32 errno per file (0 = ok)."""
    n = len(payloads)
    err = np.zeros(n, dtype=np.int32)
    if n == 0:
        return err
    fds32 = np.ascontiguousarray(fds, dtype=np.int32)
    trunc = np.ascontiguousarray(truncate, dtype=np.uint8)
    data, offsets, lengths = _pack(payloads, nul=False)
    lib.qm_pwrite_batch(
        n, ffi.from_buffer("int32_t[]", fds32), ffi.from_buffer(data) if data else ffi.NULL,
        ffi.from_buffer("int64_t[]", offsets), ffi.from_buffer("int64_t[]", lengths),
        ffi.from_buffer("uint8_t[]", trunc), ffi.from_buffer("int32_t[]", err),
    )
    return err


FEW_FDS = 4
"""Up to this many descriptors are read one ``pread`` each from Python: the same syscalls, without the
batch's buffer, length array and cffi views (a tick's one or two quota files: ~2 us instead of ~8)."""


def _pread_few(fds: np.ndarray | Sequence[int], maxlen: int) -> list[bytes | int]:
    out: list[bytes | int] = []
    for fd in fds:
        try:
            out.append(os.pread(int(fd), maxlen, 0))
        except OSError as e:
            out.append(-(e.errno or 5))
    return out


PREAD_BATCH_BYTES = 1 << 16  # the most one native call's buffer holds (a transient of its own size each tick)


def pread_batch(fds: np.ndarray, maxlen: int = 4096) -> list[bytes | int]:
    """Read each descriptor from offset 0; bytes, or ``-errno`` where the read failed.

    One native call per slice of descriptors whose buffers fit in :data:`PREAD_BATCH_BYTES` (at least
    one descriptor): a buffer for the whole batch was zero-filled memory of ``len(fds) * maxlen``
    bytes, 10 MB for the executor's first read-back of 2,500 files."""
    n = len(fds)
    if n == 0:
        return []
    if n <= FEW_FDS:
        return _pread_few(fds, maxlen)
    fds32 = np.ascontiguousarray(fds, dtype=np.int32)
    step = max(1, PREAD_BATCH_BYTES // max(1, maxlen))
    out: list[bytes | int] = []
    for start in range(0, n, step):
        part = fds32[start:start + step]
        m = len(part)
        buf = bytearray(m * maxlen)
        lens = np.zeros(m, dtype=np.int64)
        lib.qm_pread_batch(
            m, ffi.from_buffer("int32_t[]", part), ffi.from_buffer(buf), maxlen,
            ffi.from_buffer("int64_t[]", lens),
        )
        view = memoryview(buf)
        for i, ln in enumerate(lens.tolist()):
            out.append(int(ln) if ln < 0 else bytes(view[i * maxlen : i * maxlen + ln]))
    return out


COMPARE_MAX = 4096  # an expected content this long or longer never matches (QM_COMPARE_MAX)

Packed = tuple[bytes, np.ndarray, np.ndarray]  # contents end to end, their offsets and lengths


def pack(contents: Sequence[bytes]) -> Packed:
    """Contents laid end to end for :func:`pread_compare` (made once, compared many times)."""
    return _pack(contents, nul=False)


def pread_compare(fds: np.ndarray, expected: Sequence[bytes] | Packed) -> np.ndarray:
    """Whether each descriptor holds exactly ``expected[i]`` (read from offset 0), in one native call:
    a bool array, False where the read failed or the content differs.  ``expected``: the contents, or
    :func:`pack` of them."""
    data, offsets, lengths = expected if isinstance(expected, tuple) else _pack(expected, nul=False)
    n = len(lengths)
    same = np.zeros(n, dtype=np.uint8)
    if n == 0:
        return same.astype(bool)
    fds32 = np.ascontiguousarray(fds, dtype=np.int32)
    lib.qm_pread_compare(
        n, ffi.from_buffer("int32_t[]", fds32), ffi.from_buffer(data) if data else ffi.NULL,
        ffi.from_buffer("int64_t[]", offsets), ffi.from_buffer("int64_t[]", lengths),
        ffi.from_buffer("uint8_t[]", same),
    )
    return same.astype(bool)


def close_batch(fds: np.ndarray) -> None:
    if len(fds):
        arr = np.ascontiguousarray(fds, dtype=np.int32)
        lib.qm_close_batch(len(arr), ffi.from_buffer("int32_t[]", arr))


def mkdir(path: str, mode: int = 0o777) -> None:
    """``mkdir(2)``: the agent makes directories through here (the executor's MakeDir), so a fake host's
    kernel (:mod:`qosmanager.sim.fakekernel`) can create the files the real kernel puts in a new group."""
    os.mkdir(path, mode)
