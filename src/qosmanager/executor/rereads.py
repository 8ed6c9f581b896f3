"""Reads again: the same many files read as last time, from the last read's descriptors, in one batch.

A strategy that reads the same many files every tick (resctrlReconcile's container ``tasks`` files,
1,500 on a 2,000-container node) pays, per file, its path, the descriptor table's lookup and the write
cache's check in Python (~1.6 us a file).  :meth:`Rereads.again` answers
:meth:`~qosmanager.executor.executor.Executor.read_many` from the descriptor array of its last read of
the resource instead, when

- the list of dirs is the same (equal, in the same order) as that read's,
- that read found every file with a readable descriptor kept (none missing, one-shot or write-only),
- no descriptor of the table was closed since (:attr:`FileTable.closes`: the numbers are still
  these files'), and
- none of the files is in the write cache (the full read answers such a file from its entry or
  renews it).

Otherwise the memo is dropped and the full read makes a new one.  The same descriptors are read as
the full read would read, with the same count of syscalls (:attr:`ExecutorStats.read_syscalls`).

**LRU.**  A read from the memo does not move its files up in the descriptor table (that is the
per-file cost saved), so before the table closes its least recently used descriptors it calls
:meth:`Rereads.touch`: the files of every memo read since the last touch become the most recently
used, and a file read every tick is not the first closed when the table sheds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qosmanager._native import sysio
from qosmanager.executor.cache import CacheEntry
from qosmanager.executor.files import FileTable
from qosmanager.executor.types import ExecutorStats, Key

READ_CHUNK = 4096
MIN_FILES = 64  # fewer files: the full read costs little, no memo is kept


@dataclass(slots=True)
class Memo:
    cgroups: tuple[str, ...]
    closes: int  # FileTable.closes when the descriptors were taken
    keys: list[Key]
    paths: list[str]
    fds: np.ndarray
    used: bool = False  # read from since the last touch


def read_fds(fds: np.ndarray, stats: ExecutorStats) -> list[bytes | int]:
    """Contents of kept descriptors (a file filling the first chunk read again whole), or -errno."""
    data = sysio.pread_batch(fds, READ_CHUNK)
    stats.read_syscalls += len(fds)
    big = [k for k, d in enumerate(data) if isinstance(d, bytes) and len(d) == READ_CHUNK]
    if big:
        more = sysio.pread_batch(fds[big], 1 << 22)
        stats.read_syscalls += len(big)
        for k, d in zip(big, more):
            data[k] = d
    return list(data)


class Rereads:
    """Per resource, the last full read's dirs and descriptors (see the module docstring)."""

    def __init__(self, files: FileTable, stats: ExecutorStats) -> None:
        self.files = files
        self.stats = stats
        self.memos: dict[str, Memo] = {}
        files.before_shed = self.touch

    def again(self, resource: str, cgroups: Sequence[str], cache: dict[Key, CacheEntry]) -> list[bytes | int] | None:
        """The files' contents read from the memo, or None: the full read is needed."""
        m = self.memos.get(resource)
        if m is None:
            return None
        if m.closes != self.files.closes or m.cgroups != tuple(cgroups) or not cache.keys().isdisjoint(m.keys):
            del self.memos[resource]
            return None
        m.used = True
        return read_fds(m.fds, self.stats)

    def remember(self, resource: str, cgroups: Sequence[str], paths: list[str], keys: list[Key],
                 cache: dict[Key, CacheEntry]) -> None:
        """After a full read of every one of ``cgroups`` (``paths``, ``keys``: theirs, in order)."""
        self.memos.pop(resource, None)
        if len(paths) != len(cgroups) or len(paths) < MIN_FILES or not cache.keys().isdisjoint(keys):
            return
        fds = self.files.kept(paths)
        if min(fds) < 0:
            return
        self.memos[resource] = Memo(tuple(cgroups), self.files.closes, keys, paths, np.asarray(fds, dtype=np.int32))

    def touch(self) -> None:
        """The table is about to close its least recently used descriptors: files read from a memo
        since the last touch become the most recently used."""
        for m in self.memos.values():
            if m.used:
                m.used = False
                self.files.touch(m.paths)
