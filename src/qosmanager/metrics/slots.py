"""The collector's slots: which cgroups it follows, and how their files are opened and retried.

Map of the file:

* :func:`probe_controllers`, :func:`stat_paths` - which stat files a slot reads on this host.
* :class:`Tracked` / :class:`TrackedPod` - a followed cgroup: its metric-cache column (the
  same number as its reader slot), its dir, its retry state.
* :class:`CollectorStats` - the collector's counters (exported as agent metrics).
* :class:`Slots` - the open / close / retry machinery behind the readers:

  - ``open()`` starts a slot (the descriptor budget may reclaim the executor's cached files
    first); a cgroup that does not exist yet is ``pending`` and retried with exponential
    backoff up to :data:`MAX_BACKOFF`;
  - a slot that opened with some of its files missing is ``partial``: those files are
    retried with the same backoff (``retry_files()``), the others are read meanwhile;
  - after a read, ``reap_dead()`` closes the slots whose cgroup vanished (pending again:
    reopened while the pod is still listed) and ``note_vanished_files()`` schedules the files
    that vanished from slots that live on.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from qosmanager._native import STATE_LIVE, StatReader
from qosmanager.api.pod import PodMeta
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.descriptors import DescriptorBudget
from qosmanager.logfmt import shown
from qosmanager.metrics import cache as mc

log = logging.getLogger("qosmanager.metrics.collector")

MAX_BACKOFF = 30.0
# a slot's files, in the readers' FILE_* order
FILE_KEYS = ("usage", "cpu_stat", "memory_stat", "cpuset")


def probe_controllers(lay: CgroupLayout) -> dict[str, bool]:
    """Which stat files exist on this host (by the readers' keys), decided once."""
    if lay.version == 1:
        def has(sub: str) -> bool:
            return os.path.isdir(lay.abs_dir(sub, ""))
        return {"usage": has("cpuacct"), "cpu_stat": has("cpu"), "memory_stat": has("memory"),
                "cpuset": has("cpuset")}
    root = lay.abs_dir("", lay.kubepods_dir())
    ctl = ""
    for d in (root, lay.abs_dir("", "")):
        try:
            with open(os.path.join(d, "cgroup.controllers")) as f:
                ctl = f.read()
            break
        except OSError:
            continue
    names = set(ctl.split())
    return {"usage": False, "cpu_stat": True, "memory_stat": "memory" in names,
            "cpuset": "cpuset" in names}


def stat_paths(lay: CgroupLayout, f: dict[str, bool], rel: str, cpuset: bool) -> dict[str, str | None]:
    """The stat files of the cgroup ``rel`` by the readers' keys (None: not read on this host);
    ``f``: :func:`probe_controllers`."""
    if lay.version == 1:
        return {
            "usage": lay.file("cpuacct", rel, "cpuacct.usage") if f["usage"] else None,
            "cpu_stat": lay.file("cpu", rel, "cpu.stat") if f["cpu_stat"] else None,
            "memory_stat": lay.file("memory", rel, "memory.stat") if f["memory_stat"] else None,
            "cpuset": lay.file("cpuset", rel, "cpuset.cpus") if cpuset and f["cpuset"] else None,
        }
    return {
        "usage": None,
        "cpu_stat": lay.file("", rel, "cpu.stat"),
        "memory_stat": lay.file("", rel, "memory.stat") if f["memory_stat"] else None,
        "cpuset": lay.file("", rel, "cpuset.cpus.effective") if cpuset and f["cpuset"] else None,
    }


@dataclass(slots=True)
class Tracked:
    """A cgroup the collector follows: its cache column (== reader slot) and its dir.

    Its files' paths are not kept: they are made from ``rel`` when a file is opened
    (:meth:`Collector.files`), which happens when the cgroup appears and on retries.  Kept,
    they were three or four absolute paths per cgroup (about 12 MiB at 10,000 pods)."""

    key: str
    col: int
    rel: str
    cpuset: bool = False  # its cpuset file is read too (BE containers)
    open: bool = False
    retry_at: float = 0.0
    backoff: float = 0.0
    # files of a live slot that are missing (absent in their hierarchy, or vanished): their retry
    files_retry_at: float = 0.0
    files_backoff: float = 0.0


@dataclass
class TrackedPod:
    meta: PodMeta
    cg: Tracked
    containers: dict[str, Tracked] = field(default_factory=dict)  # container id -> tracked


@dataclass
class CollectorStats:
    ticks: int = 0
    pods: int = 0
    containers: int = 0
    pending: int = 0
    partial: int = 0  # tracked cgroups with some of their files missing
    opened: int = 0
    closed: int = 0
    vanished: int = 0
    read_errors: int = 0
    pod_reads: int = 0  # pod slots read by the last tick (demand mode: what the plan asked for)
    container_reads: int = 0
    refreshed: int = 0  # pod slots read on a strategy's demand between ticks, in total
    last_tick_seconds: float = 0.0
    last_sync_seconds: float = 0.0


class Slots:
    """Opens, closes and retries the reader slots of tracked cgroups (kinds: pod, container, app)."""

    def __init__(self, readers: dict[str, StatReader], budget: DescriptorBudget, stats: CollectorStats,
                 files: Callable[[Tracked], dict[str, str | None]],
                 on_open: Callable[[str, int], None]) -> None:
        """``files``: the stat files of a tracked cgroup; ``on_open(kind, col)``: called whenever a
        slot is (re)opened, whether or not it succeeded."""
        self.readers = readers
        self.budget = budget
        self.stats = stats
        self.files = files
        self.on_open = on_open
        self.pending: dict[tuple[str, str], Tracked] = {}  # cgroups not open yet (or vanished)
        self.partial: dict[tuple[str, str], Tracked] = {}  # live slots with files missing

    def open(self, tr: Tracked, kind: str, now: float) -> None:
        reader = self.readers[kind]
        files = self.files(tr)
        need = sum(1 for p in files.values() if p is not None)
        if self.budget.available() < need:
            self.budget.reclaim(need)  # the executor's cached descriptors give way to the readers
        reader.max_fds = reader.open_fds + self.budget.available()
        err = reader.open(tr.col, **files)
        self.on_open(kind, tr.col)
        if err == 0:
            tr.open = True
            tr.backoff = 0.0
            self.pending.pop((kind, tr.key), None)
            self.stats.opened += 1
            if reader.missing[tr.col]:
                tr.files_backoff = 0.0
                self._schedule_files(tr, kind, now)
            else:
                self.partial.pop((kind, tr.key), None)
            return
        tr.open = False
        tr.backoff = min(MAX_BACKOFF, max(1.0, tr.backoff * 2))
        tr.retry_at = now + tr.backoff
        self.pending[(kind, tr.key)] = tr
        if err != errno.ENOENT:
            log.warning("cannot open stat files of %s %s: %s", kind, shown(tr.rel), os.strerror(err))

    def close(self, group: mc.SeriesGroup, tr: Tracked, kind: str) -> None:
        self.readers[kind].close(tr.col)
        group.release(tr.key)
        self.pending.pop((kind, tr.key), None)
        self.partial.pop((kind, tr.key), None)
        self.stats.closed += 1

    def _schedule_files(self, tr: Tracked, kind: str, now: float) -> None:
        """Retry the missing files of a live slot with the same backoff as a missing cgroup."""
        tr.files_backoff = min(MAX_BACKOFF, max(1.0, tr.files_backoff * 2))
        tr.files_retry_at = now + tr.files_backoff
        self.partial[(kind, tr.key)] = tr

    def retry_files(self, now: float) -> None:
        for (kind, key), tr in list(self.partial.items()):
            if now < tr.files_retry_at:
                continue
            reader = self.readers[kind]
            if reader.state[tr.col] != STATE_LIVE:
                del self.partial[(kind, key)]  # dead or closed: the whole slot is reopened instead
                continue
            missing = int(reader.missing[tr.col])
            files = self.files(tr)
            for f, name in enumerate(FILE_KEYS):
                path = files.get(name)
                if missing & (1 << f) and path is not None:
                    reader.open_file(tr.col, f, path)
            if reader.missing[tr.col]:
                self._schedule_files(tr, kind, now)
            else:
                tr.files_backoff = 0.0
                del self.partial[(kind, key)]

    def note_vanished_files(self, kind: str, index: dict[int, Tracked], now: float) -> None:
        """Files that vanished this read from slots that live on: retry them."""
        reader = self.readers[kind]
        for col in np.flatnonzero(reader.vanished[: reader.high_water]).tolist():
            tr = index.get(col)
            if tr is not None and reader.state[col] == STATE_LIVE and (kind, tr.key) not in self.partial:
                tr.files_backoff = 0.0
                self._schedule_files(tr, kind, now)

    def retry(self, now: float) -> None:
        for (kind, _), tr in list(self.pending.items()):
            if now >= tr.retry_at:
                self.open(tr, kind, now)

    def reap_dead(self, kind: str, index: dict[int, Tracked], now: float) -> None:
        """Close the slots whose cgroup vanished this read; they are pending again."""
        reader = self.readers[kind]
        dead = np.flatnonzero(reader.died[: reader.high_water])
        if not dead.size:
            return
        self.stats.vanished += int(dead.size)
        for col in dead.tolist():
            tr = index.get(col)
            if tr is None:
                continue
            reader.close(col)
            self.partial.pop((kind, tr.key), None)
            tr.open = False
            tr.backoff = 1.0
            tr.retry_at = now + 1.0
            self.pending[(kind, tr.key)] = tr
