"""The fake kernel: the rules of cgroup v1, cgroup v2 and resctrl for the files the agent touches,
applied to a fake host's plain directory tree.

A :class:`FakeKernel` owns the cgroup root and the resctrl directory of one fake host.  It is the
kernel side of the host: the agent's executor makes directories and writes files through the
sysio layer (:mod:`qosmanager._native`), and :func:`install` puts this module in front of that layer
for every path below a live fake kernel's root, so the agent's very own write path meets these rules.
Paths elsewhere (a real ``/sys/fs/cgroup``) reach the real functions untouched, and with no fake
kernel alive the wrappers cost one dictionary test per call.

What it models (each rule is the kernel's, the errno too):

* **mkdir** in a cgroup hierarchy creates that controller's files with the kernel's initial values:
  on v1 the files of the hierarchy's subsystem (a new cpuset starts empty, as without
  ``cgroup.clone_children``), on v2 the core files plus those of each controller the parent's
  ``cgroup.subtree_control`` enables, and ``cgroup.controllers`` lists them.  **mkdir in resctrl**
  creates ``schemata`` (the root group's lines), ``tasks``, ``cpus``, ``cpus_list``, ``mode`` and
  ``size``; a group beyond the CLOSIDs (``info/L3/num_closids``) is ENOSPC.
* **writes** are parsed as the kernel parses them and refused with its errno: CFS quota below 1 ms,
  a period outside [1 ms, 1 s], a burst above the quota (EINVAL); on v1 a quota above the parent's or
  below a child's (EINVAL, the hierarchical bandwidth check; v2 clamps instead); ``cpu.shares`` clamped
  to [2, 262144]; ``cpu.weight`` outside [1, 10000] (ERANGE); on v1 a cpuset outside the parent's
  (EACCES) or a parent shrunk below a child (EBUSY), CPUs beyond the machine's (ERANGE), a malformed list
  (EINVAL); a memory value
  that is not a number or "max" (EINVAL), numbers rounded down to whole pages; ``tasks`` and
  ``cgroup.procs`` naming a pid that does not exist (ESRCH), v1 cpusets without CPUs (ENOSPC), v2
  cgroups with controllers enabled for their children (EBUSY); a malformed ``io.max`` or blkio
  throttle line (EINVAL), a device that is not a whole disk (ENODEV), a zero io.max value (ERANGE);
  ``memory.reclaim`` with anything but "<bytes> [swappiness=0..200]" (EINVAL), or more than the cgroup's
  page cache to give (what there is goes, then EAGAIN); ``cgroup.subtree_control`` naming an unknown
  controller (EINVAL), one the cgroup does not have (ENOENT), enabling below processes or disabling
  what a child uses (EBUSY); resctrl ``schemata``
  lines with an unknown resource or domain, a mask that is empty, too wide or not contiguous, a
  bandwidth outside [min_bandwidth, 100], or no final newline (EINVAL; nothing of a refused write
  applies).
* **memory.high and memory.reclaim** take page cache back: a memory.high written below memory.current
  reclaims down to it, a memory.reclaim write reclaims its amount (the cgroup's ``memory.stat`` file
  pages and the memory.current of it and its ancestors shrink).  The load model asks
  :meth:`FakeKernel.memory_high` what is in force, holds the cgroup's usage under it (BE growth stalls
  at the cap), counts ``high`` in ``memory.events`` (:meth:`FakeKernel.memory_event`) and learns
  what was reclaimed (:meth:`FakeKernel.take_reclaimed`).
* **PSI triggers** on the pressure files (``/proc/pressure/*``, v2 ``*.pressure``) are registered as the
  kernel registers them and fire when a test says, or as the kernel's ``update_triggers`` judges the stall a
  load model writes (:mod:`~qosmanager.sim.fakepsi`, :attr:`FakeKernel.psi`; :mod:`~qosmanager.sim.fakestall`).
* **reads** come back in the kernel's format: ``cpu.max`` "max 100000", ``memory.high`` "max",
  page-rounded byte counts, canonical CPU lists, schemata with every resource and every cache id,
  ``tasks`` with the threads moved in (and moved out of their previous group).

What it does not model is listed in :data:`KNOWN_LIMITS` (the proof-by-difference test in
``tests/test_fake_vs_kernel.py`` exempts exactly those).

Map of the file (:class:`FakeKernel`, top to bottom): the kernel's numbers and file keys, what
is not modelled; processes, where a path is, mkdir; writes and the rule table;
the rules: CFS bandwidth, cpuset, memory (and the load model's hooks), v2 controllers,
processes.  Its rooms: :mod:`~qosmanager.sim.kparse` (the kernel's parsers, file helpers),
:mod:`~qosmanager.sim.fakefiles` (the files mkdir makes, the kernel's tables),
:mod:`~qosmanager.sim.fakeblock` (blkio and io), :mod:`~qosmanager.sim.fakeresctrl` (resctrl),
:mod:`~qosmanager.sim.fakepsi` (PSI triggers),
:mod:`~qosmanager.sim.fakesysio` (the sysio interposer, :func:`install`, :func:`register`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from collections.abc import Callable, Sequence

from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list
from qosmanager.host.roots import HostRoots
from qosmanager.sim.fakeblock import BlockRules
from qosmanager.sim.fakefiles import (  # noqa: F401  (re-exported: the kernel's tables)
    BLKIO_THROTTLE_FILES,
    CFS_PERIOD_US,
    MEMORY_EVENT_KEYS,
    MEMORY_EVENTS_ZERO,
    PSI_ZERO,
    V1_CPU_STAT_KEYS,
    V1_HIERARCHIES,
    V1_MEMORY_STAT_KEYS,
    V1_MEMORY_UNLIMITED,
    V2_CONTROLLERS,
    V2_CPU_STAT_KEYS,
    V2_MEMORY_STAT_KEYS,
    V2_ORDER,
    V2_ROOT_CPU_STAT_KEYS,
    v1_files,
    v2_files,
)
from qosmanager.sim.fakepsi import PressureRules
from qosmanager.sim.fakeresctrl import ResctrlRules
from qosmanager.sim.fakesysio import install, register  # noqa: F401  (re-exported)
from qosmanager.sim.kparse import (  # noqa: F401  (re-exported: the kernel's numbers and parsers)
    INT32_MAX,
    PAGE_COUNTER_MAX,
    PAGE_SIZE,
    U64_MAX,
    WEIGHT_MAX,
    WEIGHT_MIN,
    KernelError,
    _bump,
    _int_file,
    _kv,
    _parse_stat,
    _put,
    _read_or,
    cpulist_parse,
    kstrtoint,
    kstrtoll,
    kstrtoull,
    memparse_pages,
)

CFS_MIN_US = 1_000  # min_cfs_quota_period: 1 ms
CFS_MAX_PERIOD_US = 1_000_000  # max_cfs_quota_period: 1 s
MAX_CFS_RUNTIME_US = ((1 << 44) - 1) // 1000  # max_cfs_runtime (MAX_BW * NSEC_PER_USEC) in us
SHARES_MIN, SHARES_MAX = 2, 262_144
BW_SHIFT = 20
RUNTIME_INF = -1

# threaded controllers: enabled alone below a cgroup, they leave it free to hold processes (a thread root)
THREADED_CONTROLLERS = frozenset({"cpu", "cpuset", "perf_event", "pids"})
MAX_SWAPPINESS = 200

# What the fake does not model, each a documented difference the proof-by-difference test exempts.
KNOWN_LIMITS = {
    "memory-usage": "no memory is charged: a limit below usage is not refused (the kernel reclaims, then "
                    "EBUSY on v1) and memory.max never OOM-kills; usage is what the load model writes, held "
                    "under memory.high by it (sim.load), and reclaim (memory.high, memory.reclaim) takes page "
                    "cache only, as a kernel without swap does",
    "threads": "a pid is a process with one thread: tasks and cgroup.procs hold the same ids, and v2 "
               "cgroup.threads takes any pid the way cgroup.procs does; v2 threaded cgroups and thread roots "
               "(a process beside enabled threaded controllers makes its cgroup one, EOPNOTSUPP below it) "
               "are not modelled",
    "io.weight": "io.weight (iocost/BFQ) is stored as written, without the scheduler's checks",
    "exclusive": "cpuset exclusivity, partitions and resctrl exclusive/pseudo-locked modes are not modelled",
    "bypass": "only the sysio layer is interposed (the executor's batched and one-shot writes, mkdir): "
              "cgroup.kill and writes by other processes or by plain open() reach the plain files",
    "cgroup.kill": "v2 cgroups get no cgroup.kill (a fake host is a kernel before 5.14 there): writing it "
                   "could kill nothing, so kill mode signals pid by pid; tests of cgroup.kill lay the file out",
    "rmdir": "rmdir is not interposed: removing a cgroup with children or processes is not refused",
    "unknown-files": "files without a rule (statistics, pressure) take any write as plain files, so the "
                     "fake host's load generator can set them",
}

# ----------------------------------------------------------------------------------------------
# the kernel
# ----------------------------------------------------------------------------------------------
class FakeKernel:
    """The kernel of one fake host (see the module docstring).

    ``roots``: the fake host's roots (``roots.cgroup`` is the cgroup mount: v1 one dir per hierarchy
    below it, v2 the unified tree); ``n_cpus`` and ``n_mems``: the online CPUs and memory nodes.
    Processes exist when :meth:`spawn` named them (the fake host does, for its containers' pids).
    ``mb_max``: resctrl's MB value for "unlimited" (100 on Intel, 2048 on AMD).
    """

    def __init__(self, roots: HostRoots, version: int, *, n_cpus: int, n_mems: int = 1,
                 mb_max: int = 100) -> None:
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1 or 2, got {version}")
        self.roots = roots
        self.version = version
        self.n_cpus = n_cpus
        self.n_mems = n_mems
        self.mb_max = mb_max  # resctrl's unlimited bandwidth: 100 (percent, Intel) or 2048 (1/8 GBps, AMD)
        self.cgroup_root = os.path.normpath(roots.cgroup)
        self.resctrl_root = os.path.normpath(roots.sys_path("fs/resctrl"))
        self.sys_root = os.path.normpath(roots.sys)
        self.pids: set[int] = set()
        self._lock = threading.Lock()
        self._reclaimed: dict[str, int] = {}  # cgroup dir -> page cache bytes reclaimed (take_reclaimed)
        self.resctrl = ResctrlRules(self.resctrl_root, n_cpus, mb_max, self.pids, self._move)
        self.block = BlockRules(self.sys_root)
        self.psi = PressureRules(roots, version)  # PSI triggers on the pressure files (a test or a model fires them)
        self._files: dict[str, Callable[[str, str, str, str], str]] = self._rules()

    # ---------------------------------------------------------------- processes
    def spawn(self, pids: Sequence[int]) -> None:
        """These processes exist from now on (the fake host's containers' pids)."""
        self.pids.update(int(p) for p in pids)

    def exit(self, pids: Sequence[int]) -> None:
        self.pids.difference_update(int(p) for p in pids)

    # ---------------------------------------------------------------- where a path is
    def owns(self, path: str) -> bool:
        return path.startswith(self.cgroup_root + "/") or path.startswith(self.resctrl_root + "/") \
            or path == self.resctrl_root

    def _where(self, path: str) -> tuple[str, str, str] | None:
        """(mount, dir, file name) of a path in a cgroup hierarchy or in resctrl; mount is the
        hierarchy's root dir (v1 ``cgroup/<h>``, v2 ``cgroup``) or the resctrl root."""
        path = os.path.normpath(path)
        d, name = os.path.split(path)
        if d == self.resctrl_root or d.startswith(self.resctrl_root + "/"):
            return self.resctrl_root, d, name
        if not d.startswith(self.cgroup_root):
            return None
        if self.version == 2:
            return self.cgroup_root, d, name
        rest = d[len(self.cgroup_root):].lstrip("/")
        if not rest:
            return None
        h = rest.split("/", 1)[0]
        return os.path.join(self.cgroup_root, h), d, name

    @staticmethod
    def _hierarchy(mount: str) -> str:
        return os.path.basename(mount)

    # ---------------------------------------------------------------- mkdir
    def mkdir(self, path: str, mode: int = 0o777) -> None:
        """``mkdir(2)`` in the fake tree: the directory and, in a cgroup hierarchy or resctrl, the files the
        kernel creates in it.  Raises OSError as ``os.mkdir`` does."""
        path = os.path.normpath(path)
        where = self._where(os.path.join(path, "x"))
        with self._lock:
            if where is not None and where[0] == self.resctrl_root:
                self.resctrl.mkdir_check(path)
            os.mkdir(path, mode)
            if where is None:
                return
            mount = where[0]
            if mount == self.resctrl_root:
                self.resctrl.populate(path)
            elif self.version == 1:
                self._populate_v1(self._hierarchy(mount), path)
            else:
                self._populate_v2(path)

    def _populate_v1(self, hierarchy: str, path: str) -> None:
        for name, body in v1_files(hierarchy).items():
            _put(os.path.join(path, name), body)

    def _populate_v2(self, path: str) -> None:
        parent = os.path.dirname(path)
        controllers = _read_or(os.path.join(parent, "cgroup.subtree_control"), "").split()
        for name, body in v2_files(controllers, parent).items():
            _put(os.path.join(path, name), body)

    # ---------------------------------------------------------------- writes
    def has_rule(self, path: str) -> bool:
        """Whether writes to ``path`` follow a kernel rule (else it is a plain file of the fake tree)."""
        where = self._where(path)
        return where is not None and (("resctrl:" if where[0] == self.resctrl_root else "") + where[2]) in self._files

    def write(self, path: str, data: bytes) -> int:
        """One ``write(2)`` of ``data`` to ``path``: 0, or the errno the kernel returns."""
        where = self._where(path)
        text = data.decode(errors="replace")
        with self._lock:
            if where is None:
                return self._plain(path, text)
            mount, d, name = where
            rule = self._files.get(("resctrl:" if mount == self.resctrl_root else "") + name)
            if rule is None:
                return self._plain(path, text)
            if not os.path.exists(path):
                return errno.ENOENT
            if not data:
                return 0  # a write of nothing never reaches the file's handler
            try:
                body = rule(mount, d, name, text)
            except KernelError as e:
                return e.errno
            except OSError as e:
                return e.errno or errno.EIO
            _put(path, body)
            return 0

    @staticmethod
    def _plain(path: str, text: str) -> int:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as e:
            return e.errno or errno.EIO
        try:
            os.write(fd, text.encode())
        except OSError as e:
            return e.errno or errno.EIO
        finally:
            os.close(fd)
        return 0

    def _rules(self) -> dict[str, Callable[[str, str, str, str], str]]:
        r: dict[str, Callable[[str, str, str, str], str]] = {
            "tasks": self._w_procs, "cgroup.procs": self._w_procs,
            "resctrl:tasks": self.resctrl.w_tasks, "resctrl:schemata": self.resctrl.w_schemata,
        }
        if self.version == 1:
            r.update({
                "cpu.cfs_quota_us": self._w_quota_v1, "cpu.cfs_period_us": self._w_period_v1,
                "cpu.cfs_burst_us": self._w_burst, "cpu.shares": self._w_shares,
                "cpuset.cpus": self._w_cpuset, "cpuset.mems": self._w_cpuset,
                "memory.limit_in_bytes": self._w_v1_memory, "memory.soft_limit_in_bytes": self._w_v1_memory,
                **dict.fromkeys(BLKIO_THROTTLE_FILES, self.block.w_blkio_throttle),
            })
        else:
            r.update({
                "cgroup.threads": self._w_procs, "cpu.max": self._w_cpu_max, "cpu.max.burst": self._w_burst,
                "cpu.weight": self._w_weight, "cpuset.cpus": self._w_cpuset, "cpuset.mems": self._w_cpuset,
                "memory.high": self._w_v2_high, "memory.max": self._w_v2_memory,
                "memory.reclaim": self._w_v2_reclaim,
                "memory.low": self._w_v2_memory, "memory.min": self._w_v2_memory,
                "memory.swap.max": self._w_v2_memory,
                "io.max": self.block.w_io_max, "io.weight": self.block.w_io_weight,
                "cgroup.subtree_control": self._w_subtree_control,
            })
        return r

    # ---- CFS bandwidth
    def _bandwidth(self, d: str) -> tuple[int, int, int]:
        """(quota us or RUNTIME_INF, period us, burst us) of a cgroup dir as stored."""
        if self.version == 1:
            quota = int(_read_or(os.path.join(d, "cpu.cfs_quota_us"), "-1").strip() or -1)
            period = int(_read_or(os.path.join(d, "cpu.cfs_period_us"), str(CFS_PERIOD_US)).strip())
            burst = int(_read_or(os.path.join(d, "cpu.cfs_burst_us"), "0").strip() or 0)
        else:
            q, _, p = _read_or(os.path.join(d, "cpu.max"), f"max {CFS_PERIOD_US}").strip().partition(" ")
            quota = RUNTIME_INF if q == "max" else int(q)
            period = int(p.strip() or CFS_PERIOD_US)
            burst = int(_read_or(os.path.join(d, "cpu.max.burst"), "0").strip() or 0)
        return (RUNTIME_INF if quota < 0 else quota), period, burst

    def _set_bandwidth(self, mount: str, d: str, quota: int, period: int, burst: int) -> None:
        """tg_set_cfs_bandwidth's checks (quota, period and burst in us; RUNTIME_INF = no limit)."""
        if d == mount:
            raise KernelError(errno.EINVAL, "the root cgroup has no bandwidth")
        if (quota != RUNTIME_INF and quota < CFS_MIN_US) or period < CFS_MIN_US:
            raise KernelError(errno.EINVAL, "quota or period below 1 ms")
        if period > CFS_MAX_PERIOD_US:
            raise KernelError(errno.EINVAL, "period above 1 s")
        if quota != RUNTIME_INF and quota > MAX_CFS_RUNTIME_US:
            raise KernelError(errno.EINVAL)
        if quota != RUNTIME_INF and (burst > quota or burst + quota > MAX_CFS_RUNTIME_US):
            raise KernelError(errno.EINVAL, "burst above quota")
        if self.version == 1:
            self._schedulable(mount, d, quota, period)

    def _ratio(self, quota: int, period: int) -> int:
        return RUNTIME_INF if quota == RUNTIME_INF else (quota << BW_SHIFT) // period

    def _schedulable(self, mount: str, d: str, quota: int, period: int) -> None:
        """v1's __cfs_schedulable: walking down from the root, a cgroup's quota ratio may not exceed its
        parent's effective one (unlimited inherits the parent's)."""
        parents = []
        cur = d
        while cur != mount:
            cur = os.path.dirname(cur)
            parents.append(cur)
        eff = RUNTIME_INF
        for p in reversed(parents[:-1]):  # below the root
            q, per, _ = self._bandwidth(p)
            r = self._ratio(q, per)
            if r == RUNTIME_INF:
                continue
            if eff != RUNTIME_INF and r > eff:
                raise KernelError(errno.EINVAL)
            eff = r
        mine = self._ratio(quota, period)
        if mine != RUNTIME_INF and eff != RUNTIME_INF and mine > eff:
            raise KernelError(errno.EINVAL, "quota above the parent's")
        self._check_below(d, eff if mine == RUNTIME_INF else mine)

    def _check_below(self, d: str, eff: int) -> None:
        for e in os.scandir(d):
            if not e.is_dir(follow_symlinks=False):
                continue
            q, per, _ = self._bandwidth(e.path)
            r = self._ratio(q, per)
            if r != RUNTIME_INF and eff != RUNTIME_INF and r > eff:
                raise KernelError(errno.EINVAL, "quota below a child's")
            self._check_below(e.path, eff if r == RUNTIME_INF else r)

    def _w_quota_v1(self, mount: str, d: str, name: str, text: str) -> str:
        v = kstrtoll(text)
        quota = RUNTIME_INF if v < 0 else v
        _, period, burst = self._bandwidth(d)
        if quota != RUNTIME_INF and v > U64_MAX // 1000:
            raise KernelError(errno.EINVAL)
        self._set_bandwidth(mount, d, quota, period, burst)
        return f"{quota}\n"

    def _w_period_v1(self, mount: str, d: str, name: str, text: str) -> str:
        period = kstrtoull(text)
        if period > U64_MAX // 1000:
            raise KernelError(errno.EINVAL)
        quota, _, burst = self._bandwidth(d)
        self._set_bandwidth(mount, d, quota, period, burst)
        return f"{period}\n"

    def _w_burst(self, mount: str, d: str, name: str, text: str) -> str:
        burst = kstrtoull(text)
        if burst > U64_MAX // 1000:
            raise KernelError(errno.EINVAL)
        quota, period, _ = self._bandwidth(d)
        self._set_bandwidth(mount, d, quota, period, burst)
        return f"{burst}\n"

    def _w_cpu_max(self, mount: str, d: str, name: str, text: str) -> str:
        words = text.split()
        if not words:
            raise KernelError(errno.EINVAL)
        quota_s = words[0][:20]
        _, period, burst = self._bandwidth(d)
        if len(words) > 1:
            m = re.match(r"\+?\d+", words[1])
            if m:
                period = int(m.group(0))
        m = re.match(r"\+?\d+", quota_s)
        if m:
            quota = int(m.group(0))
        elif quota_s == "max":
            quota = RUNTIME_INF
        else:
            raise KernelError(errno.EINVAL)
        self._set_bandwidth(mount, d, quota, period, burst)
        return f"{'max' if quota == RUNTIME_INF else quota} {period}\n"

    def _w_shares(self, mount: str, d: str, name: str, text: str) -> str:
        v = kstrtoull(text)
        if d == mount:
            raise KernelError(errno.EINVAL)
        return f"{min(max(v, SHARES_MIN), SHARES_MAX)}\n"

    def _w_weight(self, mount: str, d: str, name: str, text: str) -> str:
        v = kstrtoull(text)
        if not WEIGHT_MIN <= v <= WEIGHT_MAX:
            raise KernelError(errno.ERANGE)
        return f"{v}\n"

    # ---- cpuset
    def _cpuset_of(self, d: str, name: str) -> set[int]:
        return set(parse_cpu_list(_read_or(os.path.join(d, name), "").strip()))

    def _w_cpuset(self, mount: str, d: str, name: str, text: str) -> str:
        total = self.n_mems if name == "cpuset.mems" else self.n_cpus
        want = cpulist_parse(text, total)
        if d == mount:
            raise KernelError(errno.EACCES if self.version == 1 else errno.ENOENT)
        parent = os.path.dirname(d)
        if self.version == 1:
            if not want <= self._cpuset_of(parent, name):  # validate_change: legacy hierarchy only
                raise KernelError(errno.EACCES, "outside the parent's")
            for e in os.scandir(d):
                if e.is_dir(follow_symlinks=False) and not self._cpuset_of(e.path, name) <= want:
                    raise KernelError(errno.EBUSY, "a child uses more")
            if not want and _read_or(os.path.join(d, "tasks"), "").strip():
                raise KernelError(errno.ENOSPC)
        else:
            self._effective(d, name + ".effective", want, self._cpuset_of(parent, name + ".effective"))
        return format_cpu_list(sorted(want)) + "\n"

    def _effective(self, d: str, eff_name: str, want: set[int], parent_eff: set[int]) -> None:
        """v2 (update_cpumasks_hier): what is in effect is the cgroup's own list within its parent's
        effective one (the parent's when that leaves none, or when it has no list), down the subtree."""
        eff = (want & parent_eff) or parent_eff
        _put(os.path.join(d, eff_name), format_cpu_list(sorted(eff)) + "\n")
        own = eff_name.removesuffix(".effective")
        for e in os.scandir(d):
            if e.is_dir(follow_symlinks=False) and os.path.exists(os.path.join(e.path, eff_name)):
                self._effective(e.path, eff_name, self._cpuset_of(e.path, own), eff)

    # ---- memory
    def _w_v1_memory(self, mount: str, d: str, name: str, text: str) -> str:
        if d == mount:
            raise KernelError(errno.EINVAL)
        pages = memparse_pages(text, "-1")
        return f"{pages * PAGE_SIZE}\n"

    def _w_v2_memory(self, mount: str, d: str, name: str, text: str) -> str:
        pages = memparse_pages(text, "max")
        return "max\n" if pages == PAGE_COUNTER_MAX else f"{pages * PAGE_SIZE}\n"

    def _w_v2_high(self, mount: str, d: str, name: str, text: str) -> str:
        """memory_high_write: the new high applies at once, and the writer reclaims the cgroup down to it
        (here: its page cache, the only memory the fake can take back without swap)."""
        body = self._w_v2_memory(mount, d, name, text)
        if body != "max\n":
            current = _int_file(os.path.join(d, "memory.current"))
            if current > int(body):
                self._reclaim(mount, d, current - int(body))
        return body

    def _w_v2_reclaim(self, mount: str, d: str, name: str, text: str) -> str:
        """memory_reclaim (6.12): "<bytes>[KMG...] [swappiness=N]"; reclaims that much (whole pages), or
        what it can and EAGAIN; the file reads back nothing (the kernel's is write-only)."""
        s = text.strip()
        m = re.match(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([kKmMgGtTpPeE]?)", s)
        if m is None:
            raise KernelError(errno.EINVAL)
        for tok in s[m.end():].strip().split(" "):
            if not tok:
                continue
            sw = re.fullmatch(r"swappiness=(-?\d+)", tok)
            if sw is None or not 0 <= int(sw.group(1)) <= MAX_SWAPPINESS:
                raise KernelError(errno.EINVAL)
        pages = memparse_pages(m.group(0), "\0")
        want = pages * PAGE_SIZE
        if want and self._reclaim(mount, d, want) < want:
            raise KernelError(errno.EAGAIN, "could not reclaim as much as asked")
        return ""

    # ---- the memory model's hooks (the fake charges nothing itself: the load model asks)
    def _reclaim(self, mount: str, d: str, want: int) -> int:
        """Take up to ``want`` bytes of page cache from ``d`` (whole pages): its memory.stat ``file`` and
        LRU lists and the memory.current of it and its ancestors shrink; the load model learns of it
        from :meth:`take_reclaimed`.  Returns the bytes reclaimed."""
        stat_path = os.path.join(d, "memory.stat")
        stat = _parse_stat(_read_or(stat_path, ""))
        got = min(want, stat.get("file", 0)) // PAGE_SIZE * PAGE_SIZE
        if got <= 0:
            return 0
        inactive = min(got, stat.get("inactive_file", 0))
        stat["file"] -= got
        for key, less in (("inactive_file", inactive), ("active_file", got - inactive)):
            if key in stat:
                stat[key] = max(0, stat[key] - less)
        _put(stat_path, "".join(f"{k} {v}\n" for k, v in stat.items()))
        cur = d
        while cur != mount and cur.startswith(mount):
            path = os.path.join(cur, "memory.current")
            if os.path.exists(path):
                _put(path, f"{max(0, _int_file(path) - got)}\n")
            cur = os.path.dirname(cur)
        self._reclaimed[d] = self._reclaimed.get(d, 0) + got
        return got

    def take_reclaimed(self, d: str) -> int:
        """Bytes of ``d``'s page cache reclaimed by memory.high and memory.reclaim writes since the last
        call (the load model takes them out of its page cache)."""
        with self._lock:
            return self._reclaimed.pop(os.path.normpath(d), 0)

    def memory_high(self, d: str) -> int | None:
        """The memory.high in force on ``d`` (v2): the lowest of it and its ancestors' (the root has
        none), in bytes; None when every one is "max"."""
        d = os.path.normpath(d)
        out: int | None = None
        while d != self.cgroup_root and d.startswith(self.cgroup_root + "/"):
            text = _read_or(os.path.join(d, "memory.high"), "max").strip()
            if text and text != "max":
                out = int(text) if out is None else min(out, int(text))
            d = os.path.dirname(d)
        return out

    def memory_event(self, d: str, event: str, n: int = 1) -> None:
        """memcg_memory_event: ``event`` happened ``n`` times in ``d``: its memory.events.local, and the
        hierarchical memory.events of it and every ancestor, count it."""
        d = os.path.normpath(d)
        with self._lock:
            _bump(os.path.join(d, "memory.events.local"), event, n)
            while d != self.cgroup_root and d.startswith(self.cgroup_root + "/"):
                _bump(os.path.join(d, "memory.events"), event, n)
                d = os.path.dirname(d)

    # ---- v2 controllers
    def _w_subtree_control(self, mount: str, d: str, name: str, text: str) -> str:
        enable, disable = set(), set()
        for tok in text.strip().split(" "):
            if not tok:
                continue
            if tok[1:] not in V2_ORDER:
                raise KernelError(errno.EINVAL)
            if tok[0] == "+":
                enable.add(tok[1:])
                disable.discard(tok[1:])
            elif tok[0] == "-":
                disable.add(tok[1:])
                enable.discard(tok[1:])
            else:
                raise KernelError(errno.EINVAL)
        have = set(_read_or(os.path.join(d, "cgroup.controllers"), "").split())
        current = set(_read_or(os.path.join(d, "cgroup.subtree_control"), "").split())
        enable -= current
        disable &= current
        if enable - have:
            raise KernelError(errno.ENOENT, "not available to this cgroup")
        children = [e.path for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
        if enable - THREADED_CONTROLLERS and d != mount and _read_or(os.path.join(d, "cgroup.procs"), "").strip():
            raise KernelError(errno.EBUSY, "no internal processes below domain controllers")
        for c in children:
            if disable & set(_read_or(os.path.join(c, "cgroup.subtree_control"), "").split()):
                raise KernelError(errno.EBUSY, "a child uses it")
        new = (current | enable) - disable
        ordered = [c for c in V2_ORDER if c in new]
        line = " ".join(ordered) + "\n" if ordered else ""
        for c in children:  # the children's controller files appear and go
            _put(os.path.join(c, "cgroup.controllers"), line)
            want = v2_files(ordered, d)
            for gone in disable:
                for name in v2_files([gone], d):
                    if name not in want:
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(c, name))
            for name, body in want.items():
                if not os.path.exists(os.path.join(c, name)):
                    _put(os.path.join(c, name), body)
        return line

    # ---- processes
    def _move(self, mount: str, d: str, pid: int, names: tuple[str, ...]) -> None:
        """Take ``pid`` out of every other cgroup of this hierarchy (the kernel keeps it in one)."""
        for root, _dirs, files in os.walk(mount):
            if root == d or "info" in root.split("/"):
                continue
            for name in names:
                if name in files:
                    p = os.path.join(root, name)
                    body = _read_or(p, "")
                    if str(pid) in body.split():
                        _put(p, "".join(f"{t}\n" for t in body.split() if t != str(pid)))

    def _w_procs(self, mount: str, d: str, name: str, text: str) -> str:
        pid = kstrtoint(text.strip())
        if pid < 0:
            raise KernelError(errno.EINVAL)
        if pid not in self.pids:
            raise KernelError(errno.ESRCH)
        if self.version == 1 and self._hierarchy(mount) == "cpuset" and d != mount and (
                not self._cpuset_of(d, "cpuset.cpus") or not self._cpuset_of(d, "cpuset.mems")):
            raise KernelError(errno.ENOSPC)
        if self.version == 2 and d != mount and \
                set(_read_or(os.path.join(d, "cgroup.subtree_control"), "").split()) - THREADED_CONTROLLERS:
            raise KernelError(errno.EBUSY, "no internal processes where domain controllers are enabled")
        names = ("tasks", "cgroup.procs") if self.version == 1 else ("cgroup.procs", "cgroup.threads")
        self._move(mount, d, pid, names)
        for other in names:  # a process of one thread: both files list it
            if other != name:
                p = os.path.join(d, other)
                body = _read_or(p, "")
                if str(pid) not in body.split():
                    _put(p, body + f"{pid}\n")
        body = _read_or(os.path.join(d, name), "")
        return body if str(pid) in body.split() else body + f"{pid}\n"
