"""The native batch read in slices: the same answers as the plain-Python twin whatever the slice size,
and no buffer for the whole batch (it was ``len(fds) * maxlen`` bytes of zero-filled memory)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from qosmanager._native import pure_sysio
from qosmanager._native import sysio as native


@pytest.mark.parametrize("slice_bytes", [1, 64, 4096, 3 * 4096, 1 << 20])
def test_sliced_batch_reads_agree_with_the_twin(tmp_path, monkeypatch, slice_bytes: int) -> None:
    monkeypatch.setattr(native, "PREAD_BATCH_BYTES", slice_bytes)
    fds = []
    try:
        for i in range(40):
            p = tmp_path / f"f{i}"
            p.write_bytes(b"x" * (i * 211 % 5000) + f"{i}\n".encode())
            fds.append(os.open(p, os.O_RDONLY))
        closed = os.open(tmp_path / "f0", os.O_RDONLY)
        os.close(closed)
        arr = np.array([*fds[:17], closed, *fds[17:], -1], dtype=np.int32)
        for maxlen in (16, 4096, 1 << 13):
            got = native.pread_batch(arr, maxlen)
            assert got == pure_sysio.pread_batch(arr, maxlen)
            assert len(got) == len(arr) and got[17] == -9 and got[-1] == -9  # EBADF where it failed
    finally:
        for fd in fds:
            os.close(fd)


def test_a_big_batch_allocates_at_most_one_slice(tmp_path, monkeypatch) -> None:
    sizes: list[int] = []
    real = bytearray

    def counting(n: int = 0) -> bytearray:
        sizes.append(n)
        return real(n)

    monkeypatch.setattr(native, "bytearray", counting, raising=False)
    p = tmp_path / "f"
    p.write_bytes(b"12345\n")
    fd = os.open(p, os.O_RDONLY)
    try:
        got = native.pread_batch(np.full(2000, fd, dtype=np.int32), 4096)
    finally:
        os.close(fd)
    assert got == [b"12345\n"] * 2000
    assert max(sizes) <= native.PREAD_BATCH_BYTES < 2000 * 4096


def test_the_batch_compare_agrees_with_the_twin_and_matches_only_exact_contents(tmp_path) -> None:
    contents = [b"0-63\n", b"", b"max 100000\n", b"x" * 4095, b"y" * 5000, b"50000\n"]
    fds = []
    try:
        for i, c in enumerate(contents):
            p = tmp_path / f"f{i}"
            p.write_bytes(c)
            fds.append(os.open(p, os.O_RDONLY))
        closed = os.open(tmp_path / "f0", os.O_RDONLY)
        os.close(closed)
        arr = np.array([*fds, *fds, closed], dtype=np.int32)
        # exact, then each off by a byte (shorter, longer, another byte), then a closed descriptor
        expected = [*contents, b"0-63", b"\n", b"max 100000\n\n", b"x" * 4094 + b"y", b"y" * 5000, b"50001\n",
                    b"0-63\n"]
        got = native.pread_compare(arr, expected)
        assert got.tolist() == pure_sysio.pread_compare(arr, expected).tolist()
        # packed once (what a plan's re-check keeps), the same answers
        assert native.pread_compare(arr, native.pack(expected)).tolist() == got.tolist()
        assert pure_sysio.pread_compare(arr, pure_sysio.pack(expected)).tolist() == got.tolist()
        # a content of 4,096 bytes or more never matches (the caller reads such files the long way)
        assert got.tolist() == [True, True, True, True, False, True] + [False] * 7
    finally:
        for fd in fds:
            os.close(fd)


def test_a_few_descriptors_read_as_the_batch_does(tmp_path, monkeypatch) -> None:
    # below FEW_FDS the native face reads in Python: the same bytes and errnos as its C batch
    fds = []
    try:
        for i in range(native.FEW_FDS):
            p = tmp_path / f"f{i}"
            p.write_bytes(b"max 100000\n"[: 3 + i] if i else b"")
            fds.append(os.open(p, os.O_RDONLY))
        closed = os.open(tmp_path / "f0", os.O_RDONLY)
        os.close(closed)
        cases = [fds[:1], fds[:2], [fds[1], closed], [-1], fds]
        for case in cases:
            arr = np.array(case, dtype=np.int32)
            for maxlen in (2, 64, 4096):
                few = native.pread_batch(arr, maxlen)
                monkeypatch.setattr(native, "FEW_FDS", 0)
                assert few == native.pread_batch(arr, maxlen) == pure_sysio.pread_batch(arr, maxlen)
                monkeypatch.setattr(native, "FEW_FDS", len(fds))
    finally:
        for fd in fds:
            os.close(fd)
