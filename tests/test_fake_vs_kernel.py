"""Proof by difference: one script of operations on a real kernel and on the fake kernel, compared
operation by operation (the value read back, the errno).

The script (mkdir, writes of valid and invalid values, reads) runs through the sysio layer the agent's
executor uses, beneath this test's own cgroup on the host (cgroup v1 here) and in the cgroup v2 guest
(``test_guest.py`` runs this file there), and on a fresh :class:`FakeHost` with the fake kernel.  A
difference fails the test unless the operation is marked with one of the fake's documented limits
(:data:`qosmanager.sim.fakekernel.KNOWN_LIMITS`).

resctrl does not exist on these machines (no RDT in the CPUs): its script is compared with what the
kernel's documentation (Documentation/arch/x86/resctrl.rst) says, in ``test_resctrl_as_documented``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import kernelcg
from qosmanager._native import sysio
from qosmanager.sim.fakefiles import V2_ORDER, v1_files, v2_files
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.fakekernel import KNOWN_LIMITS


@dataclass(frozen=True)
class Op:
    kind: str  # "mkdir", "write", "read", "ls" (which of the names in value exist in the dir)
    path: str  # relative to the hierarchy's base ("cpu:p/c/cpu.shares" on v1, "p/cpu.max" on v2)
    value: str = ""
    limit: str = ""  # a KNOWN_LIMITS key: a difference here is expected and only reported


def _errname(e: int) -> str:
    return "ok" if e == 0 else errno.errorcode.get(e, str(e))


class Backend:
    """Runs ops below ``bases`` (hierarchy -> dir; v2: "" -> dir) with the agent's syscalls."""

    def __init__(self, bases: dict[str, str]) -> None:
        self.bases = bases

    def path(self, rel: str) -> str:
        h, sep, rest = rel.partition(":")
        if not sep:
            h, rest = "", rel
        return os.path.join(self.bases[h], rest) if rest else self.bases[h]

    def run(self, op: Op) -> str:
        path = self.path(op.path)
        if op.kind == "ls":  # which of the names in value the directory has
            return "ls " + " ".join(n for n in op.value.split() if os.path.exists(os.path.join(path, n)))
        if op.kind == "mkdir":
            try:
                sysio.mkdir(path, 0o755)
            except OSError as e:
                return _errname(e.errno or errno.EIO)
            return "ok"
        if op.kind == "write":
            fds = sysio.open_batch([path], os.O_WRONLY)
            if fds[0] < 0:
                return "open " + _errname(-int(fds[0]))
            try:
                err = sysio.pwrite_batch(fds, [op.value.encode()], np.zeros(1, dtype=np.uint8))
            finally:
                sysio.close_batch(fds)
            return _errname(int(err[0]))
        try:
            with open(path) as f:
                return "read " + repr(f.read())
        except OSError as e:
            return "read " + _errname(e.errno or errno.EIO)


def _missing_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _absent_disk() -> str:
    present = set(os.listdir("/sys/dev/block")) if os.path.isdir("/sys/dev/block") else set()
    return next(d for d in ("7:250", "8:250", "259:250", "43:250") if d not in present)


def _whole_disk() -> tuple[str, str] | None:
    """(name, MAJ:MIN) of a whole disk, for io.max; None when there is none."""
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir("/sys/block")):
            if name.startswith(("loop", "ram", "zram")):
                continue
            with open(f"/sys/block/{name}/dev") as f:
                return name, f.read().strip()
    return None


# The files the agent reads or writes (host/resources.py, the collector, eviction), by hierarchy: which of
# them and of the files the fake makes a new cgroup has is compared ("ls"), and what each of the agent's
# holds at first (reads) -- Anolis-only knobs among them are absent on both sides.
V1_AGENT_FILES = {
    "cpu": ("tasks", "cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.cfs_burst_us", "cpu.shares",
            "cpu.idle", "cpu.stat", "cpu.bvt_warp_ns"),
    "cpuacct": ("tasks", "cgroup.procs", "cpuacct.usage"),
    "cpuset": ("tasks", "cgroup.procs", "cpuset.cpus", "cpuset.mems"),
    "memory": ("tasks", "cgroup.procs", "memory.limit_in_bytes", "memory.soft_limit_in_bytes",
               "memory.usage_in_bytes", "memory.stat", "memory.wmark_ratio", "memory.priority",
               "memory.use_priority_oom"),
    "blkio": ("tasks", "cgroup.procs", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
              "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device", "blkio.cost.weight"),
}
V2_AGENT_FILES = (
    "cgroup.controllers", "cgroup.subtree_control", "cgroup.procs", "cgroup.threads",
    "cpu.max", "cpu.max.burst", "cpu.weight", "cpu.idle", "cpu.stat",
    "cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.mems.effective",
    "memory.current", "memory.min", "memory.low", "memory.high", "memory.max", "memory.oom.group",
    "memory.stat", "memory.events", "memory.events.local", "memory.reclaim", "memory.pressure",
    "io.max", "io.weight",
)
# files whose first contents depend on this machine, not on the kernel's rules for a new cgroup
NOT_READ = frozenset({"memory.stat", "cpu.stat", "memory.reclaim"})


def fresh(prefix: str, agent: tuple[str, ...], fakes: dict[str, str]) -> list[Op]:
    """A new cgroup's files: which of the agent's and of those the fake makes (``fakes``) it has, and what
    each of the agent's holds."""
    names = " ".join(dict.fromkeys((*agent, *sorted(fakes))))
    return [Op("ls", prefix, names), *(Op("read", f"{prefix}/{n}") for n in agent if n not in NOT_READ)]


def v2_kill(prefix: str) -> Op:
    """v2's cgroup.kill (kill mode writes it): the fake makes none, a documented limit."""
    return Op("ls", prefix, "cgroup.kill", limit="cgroup.kill")


def v1_fresh(hierarchy: str) -> list[Op]:
    return fresh(f"{hierarchy}:p", V1_AGENT_FILES[hierarchy], v1_files(hierarchy))


def v2_fresh(prefix: str) -> list[Op]:
    return fresh(prefix, V2_AGENT_FILES, v2_files(V2_ORDER, "/nonexistent"))


def v1_script(sleeper: int, n_cpus: int, blkio: bool, disk: str | None) -> list[Op]:
    missing = _missing_pid()
    ops = [
        Op("mkdir", "cpu:p"), Op("mkdir", "cpu:p/c"), *v1_fresh("cpu"),
        Op("mkdir", "cpuacct:p"), *v1_fresh("cpuacct"),
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "999"),  # below 1 ms
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "50000"), Op("read", "cpu:p/c/cpu.cfs_quota_us"),
        Op("write", "cpu:p/cpu.cfs_quota_us", "20000"),  # a parent below its child
        Op("write", "cpu:p/cpu.cfs_quota_us", "60000"),
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "70000"),  # a child above its parent
        Op("read", "cpu:p/c/cpu.cfs_quota_us"),
        Op("write", "cpu:p/c/cpu.cfs_burst_us", "50001"),  # burst above quota
        Op("write", "cpu:p/c/cpu.cfs_burst_us", "40000"), Op("read", "cpu:p/c/cpu.cfs_burst_us"),
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "30000"),  # quota below the burst
        Op("write", "cpu:p/c/cpu.cfs_burst_us", "0"),
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "-5"), Op("read", "cpu:p/c/cpu.cfs_quota_us"),
        Op("write", "cpu:p/c/cpu.cfs_quota_us", "abc"), Op("write", "cpu:p/c/cpu.cfs_quota_us", " 5"),
        Op("write", "cpu:p/c/cpu.cfs_period_us", "500"), Op("write", "cpu:p/c/cpu.cfs_period_us", "2000000"),
        Op("write", "cpu:p/c/cpu.cfs_period_us", "50000\n"), Op("read", "cpu:p/c/cpu.cfs_period_us"),
        Op("write", "cpu:p/c/cpu.shares", "1"), Op("read", "cpu:p/c/cpu.shares"),
        Op("write", "cpu:p/c/cpu.shares", "999999"), Op("read", "cpu:p/c/cpu.shares"),
        Op("write", "cpu:p/c/cpu.shares", "-3"),
        Op("write", "cpu:p/c/cgroup.procs", str(missing)), Op("write", "cpu:p/c/tasks", str(missing)),
        Op("write", "cpu:p/c/cgroup.procs", "notapid"),
        Op("write", "cpu:p/c/cgroup.procs", str(sleeper)), Op("read", "cpu:p/c/cgroup.procs"),
        Op("read", "cpu:p/c/tasks", limit="threads"),
        Op("write", "cpu:p/tasks", str(sleeper)), Op("read", "cpu:p/c/tasks"), Op("read", "cpu:p/tasks"),
        Op("write", "cpu:cgroup.procs", str(sleeper)),  # back to the base, so p can go
        # cpuset: a new v1 cpuset is empty; children stay within their parent
        Op("mkdir", "cpuset:p"), *v1_fresh("cpuset"),
        Op("write", "cpuset:p/cgroup.procs", str(sleeper)),  # no CPUs, no memory nodes
        Op("write", "cpuset:p/cpuset.cpus", "0"), Op("read", "cpuset:p/cpuset.cpus"),
        Op("mkdir", "cpuset:p/c"),
        Op("write", "cpuset:p/c/cpuset.cpus", "bogus"), Op("write", "cpuset:p/c/cpuset.cpus", "0"),
        Op("write", "cpuset:p/c/cpuset.cpus", "0-999"),
        Op("write", "cpuset:p/c/cpuset.mems", "0"),  # the parent has no memory nodes yet
        Op("write", "cpuset:p/cpuset.mems", "0"), Op("write", "cpuset:p/c/cpuset.mems", "0"),
        Op("read", "cpuset:p/c/cpuset.mems"),
        # memory: page-rounded, "-1" is unlimited, "max" is not a v1 word
        Op("mkdir", "memory:p"), *v1_fresh("memory"),
        Op("write", "memory:p/memory.limit_in_bytes", "1000000"), Op("read", "memory:p/memory.limit_in_bytes"),
        Op("write", "memory:p/memory.limit_in_bytes", "1M"), Op("read", "memory:p/memory.limit_in_bytes"),
        Op("write", "memory:p/memory.limit_in_bytes", "-1"), Op("read", "memory:p/memory.limit_in_bytes"),
        Op("write", "memory:p/memory.limit_in_bytes", "max"),
        Op("write", "memory:p/memory.limit_in_bytes", "12abc"),
    ]
    if blkio:
        absent = _absent_disk()
        ops += [
            Op("mkdir", "blkio:p"), *v1_fresh("blkio"),
            Op("write", "blkio:p/blkio.throttle.read_bps_device", "nonsense"),
            Op("write", "blkio:p/blkio.throttle.read_bps_device", f"{absent} 1048576"),
        ]
        if disk is not None:
            ops += [
                Op("write", "blkio:p/blkio.throttle.read_bps_device", f"{disk} 1048576"),
                Op("write", "blkio:p/blkio.throttle.write_iops_device", f"{disk} 100"),
                Op("read", "blkio:p/blkio.throttle.read_bps_device"),
                Op("read", "blkio:p/blkio.throttle.write_iops_device"),
                Op("write", "blkio:p/blkio.throttle.read_bps_device", f"{disk} x"),
                Op("write", "blkio:p/blkio.throttle.read_bps_device", f"{disk} 0"),  # 0 removes the line
                Op("read", "blkio:p/blkio.throttle.read_bps_device"),
            ]
    if n_cpus >= 2:
        ops += [
            Op("write", "cpuset:p/c/cpuset.cpus", "1"),  # outside the parent's
            Op("write", "cpuset:p/cpuset.cpus", "0-1"), Op("write", "cpuset:p/c/cpuset.cpus", "1"),
            Op("write", "cpuset:p/cpuset.cpus", "0"),  # a parent below its child
            Op("read", "cpuset:p/cpuset.cpus"), Op("read", "cpuset:p/c/cpuset.cpus"),
        ]
    return ops


def v2_script(sleeper: int, n_cpus: int, disk: str | None) -> list[Op]:
    missing = _missing_pid()
    absent = _absent_disk()
    ops = [
        Op("mkdir", "p"), Op("read", "p/cgroup.controllers"), Op("read", "p/cpu.max"),
        Op("read", "p/cgroup.subtree_control"),
        Op("write", "cgroup.subtree_control", "+bogus"),
        Op("write", "cgroup.subtree_control", "+cpu +memory +cpuset +io +pids"),
        Op("read", "cgroup.subtree_control"), Op("read", "p/cgroup.controllers"),
        Op("mkdir", "q"), *v2_fresh("q"), v2_kill("q"),
        Op("write", "q/cpu.max", "50000"), Op("read", "q/cpu.max"),
        Op("write", "q/cpu.max", "max 200000"), Op("read", "q/cpu.max"),
        Op("write", "q/cpu.max", "500"), Op("write", "q/cpu.max", "lots"), Op("write", "q/cpu.max", ""),
        Op("write", "q/cpu.max.burst", "30000"), Op("read", "q/cpu.max.burst"),
        Op("write", "q/cpu.max", "20000 100000"),  # quota below the burst
        Op("write", "q/cpu.max.burst", "0"), Op("write", "q/cpu.max", "20000 100000"), Op("read", "q/cpu.max"),
        Op("write", "q/cpu.max.burst", "20001"),  # burst above quota
        Op("write", "q/cpu.weight", "0"), Op("write", "q/cpu.weight", "10001"),
        Op("write", "q/cpu.weight", "50"), Op("read", "q/cpu.weight"),
        Op("write", "q/memory.high", "10000"), Op("read", "q/memory.high"),
        Op("write", "q/memory.high", "max\n"), Op("read", "q/memory.high"),
        Op("write", "q/memory.high", "-1"), Op("write", "q/memory.high", "abc"),
        Op("write", "q/memory.high", "1G"), Op("read", "q/memory.high"),
        Op("write", "q/memory.max", "1048577"), Op("read", "q/memory.max"),
        Op("write", "q/memory.min", "5000"), Op("read", "q/memory.min"),
        # memory protection (memoryHigh): the event counters, proactive reclaim of an empty cgroup
        Op("read", "q/memory.events"), Op("read", "q/memory.events.local"),
        *(Op("write", "q/memory.reclaim", v) for v in ("abc", "-1", "\n", "max", "1M junk", "1Mx",
                                                       "1M swappiness=201", "0", "1000", "1M",
                                                       "1M swappiness=60")),
        Op("write", "q/memory.high", "8192"), Op("read", "q/memory.high"), Op("write", "q/memory.high", "max"),
        Op("write", "q/io.max", "nonsense"), Op("write", "q/io.max", f"{absent} rbps=1"),
        Op("write", "q/cgroup.subtree_control", "+cpu +cpuset +memory"), Op("read", "q/cgroup.subtree_control"),
        Op("mkdir", "q/leaf"), *v2_fresh("q/leaf"),
        Op("write", "q/leaf/cgroup.subtree_control", "+io"),  # not handed down to the leaf
        Op("write", "q/leaf/cpu.max", "90000"),  # above its parent's 20000: v2 takes it
        Op("read", "q/leaf/cpu.max"),
        Op("write", "q/cgroup.procs", str(sleeper)),  # memory enabled below q: no processes in q
        Op("write", "q/cgroup.subtree_control", "-cpu"),
        Op("write", "q/leaf/cgroup.procs", str(missing)), Op("write", "q/leaf/cgroup.procs", "x1"),
        Op("write", "q/leaf/cgroup.threads", str(missing)),
        Op("write", "q/leaf/cgroup.procs", str(sleeper)), Op("read", "q/leaf/cgroup.procs"),
        Op("read", "q/leaf/cgroup.threads", limit="threads"),
        Op("write", "q/leaf/cgroup.subtree_control", "+cpu"),  # processes in the leaf
        Op("write", "p/cgroup.procs", str(sleeper)), Op("read", "q/leaf/cgroup.procs"),
        Op("read", "p/cgroup.procs"),
        Op("write", "cgroup.procs", str(sleeper)),  # back to the base, so p can go
        Op("write", "q/cpuset.cpus", "0"), Op("read", "q/cpuset.cpus"),
        Op("write", "q/cpuset.cpus", "bogus"),
        Op("read", "q/leaf/cpuset.cpus.effective"),  # the parent's change reaches the child
    ]
    if n_cpus >= 2:  # v2 takes a cpuset outside the parent's and masks what is in effect
        ops += [
            Op("write", "q/leaf/cpuset.cpus", "1"), Op("read", "q/leaf/cpuset.cpus"),
            Op("read", "q/leaf/cpuset.cpus.effective"),
            Op("write", "q/cpuset.cpus", "0-1"), Op("read", "q/leaf/cpuset.cpus.effective"),
            Op("write", "q/cpuset.cpus", "0"), Op("read", "q/leaf/cpuset.cpus.effective"),
        ]
    if disk is not None:
        ops += [
            Op("write", "q/io.max", f"{disk} rbps=1048576"), Op("read", "q/io.max"),
            Op("write", "q/io.max", f"{disk} wiops=100 riops=max"), Op("read", "q/io.max"),
            Op("write", "q/io.max", f"{disk} speed=1"), Op("write", "q/io.max", f"{disk} rbps=0"),
            Op("write", "q/io.max", f"{disk} rbps=max wiops=max"), Op("read", "q/io.max"),
        ]
    return ops


def _online_cpus() -> int:
    return len(os.sched_getaffinity(0))


@contextlib.contextmanager
def _sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _remove(dirs: list[str]) -> None:
    """rmdir, deepest first."""
    for d in sorted(dirs, key=lambda p: p.count("/"), reverse=True):
        kernelcg.rmdir_cgroup(d)


def _compare(script: list[Op], real: list[str], fake: list[str]) -> list[str]:
    diffs, known = [], []
    for op, r, f in zip(script, real, fake):
        if r != f:
            line = f"{op.kind} {op.path} {op.value!r}: kernel {r}, fake {f}"
            (known if op.limit else diffs).append(line + (f"  [known limit: {op.limit}]" if op.limit else ""))
    for line in known:
        print(line)
    return diffs


def _fake_host(tmp_path: Path, version: int, blkio: bool = False) -> tuple[FakeHost, dict[str, str]]:
    n = _online_cpus()
    host = FakeHost(str(tmp_path / "fake"), version=version, n_cpus=n, threads_per_core=1)
    assert host.kernel is not None
    disk = _whole_disk()
    if disk is not None:
        host.write(f"sys/block/{disk[0]}/dev", disk[1] + "\n")
    bases: dict[str, str] = {}
    if version == 1:
        for h in ("cpu", "cpuacct", "cpuset", "memory") + (("blkio",) if blkio else ()):
            base = host.layout.abs_dir(h, "base")
            host.kernel.mkdir(base)
            bases[h] = base
        for f in ("cpuset.cpus", "cpuset.mems"):  # as KernelTree does: the parent's
            host.kernel.write(os.path.join(bases["cpuset"], f),
                              host.read(f"cgroup/cpuset/{f}").encode())
    else:
        base = host.layout.abs_dir("", "base")
        host.kernel.mkdir(base)
        bases[""] = base
    return host, bases


@pytest.mark.kernel
@pytest.mark.parametrize("version", [1, 2])
def test_fake_kernel_answers_as_the_kernel(tmp_path: Path, version: int) -> None:
    controllers = ("cpu", "cpuset", "memory", "io", "pids") if version == 2 else ()
    reason = kernelcg.unavailable(version, controllers)
    if reason:
        pytest.skip(reason)
    assert all(k in KNOWN_LIMITS for k in ("threads", "cgroup.kill"))
    # v1's blkio hierarchy where it is mounted and writable (the host's is)
    blkio = version == 1 and kernelcg.unavailable(1, ("blkio",)) is None
    if version == 1 and not blkio:
        print("blkio: not compared:", kernelcg.unavailable(1, ("blkio",)))
    tree = kernelcg.KernelTree(version, ("blkio",) if blkio else ())
    made: list[str] = []
    try:
        with _sleeper() as proc:
            disk = _whole_disk()
            dev = disk[1] if disk else None
            script = v1_script(proc.pid, _online_cpus(), blkio, dev) if version == 1 else \
                v2_script(proc.pid, _online_cpus(), dev)
            real_backend = Backend(dict(tree.bases))
            real = []
            for op in script:
                real.append(real_backend.run(op))
                if op.kind == "mkdir" and real[-1] == "ok":
                    made.append(real_backend.path(op.path))
            host, bases = _fake_host(tmp_path, version, blkio)
            assert host.kernel is not None
            host.kernel.spawn([proc.pid])
            fake_backend = Backend(bases)
            fake = [fake_backend.run(op) for op in script]
            for op, r in zip(script, real):
                print(f"{op.kind:5} {op.path} {op.value!r}: {r}")
            diffs = _compare(script, real, fake)
            assert not diffs, "the fake kernel answers differently:\n" + "\n".join(diffs)
    finally:
        _remove(made)
        tree.cleanup()


# ------------------------------------------------------------------------------------------------
# resctrl, against the kernel's documentation
# ------------------------------------------------------------------------------------------------
def test_resctrl_as_documented(tmp_path: Path) -> None:
    """Documentation/arch/x86/resctrl.rst, sentence by sentence (no machine here has RDT)."""
    host = FakeHost(str(tmp_path / "h"), version=1, n_cpus=4, sockets=2, numa_nodes=2, resctrl=True)
    assert host.kernel is not None
    host.kernel.spawn([4001, 4002])
    root = host.roots.sys_path("fs/resctrl")
    b = Backend({"": root})
    script: list[tuple[Op, str, str]] = [
        # "Resource groups are represented as directories ... Other groups may be created ... using mkdir"
        # and "When a resource group is created ... [it has] tasks, cpus, cpus_list, schemata" files
        (Op("mkdir", "g"), "ok", "mkdir makes a group"),
        (Op("read", "g/tasks"), "read ''", "a new group has no tasks"),
        (Op("read", "g/cpus_list"), "read '\\n'", "a new group has no CPUs"),
        # "the schemata file ... lists all resources, with every domain" (the default group's values)
        (Op("read", "g/schemata"), "read 'L3:0=7ff;1=7ff\\nMB:0=100;1=100\\n'", "all resources, all domains"),
        # "Writing ... only the resources/domains that change need be written"
        (Op("write", "g/schemata", "L3:1=f\n"), "ok", "a partial write"),
        (Op("read", "g/schemata"), "read 'L3:0=7ff;1=f\\nMB:0=100;1=100\\n'", "the rest is kept"),
        # "bandwidth_gran: ... The allocated b/w percentage is rounded off to the next control step"
        (Op("write", "g/schemata", "MB:0=35\n"), "ok", "an MB value"),
        (Op("read", "g/schemata"), "read 'L3:0=7ff;1=f\\nMB:0=40;1=100\\n'", "rounded up to the granularity"),
        # "min_bandwidth: The minimum memory bandwidth percentage which user can request."
        (Op("write", "g/schemata", "MB:0=5\n"), "EINVAL", "below min_bandwidth"),
        # "Intel CPUs ... require that ... 1 bits in the mask ... be contiguous"; "cbm_mask: the valid bits"
        (Op("write", "g/schemata", "L3:0=505\n"), "EINVAL", "a mask with a hole"),
        (Op("write", "g/schemata", "L3:0=fff\n"), "EINVAL", "a mask beyond cbm_mask"),
        # "min_cbm_bits: The minimum number of consecutive bits which must be set"
        (Op("write", "g/schemata", "L3:0=0\n"), "EINVAL", "an empty mask"),
        (Op("write", "g/schemata", "L2:0=1\n"), "EINVAL", "a resource this system does not have"),
        (Op("write", "g/schemata", "L3:5=1\n"), "EINVAL", "a domain this system does not have"),
        # "Writing a task id to the file will add a task to the group ... moving it from its previous group"
        (Op("write", "g/tasks", "4001"), "ok", "a task joins"),
        (Op("mkdir", "h"), "ok", "a second group"),
        (Op("write", "h/tasks", "4001"), "ok", "the task moves"),
        (Op("read", "g/tasks"), "read ''", "and leaves the first group"),
        (Op("read", "h/tasks"), "read '4001\\n'", "for the second"),
        # "Multiple tasks can be added by separating the task ids with commas" (rdtgroup_tasks_write)
        (Op("write", "g/tasks", "4001,4002"), "ok", "a list of tasks"),
        (Op("read", "g/tasks"), "read '4001\\n4002\\n'", "both moved"),
        (Op("write", "g/tasks", "4099"), "ESRCH", "a task that does not exist"),
    ]
    wrong = []
    for op, want, why in script:
        got = b.run(op)
        if got != want:
            wrong.append(f"{op.kind} {op.path} {op.value!r} ({why}): documented {want}, fake {got}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------------------------
# memory.high and memory.reclaim on page cache (memoryHigh's levels 1 and 2), v2 only
# ------------------------------------------------------------------------------------------------
def _memory_state(d: str) -> tuple[int, int]:
    """(memory.current, memory.stat file) of a v2 cgroup dir."""
    with open(os.path.join(d, "memory.current")) as f:
        current = int(f.read())
    with open(os.path.join(d, "memory.stat")) as f:
        stat = dict(line.split() for line in f)
    return current, int(stat["file"])


@pytest.mark.kernel
def test_memory_high_and_reclaim_take_page_cache_as_the_fake_does(tmp_path: Path) -> None:
    """A cgroup holding 64 MiB of page cache (a read of the guest's disk): a memory.reclaim of 16 MiB
    takes at least that, a memory.high written below the usage brings it down to the high, and a reclaim
    of more than there is takes the cache and then says EAGAIN -- on the kernel and, from the same
    starting numbers, on the fake (which takes exactly what is asked: the kernel may take a little more)."""
    reason = kernelcg.unavailable(2, ("memory",))
    if reason:
        pytest.skip(reason)
    disk = os.environ.get("QOSM_GUEST_DISK")
    if not disk or not os.path.exists(disk):
        pytest.skip("needs a block device to read page cache from in QOSM_GUEST_DISK (the test guest has one)")
    tree = kernelcg.KernelTree(2, ("memory",))
    try:
        tree.mkdir("r")
        real_dir = tree.path("", "r")
        # the reader keeps the disk open: the last close of a block device drops its page cache
        done = tmp_path / "read"
        tree.spawn("r", ["sh", "-c", 'exec 3<"$0"; dd if="$0" of=/dev/null bs=1M count=64 2>/dev/null '
                                     '&& touch "$1"; exec sleep 600', disk, str(done)])
        deadline = time.monotonic() + 300
        while not done.exists():
            assert time.monotonic() < deadline, "the read of the disk did not finish"
            time.sleep(0.1)
        current, file = _memory_state(real_dir)
        assert file >= 48 << 20, f"the read left {file} bytes of page cache"
        host, _ = _fake_host(tmp_path, 2)
        assert host.kernel is not None
        host.kernel.mkdir(host.layout.abs_dir("", "r"))
        fake_dir = host.layout.abs_dir("", "r")
        host.write("cgroup/r/memory.current", f"{current}\n")
        host.write("cgroup/r/memory.stat", f"anon {current - file}\nfile {file}\n")

        def both(name: str, value: str) -> tuple[str, str, tuple[int, int], tuple[int, int]]:
            real = Backend({"": real_dir}).run(Op("write", name, value))
            fake = Backend({"": fake_dir}).run(Op("write", name, value))
            return real, fake, _memory_state(real_dir), _memory_state(fake_dir)

        r, f, (rc, _), (fc, _) = both("memory.reclaim", str(16 << 20))
        assert (r, f) == ("ok", "ok")
        # "ok" is the kernel's word that it took at least what was asked; memory.current also moves with
        # what the cgroup charges meanwhile (the reader's exec of sleep, page tables, slab): a few pages
        assert current - rc >= (16 << 20) - (1 << 20) and current - fc == 16 << 20, (current, rc, fc)
        high = min(rc, fc) - (8 << 20)
        r, f, (rc, _), (fc, _) = both("memory.high", str(high))
        assert (r, f) == ("ok", "ok")
        assert rc <= high and fc <= high, (high, rc, fc)
        both("memory.high", "max")
        r, f, (rc, rfile), (fc, ffile) = both("memory.reclaim", str(current + (64 << 20)))
        assert (r, f) == ("EAGAIN", "EAGAIN")
        assert rfile < 4 << 20 and ffile == 0, (rfile, ffile)
    finally:
        tree.cleanup()
