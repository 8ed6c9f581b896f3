"""Fake hosts: a realistic cgroup tree, procfs and sysfs laid out in a plain directory.

Tests, benchmarks, ``replay`` and ``simulate`` run the real agent code against these
trees, so every file is written in the format the kernel prints (same keys, same
order, same unlimited markers), and parsers are exercised on realistic text.

Layout under ``root`` (``P`` = the kubepods tree of :class:`CgroupLayout`, e.g.
``kubepods/besteffort/pod<uid>/<hash>``)::

    cgroup/                         the cgroup root (HostRoots.cgroup)
      v1: cpu/ cpuacct/ cpuset/ memory/ blkio/   one hierarchy per subsystem, each holding
          the kubelet root dirs, the pods root, the QoS dirs, pods and containers:
          cpu      cpu.cfs_quota_us (-1) cpu.cfs_period_us (100000) cpu.shares
                   cpu.cfs_burst_us (0) cpu.stat (nr_periods nr_throttled throttled_time
                   nr_bursts burst_time) tasks cgroup.procs
          cpuacct  cpuacct.usage cpuacct.stat (user/system in USER_HZ) tasks cgroup.procs
          cpuset   cpuset.cpus (all CPUs) cpuset.mems (all nodes) tasks cgroup.procs
          memory   memory.stat (the 42 keys of a 6.x kernel, totals after locals)
                   memory.limit_in_bytes (9223372036854771712) memory.usage_in_bytes
                   tasks cgroup.procs
          blkio    blkio.throttle.{read,write}_{bps,iops}_device (empty) tasks cgroup.procs
      v2: one unified tree.  The root holds cgroup.controllers ("cpuset cpu io memory
          pids"), cgroup.subtree_control, cgroup.procs, cgroup.threads, cpu.stat,
          memory.stat, cpuset.{cpus,mems}.effective and {cpu,memory,io}.pressure.  Every
          other dir adds cpu.max ("max 100000"), cpu.weight, cpu.max.burst (0), the full
          cpu.stat, cpuset.cpus (""), memory.current, memory.{min,low} (0),
          memory.{high,max} ("max"), io.max (""), io.weight ("default 100").
    proc/    stat (cpu + cpuN lines, intr, ctxt, btime, ...), meminfo (full key list),
             cpuinfo (one block per CPU), pressure/{cpu,memory,io},
             sys/vm/min_free_kbytes, sys/vm/watermark_scale_factor
    sys/     devices/system/cpu/{online,possible,present,smt/active}, per CPU
             topology/{core_id,physical_package_id,...} and cache/index0-3/{level,id,...};
             devices/system/node/nodeN/{cpulist,meminfo}; bus/node/devices/nodeN ->
             the node dir (a symlink, as on a real host); with ``resctrl=True``
             fs/resctrl/{schemata,tasks,info/L3/cbm_mask}.

CPUs are numbered as Linux numbers them on x86: the first threads of all cores
(socket by socket), then the second threads, so CPU ``i`` and ``i + n_cores`` are
siblings.  Cores are split evenly over sockets and NUMA nodes; the L3 id is the socket.

New cgroups start with zero usage, as the kernel creates them; tests set what they
assert on with :meth:`FakeHost.set_cpu_usage`, :meth:`FakeHost.set_memory` and friends.
Those setters touch exactly the directory named (no hierarchical propagation).

Speed: building 5,000 containers means ~10^5 files.  Bodies are precomputed per kind of
directory and written with ``os.open``/``os.write`` relative to a directory descriptor;
on tmpfs that takes about two seconds, on a slow disk much longer (prefer ``/dev/shm``).

Map of the file (:class:`FakeHost`, top to bottom): the cgroup files of each kind of directory
(templates), pods and containers (``add_pod``, ``remove_pod``), the setters tests use, procfs,
raw access, and the pod factory :meth:`FakeHost.make_pods`.  The CPU topology, sysfs and
``/proc/cpuinfo`` are :mod:`qosmanager.sim.fakesysfs`; the kernel's rules for what the agent
writes, :mod:`qosmanager.sim.fakekernel`.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.cpuset import format_cpu_list
from qosmanager.host.resources import shares_to_weight
from qosmanager.host.roots import HostRoots
from qosmanager.sim import koordnode
from qosmanager.sim.fakekernel import (
    BLKIO_THROTTLE_FILES,
    CFS_PERIOD_US,
    MEMORY_EVENTS_ZERO,
    PSI_ZERO,
    V1_CPU_STAT_KEYS,
    V1_HIERARCHIES,
    V1_MEMORY_STAT_KEYS,
    V1_MEMORY_UNLIMITED,
    V2_CONTROLLERS,
    V2_CPU_STAT_KEYS,
    V2_MEMORY_STAT_KEYS,
    V2_ROOT_CPU_STAT_KEYS,
    FakeKernel,
    register,
)
from qosmanager.sim.fakepod import FakeContainer, FakePod
from qosmanager.sim.fakesysfs import build_sys, cpuinfo, topology

if TYPE_CHECKING:
    from qosmanager.api.pod import PodMeta

USER_HZ = 100

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)

Files = list[tuple[str, bytes]]


def _kv(keys: Iterable[str], values: dict[str, int]) -> str:
    return "".join(f"{k} {values.get(k, 0)}\n" for k in keys)


def _parse_kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) >= 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def _write_files(dir_fd: int, files: Files) -> None:
    for name, body in files:
        fd = os.open(name, _FILE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            if body:
                os.write(fd, body)
        finally:
            os.close(fd)


class FakeHost:
    """Builds and edits a fake host under ``root`` (see the module docstring for the layout).

    A koordinator node unless built with ``koordinator=False``: :meth:`add_pod` writes what koordlet's
    batch-resource hook and the kubelet write into a pod's cgroups (:mod:`qosmanager.sim.koordnode`).
    """

    # whether a FakeHost lays its pods out as a koordinator node's when not told
    koordinator_default = True

    def __init__(self, root: str, version: int = 1, driver: str = "cgroupfs", kubelet_cgroup_root: str = "/",
                 n_cpus: int = 8, memory_bytes: int = 64 << 30, seed: int = 0, *, sockets: int = 1,
                 numa_nodes: int = 1, threads_per_core: int = 2, vendor: str = "GenuineIntel",
                 resctrl: bool = False, kernel: bool = True, koordinator: bool | None = None) -> None:
        if n_cpus < 1 or threads_per_core < 1 or sockets < 1 or numa_nodes < 1:
            raise ValueError("n_cpus, threads_per_core, sockets and numa_nodes must be positive")
        if n_cpus % threads_per_core:
            raise ValueError(f"{n_cpus} CPUs cannot be split into cores of {threads_per_core} threads")
        n_cores = n_cpus // threads_per_core
        if n_cores % sockets or n_cores % numa_nodes or (numa_nodes % sockets and sockets % numa_nodes):
            raise ValueError(f"{n_cores} cores cannot be split evenly over {sockets} sockets and "
                             f"{numa_nodes} NUMA nodes")
        if memory_bytes < (1 << 20):
            raise ValueError("memory_bytes must be at least 1 MiB")
        self.root = os.path.abspath(root)
        self.version = version
        self.n_cpus = n_cpus
        self.memory_bytes = memory_bytes
        self.sockets = sockets
        self.numa_nodes = numa_nodes
        self.threads_per_core = threads_per_core
        self.vendor = vendor
        self.resctrl = resctrl
        amd = vendor == "AuthenticAMD"
        self._mb_max = 2048 if amd else 100  # resctrl's unlimited MB value: 1/8 GBps units on AMD, % on Intel
        self.roots = HostRoots(cgroup=self.root + "/cgroup", proc=self.root + "/proc", sys=self.root + "/sys",
                               kubelet_cgroup_root=kubelet_cgroup_root)
        self.layout = CgroupLayout(self.roots, version, driver)
        self.pods: dict[str, FakePod] = {}
        self.koordinator = self.koordinator_default if koordinator is None else koordinator
        self._burstable_requests: dict[str, int] = {}  # koordinator node: a Burstable pod's CPU request
        self._burstable_total = 0  # their sum (milli-cores): the Burstable QoS dir's shares
        self._rng = random.Random(seed)
        self._all_cpus = format_cpu_list(range(n_cpus)).encode()
        self._all_mems = format_cpu_list(range(numa_nodes)).encode()
        self._templates: dict[tuple[str, str], list[tuple[str, Files]]] = {}
        self.processors = topology(n_cpus, threads_per_core, sockets, numa_nodes)
        for d in (self.roots.cgroup, self.roots.proc, self.roots.sys):
            os.makedirs(d, exist_ok=True)
        # The kernel of this host: the agent's mkdir and writes below its roots follow the kernel's rules.
        # Benchmarks build hosts without one (kernel=False): their figures measure the agent, not the fake.
        self.kernel: FakeKernel | None = None
        if kernel:
            self.kernel = FakeKernel(self.roots, version, n_cpus=n_cpus, n_mems=numa_nodes,
                                     mb_max=self._mb_max)
            register(self.kernel)
        self._build_cgroup_skeleton()
        if self.koordinator:  # the kubelet's Burstable QoS dir shares: its pods' requests, none yet
            koordnode.write_burstable_shares(self, 0)
        self._build_proc()
        build_sys(self.roots, self.processors, threads_per_core=threads_per_core, sockets=sockets,
                  numa_nodes=numa_nodes, memory_bytes=memory_bytes, mb_max=self._mb_max if resctrl else None)

    # ------------------------------------------------------------------
    # cgroup files
    # ------------------------------------------------------------------
    def _v1_memory_stat(self, inactive_anon: int = 0, active_anon: int = 0, unevictable: int = 0,
                        inactive_file: int = 0, active_file: int = 0) -> str:
        local = {
            "cache": inactive_file + active_file, "rss": inactive_anon + active_anon,
            "inactive_anon": inactive_anon, "active_anon": active_anon, "inactive_file": inactive_file,
            "active_file": active_file, "unevictable": unevictable,
            "hierarchical_memory_limit": V1_MEMORY_UNLIMITED, "hierarchical_memsw_limit": V1_MEMORY_UNLIMITED,
        }
        values = dict(local)
        values.update({"total_" + k: v for k, v in local.items() if not k.startswith("hierarchical")})
        return _kv(V1_MEMORY_STAT_KEYS, values)

    def _v2_memory_stat(self, inactive_anon: int = 0, active_anon: int = 0, unevictable: int = 0,
                        inactive_file: int = 0, active_file: int = 0) -> str:
        return _kv(V2_MEMORY_STAT_KEYS, {
            "anon": inactive_anon + active_anon, "file": inactive_file + active_file,
            "inactive_anon": inactive_anon, "active_anon": active_anon, "inactive_file": inactive_file,
            "active_file": active_file, "unevictable": unevictable,
        })

    def _shares(self, kind: str, qos: str) -> int:
        if kind == "kubepods":
            return min(262_144, self.n_cpus * 1024)
        if kind in ("pod", "container", "qos") and qos == KubeQoS.BESTEFFORT.value:
            return 2
        return 1024

    def _template(self, kind: str, qos: str = "") -> list[tuple[str, Files]]:
        """(hierarchy, files) of a new cgroup dir of ``kind`` (root, node, kubepods, qos, pod, container)."""
        key = (kind, qos)
        cached = self._templates.get(key)
        if cached is not None:
            return cached
        shares = self._shares(kind, qos)
        if self.version == 1:
            procs: Files = [("tasks", b""), ("cgroup.procs", b"")]
            tmpl = [
                ("cpu", [("cpu.cfs_quota_us", b"-1\n"), ("cpu.cfs_period_us", b"%d\n" % CFS_PERIOD_US),
                         ("cpu.shares", b"%d\n" % shares), ("cpu.cfs_burst_us", b"0\n"),
                         ("cpu.stat", _kv(V1_CPU_STAT_KEYS, {}).encode()), *procs]),
                ("cpuacct", [("cpuacct.usage", b"0\n"), ("cpuacct.stat", b"user 0\nsystem 0\n"), *procs]),
                ("cpuset", [("cpuset.cpus", self._all_cpus + b"\n"), ("cpuset.mems", self._all_mems + b"\n"),
                            *procs]),
                ("memory", [("memory.stat", self._v1_memory_stat().encode()),
                            ("memory.limit_in_bytes", b"%d\n" % V1_MEMORY_UNLIMITED),
                            ("memory.soft_limit_in_bytes", b"%d\n" % V1_MEMORY_UNLIMITED),
                            ("memory.usage_in_bytes", b"0\n"), *procs]),
                ("blkio", [*((n, b"") for n in BLKIO_THROTTLE_FILES), *procs]),
            ]
        else:
            leaf = kind == "container"
            common: Files = [
                ("cgroup.controllers", V2_CONTROLLERS.encode() + b"\n"),
                ("cgroup.subtree_control", b"" if leaf else V2_CONTROLLERS.encode() + b"\n"),
                ("cgroup.procs", b""), ("cgroup.threads", b""),
                ("cpuset.cpus.effective", self._all_cpus + b"\n"),
                ("cpuset.mems.effective", self._all_mems + b"\n"),
                ("memory.stat", self._v2_memory_stat().encode()),
                ("cpu.pressure", PSI_ZERO.encode()), ("memory.pressure", PSI_ZERO.encode()),
                ("io.pressure", PSI_ZERO.encode()),
            ]
            if kind == "root":
                files = [*common, ("cpu.stat", _kv(V2_ROOT_CPU_STAT_KEYS, {}).encode())]
            else:
                files = [
                    *common, ("cpu.stat", _kv(V2_CPU_STAT_KEYS, {}).encode()),
                    ("cpu.max", b"max %d\n" % CFS_PERIOD_US),
                    ("cpu.weight", b"%d\n" % shares_to_weight(shares)),
                    ("cpu.max.burst", b"0\n"), ("cpuset.cpus", b"\n"), ("cpuset.mems", b"\n"),
                    ("memory.current", b"0\n"), ("memory.min", b"0\n"), ("memory.low", b"0\n"),
                    ("memory.high", b"max\n"), ("memory.max", b"max\n"),
                    ("memory.events", MEMORY_EVENTS_ZERO.encode()),
                    ("memory.events.local", MEMORY_EVENTS_ZERO.encode()), ("memory.reclaim", b""), ("io.max", b""),
                    ("io.weight", b"default 100\n"),
                ]
            tmpl = [("", files)]
        self._templates[key] = tmpl
        return tmpl

    def _make_cgroup(self, rel: str, kind: str, qos: str = "", pids: list[int] | None = None) -> None:
        if pids and self.kernel is not None:
            self.kernel.spawn(pids)
        for hierarchy, files in self._template(kind, qos):
            path = self.layout.abs_dir(hierarchy, rel)
            if self.kernel is not None and rel:
                with contextlib.suppress(FileExistsError):
                    self.kernel.mkdir(path)  # the kernel's files and initial values
            else:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path)
            if pids:
                body = "".join(f"{p}\n" for p in pids).encode()
                names = ("tasks", "cgroup.procs", "cgroup.threads")
                files = [(n, body if n in names else b) for n, b in files]
            # then what the kubelet and the runtime write (shares, cpusets, subtree_control, pids) and the
            # statistics a running host would show
            dfd = os.open(path, _DIR_FLAGS)
            try:
                _write_files(dfd, files)
            finally:
                os.close(dfd)

    def _build_cgroup_skeleton(self) -> None:
        if self.version == 1:
            for h in V1_HIERARCHIES:
                os.makedirs(self.layout.abs_dir(h, ""), exist_ok=True)
        self._make_cgroup("", "root")
        parts = self.roots.kubelet_rel.split("/") if self.roots.kubelet_rel else []
        for i in range(len(parts)):
            self._make_cgroup("/".join(parts[: i + 1]), "node")
        self._make_cgroup(self.layout.kubepods_dir(), "kubepods")
        for qos in (KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT):
            self._make_cgroup(self.layout.qos_dir(qos), "qos", qos.value)

    # ------------------------------------------------------------------
    # pods
    # ------------------------------------------------------------------
    def pod_dir(self, uid: str) -> str:
        """Relative dir of a pod added to this host."""
        pod = self._pod(uid)
        return self.layout.pod_dir(pod.qos, pod.uid)

    def container_dir(self, uid: str, name: str) -> str:
        """Relative dir of a container of a pod added to this host."""
        pod = self._pod(uid)
        for c in pod.containers:
            if c.name == name:
                return self.layout.container_dir(self.layout.pod_dir(pod.qos, uid), c.container_id)
        raise KeyError(f"pod {uid} has no container {name!r}")

    def _pod(self, uid: str) -> FakePod:
        try:
            return self.pods[uid]
        except KeyError:
            raise KeyError(f"no pod with uid {uid!r} on this fake host") from None

    def add_pod(self, pod: FakePod, meta: PodMeta | None = None) -> None:
        """Create the pod's dir and its containers' (and sandbox's) dirs in every hierarchy.

        All paths are computed first: a pod with a bad UID or container ID raises
        ValueError and leaves nothing behind.  On a koordinator node the hooks' and the kubelet's
        values follow, from ``meta`` (the pod's object) or else from the object
        :func:`~qosmanager.sim.objects.pod_object` makes of the pod with its default resources.
        """
        if pod.uid in self.pods:
            raise ValueError(f"pod {pod.uid} is already on this fake host")
        qos = KubeQoS(pod.qos)
        pod_rel = self.layout.pod_dir(qos, pod.uid)
        names = [c.name for c in pod.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"pod {pod.uid} has duplicate container names {names}")
        containers = [(self.layout.container_dir(pod_rel, c.container_id), c.pids) for c in pod.containers]
        if pod.sandbox_id:
            containers.append((self.layout.container_dir(pod_rel, pod.sandbox_id), []))
        self._make_cgroup(pod_rel, "pod", qos.value)
        for rel, pids in containers:
            self._make_cgroup(rel, "container", qos.value, pids)
        self.pods[pod.uid] = FakePod(uid=pod.uid, namespace=pod.namespace, name=pod.name, qos=qos,
                                     containers=list(pod.containers), sandbox_id=pod.sandbox_id)
        if self.koordinator:
            request = koordnode.lay_out_fake_pod(self, self.pods[pod.uid], meta)
            if qos is KubeQoS.BURSTABLE:
                self._burstable_requests[pod.uid] = request
                self._burstable_total += request
                koordnode.write_burstable_shares(self, self._burstable_total)

    def add_pods(self, pods: Iterable[FakePod]) -> None:
        for pod in pods:
            self.add_pod(pod)

    def _rmtree(self, rel: str) -> None:
        for h in V1_HIERARCHIES if self.version == 1 else ("",):
            shutil.rmtree(self.layout.abs_dir(h, rel), ignore_errors=True)

    def remove_pod(self, uid: str) -> None:
        """Remove the pod's dirs (containers included) from every hierarchy."""
        rel = self.pod_dir(uid)
        self._rmtree(rel)
        pod = self.pods.pop(uid)
        if uid in self._burstable_requests:
            self._burstable_total -= self._burstable_requests.pop(uid)
            koordnode.write_burstable_shares(self, self._burstable_total)
        if self.kernel is not None:
            self.kernel.exit([p for c in pod.containers for p in c.pids])

    def remove_container(self, uid: str, name: str) -> None:
        """Remove one container's dirs; the pod stays."""
        rel = self.container_dir(uid, name)
        self._rmtree(rel)
        pod = self.pods[uid]
        if self.kernel is not None:
            self.kernel.exit([p for c in pod.containers if c.name == name for p in c.pids])
        pod.containers = [c for c in pod.containers if c.name != name]

    # ------------------------------------------------------------------
    # setters
    # ------------------------------------------------------------------
    def _cg_file(self, subsystem: str, rel_dir: str, name: str) -> str:
        path = self.layout.file(subsystem, rel_dir, name)
        if not os.path.isdir(os.path.dirname(path)):
            raise FileNotFoundError(f"no cgroup dir {rel_dir!r} on this fake host ({os.path.dirname(path)})")
        return path

    @staticmethod
    def _put(path: str, body: str) -> None:
        """Replace a file's contents in place (the agent keeps its descriptors open), never through an
        empty file: the new bytes over the old, then the length cut.  A reader between the two sees at
        worst the old tail after a shorter new body; counters only grow, so their bodies rarely shrink.
        (``open(path, "w")`` truncates first, and a collector read in that moment saw an empty
        ``/proc/stat``, which a kernel file never is.)"""
        data = body.encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    @staticmethod
    def _get(path: str) -> str:
        with open(path) as f:
            return f.read()

    def _update_kv(self, path: str, keys: tuple[str, ...], updates: dict[str, int]) -> None:
        values = _parse_kv(self._get(path))
        values.update(updates)
        present = tuple(k for k in keys if k in values) + tuple(k for k in values if k not in keys)
        self._put(path, _kv(present, values))

    def set_cpu_usage(self, rel_dir: str, usage_ns: int) -> None:
        """Cumulative CPU time of a cgroup: v1 ``cpuacct.usage`` (ns) and ``cpuacct.stat``
        (USER_HZ ticks, 70 % user); v2 ``cpu.stat`` ``usage_usec`` and its user/system split."""
        if usage_ns < 0:
            raise ValueError("usage_ns must be >= 0")
        user_share = usage_ns * 7 // 10
        if self.version == 1:
            self._put(self._cg_file("cpuacct", rel_dir, "cpuacct.usage"), f"{usage_ns}\n")
            ticks_user = user_share * USER_HZ // 10**9
            ticks_sys = (usage_ns - user_share) * USER_HZ // 10**9
            self._put(self._cg_file("cpuacct", rel_dir, "cpuacct.stat"),
                      f"user {ticks_user}\nsystem {ticks_sys}\n")
        else:
            usage_us = usage_ns // 1000
            user_us = usage_us * 7 // 10
            self._update_kv(self._cg_file("cpu", rel_dir, "cpu.stat"), V2_CPU_STAT_KEYS,
                            {"usage_usec": usage_us, "user_usec": user_us, "system_usec": usage_us - user_us})

    def set_throttle(self, rel_dir: str, nr_periods: int, nr_throttled: int, throttled_ns: int) -> None:
        """CFS bandwidth counters in ``cpu.stat`` (v1 ``throttled_time`` ns, v2 ``throttled_usec``)."""
        if nr_throttled > nr_periods or min(nr_periods, nr_throttled, throttled_ns) < 0:
            raise ValueError("need 0 <= nr_throttled <= nr_periods and throttled_ns >= 0")
        path = self._cg_file("cpu", rel_dir, "cpu.stat")
        if self.version == 1:
            self._update_kv(path, V1_CPU_STAT_KEYS, {"nr_periods": nr_periods, "nr_throttled": nr_throttled,
                                                     "throttled_time": throttled_ns})
        else:
            self._update_kv(path, V2_CPU_STAT_KEYS, {"nr_periods": nr_periods, "nr_throttled": nr_throttled,
                                                     "throttled_usec": throttled_ns // 1000})

    def set_memory(self, rel_dir: str, inactive_anon: int, active_anon: int, unevictable: int,
                   inactive_file: int, active_file: int) -> None:
        """LRU sizes in bytes: rewrites ``memory.stat`` (v1 local and ``total_*`` keys alike,
        v2 plus ``anon``/``file``) and the usage file (their sum)."""
        values = (inactive_anon, active_anon, unevictable, inactive_file, active_file)
        if min(values) < 0:
            raise ValueError("memory sizes must be >= 0")
        if self.version == 1:
            self._put(self._cg_file("memory", rel_dir, "memory.stat"), self._v1_memory_stat(*values))
            self._put(self._cg_file("memory", rel_dir, "memory.usage_in_bytes"), f"{sum(values)}\n")
        else:
            self._put(self._cg_file("memory", rel_dir, "memory.stat"), self._v2_memory_stat(*values))
            if rel_dir:  # the v2 root has no memory.current
                self._put(self._cg_file("memory", rel_dir, "memory.current"), f"{sum(values)}\n")

    def set_tasks(self, rel_dir: str, pids: list[int]) -> None:
        """The processes of a cgroup: v1 ``tasks``/``cgroup.procs`` of every hierarchy,
        v2 ``cgroup.procs``/``cgroup.threads``."""
        body = "".join(f"{p}\n" for p in pids)
        if self.kernel is not None:
            self.kernel.spawn(pids)
        if self.version == 1:
            for h in V1_HIERARCHIES:
                for name in ("tasks", "cgroup.procs"):
                    self._put(self._cg_file(h, rel_dir, name), body)
        else:
            for name in ("cgroup.procs", "cgroup.threads"):
                self._put(self._cg_file("", rel_dir, name), body)

    # ------------------------------------------------------------------
    # procfs
    # ------------------------------------------------------------------
    @staticmethod
    def _split_busy(busy: int) -> tuple[int, int, int, int, int]:
        """busy ticks -> user, nice, system, irq, softirq (summing back to busy)."""
        user, nice, system, irq = busy * 6 // 10, busy // 20, busy * 2 // 10, busy // 40
        return user, nice, system, irq, busy - user - nice - system - irq

    def set_proc_stat(self, busy_ticks_per_cpu: list[int], idle_ticks_per_cpu: list[int]) -> None:
        """Write ``/proc/stat``: busy ticks spread over user/nice/system/irq/softirq, idle in idle."""
        if len(busy_ticks_per_cpu) != len(idle_ticks_per_cpu) or not busy_ticks_per_cpu:
            raise ValueError("busy and idle ticks need one (and the same number of) entry per CPU")
        if min(*busy_ticks_per_cpu, *idle_ticks_per_cpu) < 0:
            raise ValueError("ticks must be >= 0")
        rows = []
        for busy, idle in zip(busy_ticks_per_cpu, idle_ticks_per_cpu):
            u, n, s, irq, soft = self._split_busy(busy)
            rows.append((u, n, s, idle, 0, irq, soft, 0, 0, 0))
        total = [sum(col) for col in zip(*rows)]
        lines = ["cpu  " + " ".join(map(str, total))]
        lines += [f"cpu{i} " + " ".join(map(str, r)) for i, r in enumerate(rows)]
        intr = sum(busy_ticks_per_cpu) * 3
        lines += [
            f"intr {intr} " + " ".join(["0"] * 16),
            f"ctxt {intr * 2}",
            "btime 1700000000",
            f"processes {1000 + len(self.pods) * 3}",
            "procs_running 1",
            "procs_blocked 0",
            f"softirq {total[6]} 0 {total[6] // 2} 0 0 0 0 0 {total[6] - total[6] // 2} 0 0",
        ]
        self._put(self.roots.proc_path("stat"), "\n".join(lines) + "\n")

    def set_meminfo(self, total_kb: int, free_kb: int, available_kb: int) -> None:
        """Write ``/proc/meminfo`` with the full key list; other values are derived plausibly."""
        if not 0 <= free_kb <= available_kb <= total_kb:
            raise ValueError("need 0 <= free_kb <= available_kb <= total_kb")
        reclaimable = available_kb - free_kb
        buffers = reclaimable // 50
        cached = reclaimable - buffers
        used = total_kb - available_kb
        anon = used * 6 // 10
        slab = used - anon
        active_file, inactive_file = cached // 2, cached - cached // 2
        active_anon, inactive_anon = anon * 2 // 3, anon - anon * 2 // 3
        entries = [
            ("MemTotal", total_kb), ("MemFree", free_kb), ("MemAvailable", available_kb),
            ("Buffers", buffers), ("Cached", cached), ("SwapCached", 0),
            ("Active", active_anon + active_file),
            ("Inactive", inactive_anon + inactive_file), ("Active(anon)", active_anon),
            ("Inactive(anon)", inactive_anon), ("Active(file)", active_file),
            ("Inactive(file)", inactive_file),
            ("Unevictable", 0), ("Mlocked", 0), ("SwapTotal", 0), ("SwapFree", 0), ("Zswap", 0),
            ("Zswapped", 0), ("Dirty", 0), ("Writeback", 0), ("AnonPages", anon), ("Mapped", cached // 10),
            ("Shmem", 0), ("KReclaimable", slab // 2), ("Slab", slab), ("SReclaimable", slab // 2),
            ("SUnreclaim", slab - slab // 2), ("KernelStack", 0), ("PageTables", 0), ("SecPageTables", 0),
            ("NFS_Unstable", 0), ("Bounce", 0), ("WritebackTmp", 0), ("CommitLimit", total_kb // 2),
            ("Committed_AS", anon), ("VmallocTotal", 34359738367), ("VmallocUsed", 0), ("VmallocChunk", 0),
            ("Percpu", 0), ("HardwareCorrupted", 0), ("AnonHugePages", 0), ("ShmemHugePages", 0),
            ("ShmemPmdMapped", 0), ("FileHugePages", 0), ("FilePmdMapped", 0),
        ]
        lines = [f"{k + ':':<16}{v:>8} kB" for k, v in entries]
        lines += [f"{k + ':':<16}{v:>8}" for k, v in (("HugePages_Total", 0), ("HugePages_Free", 0),
                                                      ("HugePages_Rsvd", 0), ("HugePages_Surp", 0))]
        lines += [f"{k + ':':<16}{v:>8} kB" for k, v in (("Hugepagesize", 2048), ("Hugetlb", 0),
                                                         ("DirectMap4k", 0), ("DirectMap2M", 0),
                                                         ("DirectMap1G", total_kb))]
        self._put(self.roots.proc_path("meminfo"), "\n".join(lines) + "\n")

    def _build_proc(self) -> None:
        os.makedirs(self.roots.proc_path("pressure"), exist_ok=True)
        os.makedirs(self.roots.proc_path("sys/vm"), exist_ok=True)
        rng = self._rng
        busy = [rng.randrange(1_000, 100_000) for _ in range(self.n_cpus)]
        self.set_proc_stat(busy, [b * 4 for b in busy])
        total_kb = self.memory_bytes // 1024
        self.set_meminfo(total_kb, total_kb * 9 // 10, total_kb * 19 // 20)
        self._put(self.roots.proc_path("cpuinfo"), cpuinfo(self.processors, self.vendor, self.resctrl,
                                                         self.threads_per_core, self.sockets))
        for res in ("cpu", "memory", "io"):
            some_total = rng.randrange(0, 10_000_000)
            full_total = 0 if res == "cpu" else some_total // 2
            self._put(self.roots.proc_path(f"pressure/{res}"),
                      f"some avg10=0.00 avg60=0.00 avg300=0.00 total={some_total}\n"
                      f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full_total}\n")
        # The kernel's default: int_sqrt(lowmem_kbytes * 16), clamped to [128, 262144].
        min_free = max(128, min(262_144, math.isqrt(total_kb * 16)))
        self._put(self.roots.proc_path("sys/vm/min_free_kbytes"), f"{min_free}\n")
        self._put(self.roots.proc_path("sys/vm/watermark_scale_factor"), "10\n")

    # ------------------------------------------------------------------
    # raw access
    # ------------------------------------------------------------------
    def path(self, rel_path_under_root: str) -> str:
        """Absolute path of ``rel`` under the fake host root; ``..`` may not climb out."""
        parts = [p for p in rel_path_under_root.split("/") if p and p != "."]
        if ".." in parts or not parts:
            raise ValueError(f"{rel_path_under_root!r} does not name a file under the fake host root")
        return self.root + "/" + "/".join(parts)

    def write(self, rel_path_under_root: str, content: str) -> None:
        """Write a file under the root (``"cgroup/cpu/kubepods/cpu.shares"``), creating parent dirs."""
        path = self.path(rel_path_under_root)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._put(path, content)
        if self.kernel is not None and os.path.basename(path) in ("tasks", "cgroup.procs", "cgroup.threads"):
            # a tasks file laid out by hand names processes of this host
            self.kernel.spawn([int(t) for t in content.split() if t.isascii() and t.isdigit()])

    def read(self, rel_path_under_root: str) -> str:
        return self._get(self.path(rel_path_under_root))

    # ------------------------------------------------------------------
    # pod factory
    # ------------------------------------------------------------------
    @staticmethod
    def make_pods(n_containers: int, containers_per_pod: int = 2, seed: int = 0,
                  be_fraction: float = 0.5) -> list[FakePod]:
        """Deterministic pods holding ``n_containers`` containers in total.

        ``n_pods * be_fraction`` pods (rounded half up) are BestEffort, the rest alternate Guaranteed
        and Burstable; classes are shuffled by ``seed``.  UIDs are UUID4-shaped and
        container IDs ``containerd://<64 hex>``, both drawn from ``seed``.  The last pod
        holds the remainder when ``n_containers`` is not a multiple.
        """
        if n_containers < 0 or containers_per_pod < 1:
            raise ValueError("need n_containers >= 0 and containers_per_pod >= 1")
        if not 0.0 <= be_fraction <= 1.0:
            raise ValueError(f"be_fraction must be within [0, 1], got {be_fraction}")
        rng = random.Random(seed)
        n_pods = -(-n_containers // containers_per_pod)
        n_be = int(n_pods * be_fraction + 0.5)
        classes = [KubeQoS.BESTEFFORT] * n_be + [
            KubeQoS.GUARANTEED if i % 2 == 0 else KubeQoS.BURSTABLE for i in range(n_pods - n_be)]
        rng.shuffle(classes)
        pods = []
        left = n_containers
        for i, qos in enumerate(classes):
            k = min(containers_per_pod, left)
            left -= k
            uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            containers = [FakeContainer(name=f"c{j}", container_id=f"containerd://{rng.getrandbits(256):064x}")
                          for j in range(k)]
            prefix = "be" if qos is KubeQoS.BESTEFFORT else "ls"
            pods.append(FakePod(uid=uid, namespace="default", name=f"{prefix}-{i}", qos=qos,
                                containers=containers))
        return pods
