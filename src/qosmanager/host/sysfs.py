"""CPU topology and NUMA memory from sysfs.

koordlet shells out to ``lscpu -e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE``; everything lscpu
prints there comes from sysfs, so we read it directly (no subprocess, works on a fake
tree):

* online CPUs: ``devices/system/cpu/online`` (else the ``cpuN`` dirs);
* per CPU: ``cpuN/topology/physical_package_id`` and ``core_id``, the L3 id from the
  ``cpuN/cache/index*/`` whose ``level`` is 3 (its ``id`` file);
* NUMA node: ``devices/system/node/nodeN/cpulist``;
* HT: ``devices/system/cpu/smt/active``, else whether any core has two CPUs;
* NUMA memory: ``bus/node/devices/nodeN/meminfo``.

The per-CPU files (seven or so a CPU: 450 at 64 CPUs) are read in native batches (open, read, close:
:mod:`qosmanager._native.sysio`), with the same answers as one by one.  The agent re-reads the topology
every minute (koordlet's node-info interval) through :class:`TopologyReader`, which reads them again
only when a few files say the answer can have changed (see there).

Like lscpu, ``core`` is a *logical* core number, unique on the node: sysfs ``core_id``
restarts in every socket (and has gaps), so cores are numbered in order of first
appearance of each (socket, core_id) pair by CPU id.  Missing files fall back to
sensible defaults (core = its own CPU, socket 0, node 0, L3 = socket) rather than fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qosmanager._native import sysio
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.host.procfs import parse_cpuinfo
from qosmanager.host.roots import HostRoots

_CPU_DIR_RE = re.compile(r"cpu(\d+)")
_NODE_DIR_RE = re.compile(r"node(\d+)")


@dataclass(frozen=True)
class Processor:
    """One logical CPU: its id, logical core, socket, NUMA node and L3 cache id."""

    cpu: int
    core: int
    socket: int
    node: int
    l3: int


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _read_cpu_list(path: str) -> list[int] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_cpu_list(text)
    except ValueError:
        return None


def _numbered_dirs(path: str, pattern: re.Pattern[str]) -> list[int]:
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := pattern.fullmatch(n)))


def online_cpus(roots: HostRoots) -> list[int]:
    """Online CPU ids: ``devices/system/cpu/online``, else every ``cpuN`` dir."""
    cpus = _read_cpu_list(roots.sys_path("devices/system/cpu/online"))
    if cpus:
        return cpus
    return _numbered_dirs(roots.sys_path("devices/system/cpu"), _CPU_DIR_RE)


def _cpu_to_node(roots: HostRoots) -> dict[int, int]:
    base = roots.sys_path("devices/system/node")
    out: dict[int, int] = {}
    for node in _numbered_dirs(base, _NODE_DIR_RE):
        for cpu in _read_cpu_list(f"{base}/node{node}/cpulist") or []:
            out.setdefault(cpu, node)
    return out


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _read_ints(paths: Sequence[str]) -> list[int | None]:
    """``_read_int`` of every path, in native batches: opened, read and closed together."""
    return [None if d is None else _int(d.decode("ascii", errors="replace")) for d in _read_texts(paths, 256)]


def _l3_ids(cpu_dirs: Sequence[str]) -> list[int | None]:
    """Each CPU's L3 id: the ``id`` of the first ``cache/index*`` (in name order) whose ``level`` is 3."""
    indexes: list[list[str]] = []
    for d in cpu_dirs:
        try:
            names = sorted(n for n in os.listdir(d + "/cache") if n.startswith("index"))
        except OSError:
            names = []
        indexes.append([f"{d}/cache/{n}" for n in names])
    levels = _read_ints([f"{i}/level" for names in indexes for i in names])
    chosen: list[str | None] = []
    k = 0
    for names in indexes:
        found = next((i for j, i in enumerate(names) if levels[k + j] == 3), None)
        chosen.append(found)
        k += len(names)
    ids = iter(_read_ints([f"{i}/id" for i in chosen if i is not None]))
    return [None if i is None else next(ids) for i in chosen]


def read_topology(roots: HostRoots) -> list[Processor]:
    """The online CPUs, sorted by (node, socket, core, cpu) as koordlet sorts lscpu's rows."""
    cpu_base = roots.sys_path("devices/system/cpu")
    node_of = _cpu_to_node(roots)
    core_numbers: dict[tuple[int, int], int] = {}
    out: list[Processor] = []
    cpus = online_cpus(roots)
    dirs = [f"{cpu_base}/cpu{cpu}" for cpu in cpus]
    ids = _read_ints([f"{d}/topology/{f}" for d in dirs for f in ("physical_package_id", "core_id")])
    l3s = _l3_ids(dirs)
    for k, cpu in enumerate(cpus):
        socket, core_id, l3 = ids[2 * k], ids[2 * k + 1], l3s[k]
        if socket is None or socket < 0:  # some VMs and ARM boards report -1
            socket = 0
        key = (socket, core_id) if core_id is not None and core_id >= 0 else (socket, -1 - cpu)
        core = core_numbers.setdefault(key, len(core_numbers))
        out.append(Processor(cpu=cpu, core=core, socket=socket, node=node_of.get(cpu, 0),
                             l3=socket if l3 is None or l3 < 0 else l3))
    out.sort(key=lambda p: (p.node, p.socket, p.core, p.cpu))
    return out


@dataclass(frozen=True)
class NodeCPUInfo:
    """The node's processors plus what resctrl and the CPU strategies need to know."""

    processors: list[Processor]
    vendor: str = ""
    model: str = ""
    cbm_mask: str | None = None
    ht: bool = False
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def number_cpus(self) -> int:
        return len(self.processors)

    @cached_property
    def l3_ids(self) -> list[int]:
        """Distinct L3 cache ids, ascending."""
        return sorted({p.l3 for p in self.processors})

    @cached_property
    def cpus_by_l3(self) -> dict[int, list[int]]:
        """L3 id -> its CPU ids (ascending): koordlet's ``TotalInfo.L3ToCPU``."""
        out: dict[int, list[int]] = {}
        for p in sorted(self.processors, key=lambda p: p.cpu):
            out.setdefault(p.l3, []).append(p.cpu)
        return dict(sorted(out.items()))

    @cached_property
    def numa_nodes(self) -> list[int]:
        return sorted({p.node for p in self.processors})

    @cached_property
    def sockets(self) -> list[int]:
        return sorted({p.socket for p in self.processors})


def _ht_active(roots: HostRoots, processors: list[Processor]) -> bool:
    active = _read_int(roots.sys_path("devices/system/cpu/smt/active"))
    if active is not None:
        return active == 1
    cores = [p.core for p in processors]
    return len(set(cores)) < len(cores)


def read_node_cpu_info(roots: HostRoots) -> NodeCPUInfo:
    """Topology from sysfs, vendor/model/flags from ``/proc/cpuinfo``, the L3 CBM mask from
    resctrl (``<sys>/fs/resctrl/info/L3/cbm_mask``, None when resctrl is not mounted)."""
    processors = read_topology(roots)
    cpuinfo_text = _read(roots.proc_path("cpuinfo"))
    info = parse_cpuinfo(cpuinfo_text) if cpuinfo_text is not None else None
    cbm_text = _read(roots.sys_path("fs/resctrl/info/L3/cbm_mask"))
    cbm = cbm_text.strip() if cbm_text is not None else None
    return NodeCPUInfo(
        processors=processors,
        vendor=info.vendor_id if info else "",
        model=info.model_name if info else "",
        cbm_mask=cbm or None,
        ht=_ht_active(roots, processors),
        flags=info.flags if info else frozenset(),
    )


def _read_texts(paths: Sequence[str], size: int = 4096) -> list[bytes | None]:
    """Each file's content (its first ``size`` bytes), in native batches; None where it cannot be read."""
    if not paths:
        return []
    fds = sysio.open_batch(paths, os.O_RDONLY)
    ok = np.flatnonzero(fds >= 0)
    out: list[bytes | None] = [None] * len(paths)
    try:
        data = sysio.pread_batch(fds[ok], size) if ok.size else []
    finally:
        sysio.close_batch(fds[ok])
    for k, d in zip(ok.tolist(), data):
        if isinstance(d, bytes):
            out[k] = d
    return out


class TopologyReader:
    """:func:`read_node_cpu_info`, read again in full only when its answer can have changed.

    What changes on a running node is which CPUs are online (hotplug), SMT switched on or off, the NUMA
    nodes' CPUs, and resctrl (mounted, its mask): the *signature*, a few files (``cpu/online``,
    ``cpu/smt/active``, ``node/nodeN/cpulist``, resctrl's ``cbm_mask``) read in one batch, against the
    hundreds of per-CPU files of a full read (seven or so a CPU, and a listing of each CPU's caches).  A
    CPU that stays online keeps its package, core and caches, and ``/proc/cpuinfo`` names the same
    processors.  While the signature holds, :meth:`read` returns the last full read; it reads everything
    again when it changed, and every ``full_every``-th call whatever it says (a CPU replaced between two
    calls, offline and back, leaves the signature as it was)."""

    def __init__(self, roots: HostRoots, full_every: int = 10) -> None:
        self.roots = roots
        self.full_every = full_every
        self.full_reads = 0
        self.info: NodeCPUInfo | None = None  # the last full read's (kept when a read fails)
        self._signature: tuple[bytes | None, ...] | None = None
        self._since_full = 0

    def signature(self) -> tuple[bytes | None, ...]:
        """The files whose content a full read's answer follows (see the class docstring)."""
        base = self.roots.sys_path("devices/system/node")
        nodes = [f"{base}/node{n}/cpulist" for n in _numbered_dirs(base, _NODE_DIR_RE)]
        paths = [self.roots.sys_path("devices/system/cpu/online"), self.roots.sys_path("devices/system/cpu/smt/active"),
                 self.roots.sys_path("fs/resctrl/info/L3/cbm_mask"), *nodes]
        return (str(len(nodes)).encode(), *_read_texts(paths))

    def read(self) -> NodeCPUInfo:
        """The node's CPU information: the last full read while the signature holds, else a new one."""
        signature = self.signature()
        self._since_full += 1
        if self.info is None or signature != self._signature or self._since_full >= self.full_every:
            self.info = read_node_cpu_info(self.roots)  # raises as it does (the signature is kept only after)
            self._signature = signature
            self._since_full = 0
            self.full_reads += 1
        return self.info


# ---------------------------------------------------------------------------
# NUMA memory
# ---------------------------------------------------------------------------
def parse_numa_meminfo(text: str) -> dict[str, int]:
    """``Node N Key:   V kB`` lines -> {Key: V}; the ``Node N`` prefix is dropped, bad values read 0."""
    out: dict[str, int] = {}
    for line in text.split("\n"):
        fields = line.split()
        if len(fields) < 4 or fields[0] != "Node" or not fields[2].endswith(":"):
            continue
        try:
            out[fields[2][:-1]] = int(fields[3])
        except ValueError:
            out[fields[2][:-1]] = 0
    return out


def numa_meminfo(roots: HostRoots) -> dict[int, dict[str, int]]:
    """NUMA node id -> its meminfo (KiB; HugePages_* as page counts).

    Generic-initiator nodes (``devices/system/node/has_generic_initiator``) have no
    memory of their own and are skipped.  As in koordlet, the node ids must run 0..max
    without gaps, or the read is an error: per-node arrays built from it are indexed by
    node id.
    """
    base = roots.sys_path("bus/node/devices")
    skip = set(_read_cpu_list(roots.sys_path("devices/system/node/has_generic_initiator")) or [])
    nodes = _numbered_dirs(base, _NODE_DIR_RE)
    if nodes and len(nodes) != nodes[-1] + 1:
        raise ValueError(f"NUMA node ids {nodes} under {base} are not contiguous from 0")
    out: dict[int, dict[str, int]] = {}
    for node in nodes:
        if node in skip:
            continue
        text = _read(f"{base}/node{node}/meminfo")
        if text is None:
            raise ValueError(f"{base}/node{node}/meminfo cannot be read")
        out[node] = parse_numa_meminfo(text)
    return out


def numa_usage_bytes(meminfo: dict[str, int]) -> int:
    """A NUMA node's used memory: MemTotal - (MemFree + Active(file) + Inactive(file) +
    SReclaimable), in bytes, floored at 0."""
    free = (meminfo.get("MemFree", 0) + meminfo.get("Active(file)", 0) + meminfo.get("Inactive(file)", 0)
            + meminfo.get("SReclaimable", 0))
    return max(0, meminfo.get("MemTotal", 0) - free) * 1024
