"""The readings a memory eviction decides on, taken together at the moment it decides.

Two ways an eviction round can evict a pod it did not need to, both seen on a real kernel:

* **Terms.**  The node's overage is counted in the node's terms (``MemTotal - MemAvailable``: what
  the kernel cannot hand out, i.e. anonymous memory, shmem, unevictable pages *and kernel memory* --
  page tables, slab, sockets -- but not the file LRU).  koordlet counts a victim's release as its
  ``anon + unevictable`` from ``memory.stat``: the pod's kernel memory, which leaves the node with
  the pod, is missing from it, so a victim seems to release less than it does and the round evicts
  a second pod to cover a difference in accounting.  Here a victim releases, in the node's terms,
  its page counter (``memory.usage_in_bytes`` on v1, ``memory.current`` on v2) minus its file LRU
  (``inactive_file + active_file``), which ``MemAvailable`` already counts as available.
* **Age.**  The overage came from the collector's last node sample (up to two collect intervals
  old) and the victims' usage from whatever sample each pod had in that window -- or, for a pod
  being killed, what it holds now.  A pod read earlier than the node counts less of a growth the
  node already shows; a dying pod read after it counts less than the node still holds.  Either way
  the round covers the gap with another victim.  Here the node is read before *and* after the
  pods, all at the moment of the decision, and the lower of the two node readings sets the overage:
  whatever moved between the reads (a pod growing, a killed pod's memory going back) makes the round
  evict less, never more.  A node no longer over the threshold at that moment evicts nothing.

:func:`take` reads ``/proc/meminfo`` and each listed pod's ``memory.stat`` and page counter (plain
reads: nothing is written).  The agent takes a snapshot only when the collector's node sample has
crossed the threshold (the trigger), so a quiet node reads nothing more.  Replay and the harness
decide from their recorded samples instead (see :mod:`qosmanager.strategies.memory_evict`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qosmanager.api.pod import PodMeta
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.procfs import memory_usage_bytes, parse_meminfo

MEMORY_STAT_KEYS = {
    1: ("total_inactive_anon", "total_active_anon", "total_unevictable", "total_inactive_file",
        "total_active_file"),
    2: ("inactive_anon", "active_anon", "unevictable", "inactive_file", "active_file"),
}
PAGE_COUNTER = {1: "memory.usage_in_bytes", 2: "memory.current"}


@dataclass(frozen=True, slots=True)
class PodMemory:
    """One pod's memory, read at the snapshot."""

    usage: int  # koordlet's pod memory usage: anon + unevictable (orders the victims)
    release: int  # what evicting it takes off the node's usage: page counter - file LRU (>= usage)


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    node_used: int  # bytes, MemTotal - MemAvailable: the lower of the readings before and after the pods
    pods: dict[str, PodMemory]  # uid -> its memory; pods whose files could not be read are missing


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def read_node_used(layout: CgroupLayout) -> int | None:
    """The node's memory usage now (``MemTotal - MemAvailable``, bytes); None when unreadable."""
    text = _read(layout.roots.proc_path("meminfo"))
    if text is None:
        return None
    info = parse_meminfo(text)
    if "MemTotal" not in info or "MemAvailable" not in info:
        return None
    return memory_usage_bytes(info)


def read_pod(layout: CgroupLayout, pod: PodMeta) -> PodMemory | None:
    """``pod``'s memory now, from its pod dir's ``memory.stat`` and page counter; None when either is
    missing or garbled (a pod without a cgroup yet, or one that is gone)."""
    version = layout.version
    hierarchy = "memory" if version == 1 else ""
    try:
        rel = layout.pod_dir(pod.kube_qos, pod.uid)
    except ValueError:
        return None
    stat = _read(layout.file(hierarchy, rel, "memory.stat"))
    counter = _int(_read(layout.file(hierarchy, rel, PAGE_COUNTER[version])))
    if stat is None or counter is None:
        return None
    values: dict[str, int] = {}
    for line in stat.splitlines():
        key, _, rest = line.partition(" ")
        v = _int(rest)
        if v is not None:
            values[key] = v
    keys = MEMORY_STAT_KEYS[version]
    if not all(k in values for k in keys):
        return None
    anon, active_anon, unevictable, inactive_file, active_file = (values[k] for k in keys)
    usage = anon + active_anon + unevictable
    # the counter also holds the file LRU (available to the node) and the kernel memory (not): the
    # kernel's batched counters may lag the LRU sizes by a few pages, never below the usage
    release = max(counter - inactive_file - active_file, usage)
    return PodMemory(usage, release)


def take(layout: CgroupLayout, pods: Iterable[PodMeta]) -> MemorySnapshot | None:
    """Node, pods, node again; None when the node cannot be read."""
    before = read_node_used(layout)
    if before is None:
        return None
    readings = {}
    for pod in pods:
        m = read_pod(layout, pod)
        if m is not None:
            readings[pod.uid] = m
    after = read_node_used(layout)
    node_used = before if after is None else min(before, after)
    return MemorySnapshot(node_used, readings)


