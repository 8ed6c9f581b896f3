"""Descriptors of the files the executor writes, kept open across ticks.

An LRU of ``path -> descriptor`` bounded by ``capacity`` (the collector holds most of
the process's descriptor budget).  Misses are opened in one native batch call.  Each
descriptor remembers whether a write must truncate the file: kernel control files
(cgroupfs, procfs, sysfs, resctrl) take a write as a command and must not be
truncated; plain files of a fake tree need truncating after ``pwrite`` at offset 0.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from qosmanager._native import sysio

# Filesystems whose files are kernel interfaces (no truncation on write).
KERNEL_FS_MAGIC = frozenset({
    0x27E0EB,  # cgroup
    0x63677270,  # cgroup2
    0x9FA0,  # proc
    0x62656572,  # sysfs
    0x07655821,  # resctrl
    0x64626720,  # debugfs
    0x74726163,  # tracefs
})


class FileTable:
    """``path -> (fd, truncate)`` with LRU eviction."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._fds: OrderedDict[str, tuple[int, bool, bool]] = OrderedDict()  # path -> (fd, trunc, readable)

    def __len__(self) -> int:
        return len(self._fds)

    def lookup(self, paths: Sequence[str]) -> list[tuple[int, bool, bool] | int]:
        """Descriptors for ``paths``: ``(fd, truncate, readable)``, or ``-errno`` where open failed."""
        out: list[tuple[int, bool, bool] | int] = [0] * len(paths)
        missing: list[int] = []
        for i, p in enumerate(paths):
            entry = self._fds.get(p)
            if entry is None:
                missing.append(i)
            else:
                self._fds.move_to_end(p)
                out[i] = entry
        if missing:
            mpaths = [paths[i] for i in missing]
            fds = sysio.open_batch(mpaths, os.O_RDWR)
            retry = [k for k, fd in enumerate(fds.tolist()) if fd in (-errno.EACCES, -errno.EPERM)]
            if retry:  # write-only control files
                wfds = sysio.open_batch([mpaths[k] for k in retry], os.O_WRONLY)
                for k, fd in zip(retry, wfds.tolist()):
                    fds[k] = fd
            for k, (i, fd) in enumerate(zip(missing, fds.tolist())):
                if fd < 0:
                    out[i] = fd
                    continue
                entry = (fd, self._needs_truncate(fd), k not in retry)
                self._fds[paths[i]] = entry
                out[i] = entry
            self._evict(protect=len(paths))
        return out

    @staticmethod
    def _needs_truncate(fd: int) -> bool:
        magic = sysio.fstatfs_magic(fd)
        if magic is not None:
            return magic not in KERNEL_FS_MAGIC
        # No f_type (plain-Python mode): kernel control files report size 0 (cgroupfs, procfs)
        # or 4096 (sysfs); a fake tree's regular files hold their content length.
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size not in (0, 4096)

    def _evict(self, protect: int = 0) -> None:
        """Close least recently used descriptors beyond capacity, never one of the ``protect`` most
        recent (those were just handed out for the current batch, which may exceed capacity)."""
        over = min(len(self._fds) - self.capacity, len(self._fds) - protect)
        if over <= 0:
            return
        victims = []
        for _ in range(over):
            _, (fd, _, _) = self._fds.popitem(last=False)
            victims.append(fd)
        sysio.close_batch(np.asarray(victims, dtype=np.int32))

    def forget(self, prefixes: Sequence[str]) -> int:
        """Close descriptors of files under any of ``prefixes`` (a pod went away)."""
        doomed = [p for p in self._fds if p.startswith(tuple(prefixes))]
        fds = [self._fds.pop(p)[0] for p in doomed]
        if fds:
            sysio.close_batch(np.asarray(fds, dtype=np.int32))
        return len(fds)

    def drop(self, path: str) -> None:
        entry = self._fds.pop(path, None)
        if entry is not None:
            sysio.close_batch(np.asarray([entry[0]], dtype=np.int32))

    def close(self) -> None:
        fds = [fd for fd, _, _ in self._fds.values()]
        self._fds.clear()
        if fds:
            sysio.close_batch(np.asarray(fds, dtype=np.int32))
