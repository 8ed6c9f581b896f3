"""Real kernel cgroups for tests and benchmarks, created safely.

Rules (the project's, for a shared machine):

* cgroups are created only beneath this process's own cgroup in each hierarchy (read
  from ``/proc/self/cgroup``), under one unique name, and removed afterwards, also on
  failure;
* nothing is written to a cgroup this helper did not create; no process is moved out of
  its memory cgroup except into a child of it that we created; only processes we
  started are killed, by pid;
* on cgroup v2 the controllers this process's own cgroup hands down (its
  ``cgroup.subtree_control``, set by whoever runs the machine: systemd, or the test guest's
  init) are enabled further down only inside the created subtree.

:class:`KernelTree` exposes the created hierarchies as a fake "cgroup root" directory
of symlinks (``<root>/cpu -> /sys/fs/cgroup/cpu/<own>/<unique>`` ...), so the agent can
be pointed at it with ``--cgroup-root`` and a kubelet cgroup root of ``/``: every file
it reads or writes is a real kernel file.  On cgroup v2 one tree holds everything, so
the agent can also be given the real mount and the subtree as the kubelet's cgroup root
(:meth:`KernelTree.agent_flags`).  ``unavailable()`` returns the reason when this is not
possible here (tests skip with it).

cgroup v2 is the ``unified`` mount of a hybrid host (``/sys/fs/cgroup/unified``, usually
without controllers) or ``/sys/fs/cgroup`` itself on a pure v2 host (the test guest of
``kernelvm.py``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

CGROUP_MOUNT = "/sys/fs/cgroup"
V1_HIERARCHIES = ("cpu", "cpuacct", "cpuset", "memory")
V1_OPTIONAL = ("blkio",)  # created only when a test asks for them (``controllers``)


def own_cgroups() -> dict[str, str]:
    """Controller (or "" for the v2 unified line) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(","):
                out[c] = path
    return out


def hierarchy_dir(name: str) -> str:
    """Where hierarchy ``name`` is mounted (``/sys/fs/cgroup/cpu`` may be a symlink to cpu,cpuacct);
    ``unified``: the cgroup2 mount, ``/sys/fs/cgroup`` itself on a pure v2 host."""
    if name == "unified" and _is_cgroup_mount(CGROUP_MOUNT, "cgroup2"):
        return CGROUP_MOUNT
    return os.path.realpath(os.path.join(CGROUP_MOUNT, name))


def pure_v2() -> bool:
    """True on a host whose only cgroup hierarchy is cgroup2 at ``/sys/fs/cgroup``."""
    return _is_cgroup_mount(CGROUP_MOUNT, "cgroup2")


def v2_controllers(path: str) -> set[str]:
    """The controllers a v2 cgroup can hand to its children (its ``cgroup.controllers``)."""
    try:
        with open(os.path.join(path, "cgroup.controllers")) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _is_cgroup_mount(path: str, fstype: str | None = None) -> bool:
    types = (fstype,) if fstype else ("cgroup", "cgroup2")
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if parts[4] == path and any(f" {t} " in line for t in types):
                    return True
    except OSError:
        return False
    return False


def unavailable(version: int = 1, controllers: tuple[str, ...] = ()) -> str | None:
    """Why real cgroups cannot be used for this version here, or None when they can.  On v2,
    ``controllers`` (``cpu``, ``memory`` ...) must also be available below this process's cgroup; on
    v1 those of :data:`V1_OPTIONAL` among them must be mounted and writable too."""
    if os.geteuid() != 0:
        return "real cgroups need root"
    own = own_cgroups()
    hierarchies = V1_HIERARCHIES + _v1_extra(controllers) if version == 1 else ("unified",)
    for h in hierarchies:
        d = hierarchy_dir(h)
        if not _is_cgroup_mount(d):
            return f"{d} is not a cgroup mount"
        key = h if version == 1 else ""
        if key not in own:
            return f"this process has no {h} cgroup in /proc/self/cgroup"
        base = os.path.join(d, own[key].lstrip("/"))
        probe = os.path.join(base, f"qosm-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as e:
            return f"cannot create a cgroup under {base}: {e.strerror}"
        if version == 2 and controllers:
            missing = set(controllers) - _subtree_control(base)
            if missing:
                return (f"cgroup v2 controllers {', '.join(sorted(missing))} are not enabled below {base} "
                        "(bound to v1 hierarchies here?)")
    return None


TREE_CPU_SHARES = 16 * 1024  # a test node weighs as much as 16 busy unrelated tasks (cgroup v1)


def _v1_extra(controllers: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c for c in V1_OPTIONAL if c in controllers)


def _subtree_control(path: str) -> set[str]:
    try:
        with open(os.path.join(path, "cgroup.subtree_control")) as f:
            return set(f.read().split())
    except OSError:
        return set()


def rmdir_cgroup(path: str) -> None:
    """rmdir one cgroup; one whose last process just died may be busy a moment longer (EBUSY)."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return
            time.sleep(0.05)


class KernelTree:
    """A private cgroup subtree in every hierarchy, seen through one symlink root.  On v1 the hierarchies
    of :data:`V1_OPTIONAL` named in ``controllers`` (``blkio``) are created too, and processes enter them."""

    def __init__(self, version: int = 1, controllers: tuple[str, ...] = ()) -> None:
        reason = unavailable(version, controllers)
        if reason:
            raise RuntimeError(reason)
        self.version = version
        self.extra = _v1_extra(controllers) if version == 1 else ()
        self.name = f"qosm-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.root = tempfile.mkdtemp(prefix=f"qosm-cgroot-{os.getpid()}-")  # its owner: tests/leftovers.py
        own = own_cgroups()
        self.bases: dict[str, str] = {}
        self._created: list[str] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        try:
            if version == 1:
                for h in V1_HIERARCHIES + self.extra:
                    base = os.path.join(hierarchy_dir(h), own[h].lstrip("/"), self.name)
                    os.mkdir(base)
                    self._created.append(base)
                    self.bases[h] = base
                    os.symlink(base, os.path.join(self.root, h))
                self._init_cpuset(self.bases["cpuset"])
                self._outweigh_neighbours(self.bases["cpu"])
            else:
                self.mount = hierarchy_dir("unified")
                self.own = own[""]
                base = os.path.join(self.mount, self.own.lstrip("/"), self.name)
                os.mkdir(base)
                self._created.append(base)
                self.bases[""] = base
                os.rmdir(self.root)
                os.symlink(base, self.root)
        except BaseException:
            self.cleanup()
            raise

    @staticmethod
    def _outweigh_neighbours(path: str) -> None:
        """The tree weighs :data:`TREE_CPU_SHARES` against the other tasks of its parent, as kubepods
        (the allocatable CPU's shares) outweighs a node's few daemons.  On a machine shared with busy
        unrelated processes a test node at the default 1,024 shares gets one busy task's part (0.15
        cores of 2 at load 12), and the kernel then measures the neighbours, not the agent's limits."""
        with open(os.path.join(path, "cpu.shares"), "w") as f:
            f.write(str(TREE_CPU_SHARES))

    @staticmethod
    def _init_cpuset(path: str) -> None:
        parent = os.path.dirname(path)
        for f in ("cpuset.cpus", "cpuset.mems"):
            with open(os.path.join(parent, f)) as src:
                value = src.read().strip()
            with open(os.path.join(path, f), "w") as dst:
                dst.write(value)

    def mkdir(self, rel: str, hierarchies: tuple[str, ...] | None = None) -> None:
        """Create ``rel`` (and missing parents) in every hierarchy of this tree, or only in ``hierarchies``
        (v1: a cgroup that exists in cpu and cpuacct but not in memory).  On v2 each created parent
        hands every controller it has to its children (as the kubelet does for kubepods)."""
        parts = [p for p in rel.split("/") if p]
        for base_name, base in self.bases.items():
            if hierarchies is not None and base_name not in hierarchies:
                continue
            cur = base
            for p in parts:
                if self.version == 2:
                    self._delegate(cur)
                cur = os.path.join(cur, p)
                try:
                    os.mkdir(cur)
                except FileExistsError:
                    continue
                self._created.append(cur)
                if base_name == "cpuset":
                    self._init_cpuset(cur)

    def _delegate(self, path: str) -> None:
        """Enable in ``path``'s ``cgroup.subtree_control`` what it has and does not hand down yet."""
        missing = v2_controllers(path) - _subtree_control(path)
        if missing and path in self._created:
            with open(os.path.join(path, "cgroup.subtree_control"), "w") as f:
                f.write(" ".join(f"+{c}" for c in sorted(missing)))

    def path(self, hierarchy: str, rel: str) -> str:
        return os.path.join(self.bases[hierarchy if self.version == 1 else ""], rel)

    def agent_flags(self) -> list[str]:
        """``qosmanager run`` flags that make this tree the agent's whole world.

        v1: the symlink root as ``--cgroup-root`` (this process's cgroup differs per hierarchy, so
        no single kubelet cgroup root could name the subtree).  v2: the real mount, and the subtree
        as the kubelet's cgroup root, as a kubelet started with ``--cgroup-root=<subtree>`` would
        have it: version detection sees the real cgroup2 filesystem."""
        if self.version == 1:
            return ["--cgroup-root", self.root, "--kubelet-cgroup-root", "/"]
        rel = os.path.join(self.own, self.name)
        return ["--cgroup-root", self.mount, "--kubelet-cgroup-root", rel]

    def hierarchies(self, memory: bool = False) -> tuple[str, ...]:
        """Where a process is placed: v1 cpu, cpuacct, cpuset, the optional ones (and memory if asked),
        v2 the one tree."""
        if self.version == 2:
            return ("",)
        return ("cpu", "cpuacct", "cpuset", *self.extra) + (("memory",) if memory else ())

    def spawn(self, rel: str, argv: list[str], *, memory: bool = False,
              **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` already inside ``rel`` (the child enters its cgroups before it executes).
        On v1 it keeps its memory cgroup unless ``memory`` (then it enters this tree's, a child of
        ours).  Killed, by pid, on cleanup."""
        procs_files = [os.path.join(self.path(h, rel), "cgroup.procs") for h in self.hierarchies(memory)]

        def enter() -> None:
            for f in procs_files:
                with open(f, "w") as fh:
                    fh.write("0")  # 0: the writing process itself

        proc = subprocess.Popen(argv, preexec_fn=enter, **popen)
        self._procs.append(proc)
        return proc

    def spawn_busy(self, rel: str, seconds: float = 30.0) -> subprocess.Popen[bytes]:
        """Start a CPU-bound child and move it into ``rel`` of the cpu and cpuacct hierarchies (v1) or
        the unified one (v2).  It stays in its memory cgroup."""
        code = f"import time\nt = time.time() + {seconds}\nwhile time.time() < t:\n    pass\n"
        proc = subprocess.Popen([sys.executable, "-c", code])
        self._procs.append(proc)
        hierarchies = ("cpu", "cpuacct") if self.version == 1 else ("",)
        for h in hierarchies:
            with open(os.path.join(self.path(h, rel), "cgroup.procs"), "w") as f:
                f.write(str(proc.pid))
        return proc

    def cleanup(self) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(5)
        for path in sorted(self._created, key=lambda p: p.count("/"), reverse=True):
            if self.version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):
                # what our processes started in our cgroups (v2 only can tell them apart so safely)
                with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as f:
                    f.write("1")
            rmdir_cgroup(path)
        if os.path.islink(self.root):
            os.unlink(self.root)
        elif os.path.isdir(self.root):
            for h in os.listdir(self.root):
                os.unlink(os.path.join(self.root, h))
            os.rmdir(self.root)


@contextlib.contextmanager
def kernel_tree(version: int = 1) -> Iterator[KernelTree]:
    tree = KernelTree(version)
    try:
        yield tree
    finally:
        tree.cleanup()
