"""Descriptors of the files the executor writes, kept open across ticks while the budget allows.

An LRU of ``path -> descriptor`` bounded by ``capacity`` and by the process's
:class:`~qosmanager.host.descriptors.DescriptorBudget`, which it shares with the collector's readers
(they come first: :meth:`FileTable.shed` closes the oldest descriptors when they need room).
Misses are opened in one native batch call.  A path that gets no descriptor (the budget is spent,
or the process is out of descriptors) is looked up as :data:`ONE_SHOT`: read with
:meth:`FileTable.read_once` and written with :meth:`FileTable.write_once` (open, pread or pwrite,
close), so a write never fails for want of a descriptor a one-shot open could get; a one-shot open
failing with EMFILE closes cached descriptors and tries once more.

Each descriptor remembers whether a write must truncate the file: kernel control files
(cgroupfs, procfs, sysfs, resctrl) take a write as a command and must not be truncated; plain
files of a fake tree need truncating after ``pwrite`` at offset 0.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from qosmanager._native import sysio
from qosmanager.host.descriptors import DescriptorBudget

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

ONE_SHOT = -1  # the descriptor of a looked-up path that is opened for each read or write
OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)
SHED_ON_EMFILE = 16  # cached descriptors closed before a one-shot open is tried again

Entry = tuple[int, bool, bool]  # (fd or ONE_SHOT, truncate, readable)


class FileTable:
    """``path -> (fd, truncate, readable)`` with LRU eviction, within a descriptor budget."""

    def __init__(self, capacity: int = 4096, budget: DescriptorBudget | None = None) -> None:
        self.capacity = capacity
        self.budget = budget
        self._fds: OrderedDict[str, Entry] = OrderedDict()
        self.one_shot_reads = 0
        self.one_shot_writes = 0
        self.closes = 0  # descriptors closed so far: a descriptor number kept elsewhere is valid while it holds
        # called before the least recently used descriptors are closed: whoever reads kept descriptors
        # without a lookup moves those files up first (see :mod:`.rereads`)
        self.before_shed: Callable[[], None] | None = None
        if budget is not None:
            budget.add_holder(self.__len__, self.shed)

    def __len__(self) -> int:
        return len(self._fds)

    def lookup(self, paths: Sequence[str]) -> list[Entry | int]:
        """Entries for ``paths``: ``(fd, truncate, readable)`` with ``fd`` :data:`ONE_SHOT` where no
        descriptor is kept, or ``-errno`` where the file cannot be opened."""
        out: list[Entry | int] = [0] * len(paths)
        missing: dict[str, list[int]] = {}  # a path may come twice (entries of one file)
        hits: dict[str, None] = {}  # in order
        for i, p in enumerate(paths):
            entry = self._fds.get(p)
            if entry is None:
                missing.setdefault(p, []).append(i)
            else:
                self._fds.move_to_end(p)
                hits[p] = None
                out[i] = entry
        if not missing:
            return out
        limit = self.capacity
        if self.budget is not None:
            limit = min(limit, len(self._fds) + self.budget.available())
        # this batch's descriptors stay; older ones are closed to make room for the new
        n_new = max(0, min(len(missing), limit - len(hits)))
        self._close_oldest(min(len(self._fds) + n_new - limit, len(self._fds) - len(hits)), hits)
        mpaths = list(missing)
        held, rest = mpaths[:n_new], mpaths[n_new:]
        opened: list[int] = []
        writeonly: set[int] = set()
        if held:
            fds = sysio.open_batch(held, os.O_RDWR)
            retry = [k for k, fd in enumerate(fds.tolist()) if fd in (-errno.EACCES, -errno.EPERM)]
            if retry:  # write-only control files
                wfds = sysio.open_batch([held[k] for k in retry], os.O_WRONLY)
                for k, fd in zip(retry, wfds.tolist()):
                    fds[k] = fd
                writeonly = set(retry)
            opened = fds.tolist()
        for k, p in enumerate(held):
            fd = opened[k]
            res: Entry | int
            if fd >= 0:
                res = (fd, self._needs_truncate(fd), k not in writeonly)
                self._fds[p] = res
            elif -fd in OUT_OF_FDS:
                res = (ONE_SHOT, False, True)
            else:
                res = fd
            for i in missing[p]:
                out[i] = res
        for p in rest:
            for i in missing[p]:
                out[i] = (ONE_SHOT, False, True)
        return out

    def kept(self, paths: Sequence[str]) -> list[int]:
        """The readable descriptors kept for ``paths`` (each now the most recently used), -1 where none is
        kept: nothing is opened."""
        fds = self._fds
        out: list[int] = []
        for p in paths:
            entry = fds.get(p)
            if entry is None or not entry[2]:
                out.append(-1)
            else:
                fds.move_to_end(p)
                out.append(entry[0])
        return out

    @staticmethod
    def _needs_truncate(fd: int) -> bool:
        magic = sysio.fstatfs_magic(fd)
        if magic is not None:
            return magic not in KERNEL_FS_MAGIC
        # f_type unknown (a filesystem the plain-Python twin cannot name): kernel control files
        # report size 0 (cgroupfs, procfs) or 4096 (sysfs); a fake tree's files hold their length.
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size not in (0, 4096)

    def touch(self, paths: Iterable[str]) -> None:
        """Make the kept descriptors of ``paths`` the most recently used (in this order)."""
        fds = self._fds
        for p in paths:
            if p in fds:
                fds.move_to_end(p)

    def _close_oldest(self, n: int, keep: Iterable[str] = ()) -> int:
        """Close the ``n`` least recently used descriptors; ``keep`` (the batch being looked up) stays
        the most recently used."""
        n = min(n, len(self._fds))
        if n <= 0:
            return 0
        if self.before_shed is not None:
            self.before_shed()
            self.touch(keep)
        victims = [self._fds.popitem(last=False)[1][0] for _ in range(n)]
        self.closes += n
        sysio.close_batch(np.asarray(victims, dtype=np.int32))
        return n

    def shed(self, n: int) -> int:
        """Close up to ``n`` least recently used descriptors (the readers need room)."""
        return self._close_oldest(n)

    # ------------------------------------------------------------------ one-shot
    def _open_once(self, path: str, flags: int) -> int:
        """A descriptor for one operation, or ``-errno``; out of descriptors, cached ones are closed
        and the open is tried once more."""
        for attempt in (0, 1):
            try:
                return os.open(path, flags | os.O_CLOEXEC)
            except OSError as e:
                err = e.errno or errno.EIO
                if err not in OUT_OF_FDS or attempt:
                    return -err
                self.shed(SHED_ON_EMFILE)
        return -errno.EMFILE  # not reached

    def read_once(self, path: str, maxlen: int) -> bytes | int:
        """Up to ``maxlen`` bytes from offset 0 of ``path`` with a descriptor of its own, or ``-errno``."""
        self.one_shot_reads += 1
        fd = self._open_once(path, os.O_RDONLY)
        if fd < 0:
            return fd
        try:
            return os.pread(fd, maxlen, 0)
        except OSError as e:
            return -(e.errno or errno.EIO)
        finally:
            os.close(fd)

    def write_once(self, path: str, payload: bytes) -> int:
        """Write ``payload`` at offset 0 of ``path`` with a descriptor of its own (a plain file is
        truncated after it, as with a kept descriptor); the errno, 0 when it was written.  Opened,
        written and closed through the sysio layer, as a kept descriptor is."""
        self.one_shot_writes += 1
        for attempt in (0, 1):
            fds = sysio.open_batch([path], os.O_WRONLY)
            err = -int(fds[0])
            if err <= 0:
                break
            if err not in OUT_OF_FDS or attempt:
                return err
            self.shed(SHED_ON_EMFILE)
        try:
            trunc = np.asarray([self._needs_truncate(int(fds[0]))], dtype=np.uint8)
            return int(sysio.pwrite_batch(fds, [payload], trunc)[0])
        finally:
            sysio.close_batch(fds)

    # ------------------------------------------------------------------
    def forget(self, prefixes: Sequence[str]) -> int:
        """Close descriptors of files under any of ``prefixes`` (a pod went away)."""
        doomed = [p for p in self._fds if p.startswith(tuple(prefixes))]
        fds = [self._fds.pop(p)[0] for p in doomed]
        self.closes += len(fds)
        if fds:
            sysio.close_batch(np.asarray(fds, dtype=np.int32))
        return len(fds)

    def drop(self, path: str) -> None:
        entry = self._fds.pop(path, None)
        if entry is not None:
            self.closes += 1
            sysio.close_batch(np.asarray([entry[0]], dtype=np.int32))

    def close(self) -> None:
        fds = [fd for fd, _, _ in self._fds.values()]
        self.closes += len(fds)
        self._fds.clear()
        if fds:
            sysio.close_batch(np.asarray(fds, dtype=np.int32))
