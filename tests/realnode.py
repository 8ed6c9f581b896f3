"""A Kubernetes node made of real cgroups and real processes, and the real agent run against it.

:class:`RealNode` builds a kubepods tree (cgroupfs or systemd layout) inside a
:class:`kernelcg.KernelTree`, lays out pods and containers the way the kubelet would (CPU and
memory limits included), starts real processes in the containers' cgroups, writes the standalone
files (pods, Node, NodeSLO) and starts ``qosmanager run`` as a subprocess on it.

By default the node is a koordinator colocation node (``sim.koordnode``, the model the fake nodes
use too): every pod's and container's cgroups hold what its object asks of the kubelet and of
koordlet's batch-resource hook -- BE pods' CFS quota from the ``kubernetes.io/batch-cpu`` limit, shares
from the batch-cpu request and memory limit from the ``kubernetes.io/batch-memory`` limit, other pods'
quotas, shares and memory limits from their own limits and requests, the Burstable QoS dir's shares
from its pods' requests and the BestEffort dir's 2.  ``real_node(vanilla="why")`` opts a test out:
BE pods are then laid out as the kubelet alone would (no hook: unlimited, 2 shares).  What a test then
checks is what the kernel reports -- ``cpu.stat``, ``cpu.max``, ``memory.events``,
``/proc/<pid>/status`` -- read here without the agent's code, so the tests hold whatever the agent's
internals become.

The same helpers run on the host's cgroup v1 hierarchies and on the cgroup v2 guest
(``kernelvm.py``); paths are relative to the tree (``kubepods/besteffort/pod<uid>/<id>``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

import kernelcg
from agentloop import agent_running
from kernelcg import KernelTree
from qosmanager.api.pod import BATCH_CPU, BATCH_MEMORY, pod_meta
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.resources import milli_cpu_to_shares, shares_to_weight
from qosmanager.host.roots import HostRoots
from qosmanager.sim import koordnode
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.objects import nodeslo_object, pod_list, pod_object

PERIOD_US = 100_000
BUSY = ["sh", "-c", "while :; do :; done"]  # a CPU-bound process that starts fast even in the guest
CLK_TCK = os.sysconf("SC_CLK_TCK")
KUBE_QOS_OF = {"LSE": KubeQoS.GUARANTEED, "LSR": KubeQoS.GUARANTEED, "LS": KubeQoS.BURSTABLE,
               "BE": KubeQoS.BESTEFFORT}


AGENT_START_TIMEOUT = 300.0  # seconds for ``qosmanager run`` to start (a loaded machine's guest is slow)
GUEST_HINT = "cgroup v2 tests run in the test guest (tests/test_guest.py)"


def kernel_version() -> int:
    """The cgroup version real-kernel tests use here: 2 on a pure v2 host (the guest), else 1."""
    return 2 if kernelcg.pure_v2() else 1


@contextlib.contextmanager
def real_node(workdir: str, *, version: int | None = None, driver: str = "cgroupfs",
              controllers: tuple[str, ...] = ("cpu",), vanilla: str = "") -> Iterator[RealNode]:
    """A :class:`RealNode` on this kernel's cgroups (``version``: only that one), removed afterwards;
    the test skips, saying why, where that cannot be had.  A koordinator node unless ``vanilla`` says
    why the test needs a node without koordlet's hooks."""
    have = kernel_version()
    if version is not None and version != have:
        pytest.skip(f"needs cgroup v{version}, this kernel's tests use v{have}"
                    + (f"; {GUEST_HINT}" if version == 2 else ""))
    reason = kernelcg.unavailable(have, controllers)
    if reason:
        pytest.skip(f"real cgroups v{have} unavailable: {reason}")
    tree = KernelTree(have, controllers)
    try:
        yield RealNode(tree, str(workdir), driver=driver, vanilla=vanilla)
    finally:
        tree.cleanup()


@dataclass
class Pod:
    name: str
    qos: str  # koordinator's class: LS, BE ...
    fake: FakePod
    obj: dict[str, Any]
    dir: str  # relative to the tree
    containers: list[str]  # container dirs, relative to the tree
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def uid(self) -> str:
        return self.fake.uid


class RealNode:
    """A kubepods tree of real cgroups with pods in it, and the files the agent reads."""

    def __init__(self, tree: KernelTree, workdir: str, *, driver: str = "cgroupfs", vanilla: str = "") -> None:
        self.tree = tree
        self.koordinator = not vanilla  # koordlet's batch-resource hook writes BE pods' values
        self.version = tree.version
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        # relative dirs only: the kubelet cgroup root is the tree itself
        self.layout = CgroupLayout(HostRoots(cgroup=tree.root), tree.version, driver)
        self.cpus = os.cpu_count() or 1
        self.pods: list[Pod] = []
        for q in KubeQoS:
            tree.mkdir(self.layout.qos_dir(q))
        self.pods_file = os.path.join(workdir, "pods.json")
        self.node_file = os.path.join(workdir, "node.json")
        self.slo_file = os.path.join(workdir, "nodeslo.json")
        self.audit_file = os.path.join(workdir, "audit.jsonl")
        self.write_node()
        self.write_nodeslo({})

    # ------------------------------------------------------------------ pods, as the kubelet lays them out
    def add_pod(self, name: str, qos: str, *, containers: int = 1, cpu_milli: int = 1000,
                memory: int = 1 << 30, cpu_limit: bool = True, memory_limit: bool = True,
                memory_max: int | None = None, annotations: Mapping[str, str] | None = None,
                labels: Mapping[str, str] | None = None, priority: int | None = None) -> Pod:
        """A pod of koordinator class ``qos`` (LS: Burstable with requests half its limits, LSE/LSR:
        Guaranteed, BE: BestEffort with batch resources), each container asking ``cpu_milli`` and
        ``memory``.  Its cgroups hold what the kubelet and koordlet's batch-resource hook write for it
        (the module docstring).  ``cpu_limit`` / ``memory_limit`` False: the pod's spec has no such
        limit (none in its object, none in its cgroups).  ``memory_max``: each container's memory limit
        (its batch-memory limit for BE) when it is above its request (an LS or BE pod)."""
        uid = str(uuid.uuid4())
        fake = FakePod(uid, "default", name, KUBE_QOS_OF[qos],
                       [FakeContainer(f"c{i}", "containerd://" + uuid.uuid4().hex * 2) for i in range(containers)])
        obj = pod_object(fake, cpu_milli=cpu_milli, memory=memory, annotations=annotations, priority=priority,
                         labels={"koordinator.sh/qosClass": qos, **(labels or {})})
        if memory_max is not None:
            _set_memory_limit(obj, memory_max)
        _drop_limits(obj, cpu=not cpu_limit, memory=not memory_limit)
        pod_dir = self.layout.pod_dir(fake.qos, uid)
        ctr_dirs = [self.layout.container_dir(pod_dir, c.container_id) for c in fake.containers]
        for d in ctr_dirs:
            self.tree.mkdir(d)
        pod = Pod(name, qos, fake, obj, pod_dir, ctr_dirs)
        self.pods.append(pod)
        self._lay_out(pod)
        self.write_pods()
        return pod

    def values(self, pod: Pod) -> tuple[koordnode.CgroupValues, list[koordnode.CgroupValues]]:
        """What the pod's dir and its containers' dirs hold on this node (quota, shares, memory limit)."""
        meta = pod_meta(pod.obj)
        if meta.is_be() and not self.koordinator:  # the kubelet alone: a BestEffort pod, unlimited
            kubelet = koordnode.CgroupValues(-1, milli_cpu_to_shares(0), -1)
            return kubelet, [kubelet] * len(pod.containers)
        pod_level, by_name = koordnode.pod_values(meta)
        return pod_level, [by_name[c.name] for c in pod.fake.containers]

    def _lay_out(self, pod: Pod) -> None:
        """The pod's values (containers first: a v1 parent quota is never below a child's), then the
        QoS dirs' shares as the kubelet keeps them."""
        pod_level, ctrs = self.values(pod)
        for d, v in [*zip(pod.containers, ctrs), (pod.dir, pod_level)]:
            self.set_quota(d, v.quota)
            self.set_shares(d, v.shares)
            if v.memory_limit > 0:
                self.set_memory_limit(d, v.memory_limit)
        burstable = koordnode.burstable_shares(pod_meta(p.obj) for p in self.pods)
        self.set_shares(self.layout.qos_dir(KubeQoS.BURSTABLE), burstable)
        self.set_shares(self.layout.qos_dir(KubeQoS.BESTEFFORT), milli_cpu_to_shares(0))

    def set_shares(self, rel: str, shares: int) -> None:
        """v1 ``cpu.shares``; v2 the kubelet's conversion of shares to a ``cpu.weight``."""
        if self.version == 1:
            self.write(rel, "cpu.shares", str(shares))
        else:
            self.write(rel, "cpu.weight", str(shares_to_weight(shares)))

    def remove_hierarchy(self, pod: Pod, hierarchy: str) -> None:
        """v1: take the pod's dirs out of one hierarchy, as on a node where that controller is not
        mounted for it (the kubelet would not have created them)."""
        for d in [*pod.containers, pod.dir]:
            os.rmdir(self.tree.path(hierarchy, d))

    def start(self, pod: Pod, argv: list[str] | None = None, container: int = 0, *, memory: bool = False,
              **popen: Any) -> subprocess.Popen[bytes]:
        """A real process in one of the pod's containers (default: a busy loop)."""
        proc = self.tree.spawn(pod.containers[container], argv or BUSY, memory=memory, **popen)
        pod.procs.append(proc)
        return proc

    # ------------------------------------------------------------------ the agent's input files
    def write_pods(self) -> None:
        _write_json(self.pods_file, pod_list(p.obj for p in self.pods))

    def write_node(self, *, cpus: int | None = None, memory: int | None = None,
                   extra: Mapping[str, str] | None = None) -> None:
        """The Node: ``cpus`` and ``memory`` (default: this machine's), and ``extra`` resources
        (``kubernetes.io/batch-cpu`` ...) in its capacity and allocatable."""
        cpus = cpus or self.cpus
        memory = memory or _meminfo_total()
        alloc = {"cpu": str(cpus), "memory": str(memory), "pods": "110", **(extra or {})}
        _write_json(self.node_file, {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "real-node", "labels": {"kubernetes.io/hostname": "real-node"}},
            "status": {"capacity": dict(alloc), "allocatable": alloc},
        })

    def write_nodeslo(self, spec: Mapping[str, Any]) -> None:
        _write_json(self.slo_file, nodeslo_object(spec, name="real-node"))

    # ------------------------------------------------------------------ the agent
    def agent_command(self, *flags: str) -> list[str]:
        # version and driver are left to the agent's detection on the real tree
        return [sys.executable, "-m", "qosmanager", "run", *self.tree.agent_flags(), "--pods-file", self.pods_file,
                "--node-file", self.node_file, "--node-slo-file", self.slo_file, "--metrics-addr", "",
                "--audit-log", self.audit_file, *flags]

    @contextlib.contextmanager
    def agent(self, *flags: str) -> Iterator[Agent]:
        """``qosmanager run`` on this node while the block runs, from when it says it starts (the
        tests' timeouts measure the agent, not its interpreter's start-up: minutes in a slow guest);
        SIGTERM (then SIGKILL) after it."""
        log = open(os.path.join(self.workdir, "agent.log"), "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(self.agent_command(*flags), stdout=log, stderr=subprocess.STDOUT)
        agent = Agent(proc, self.audit_file, log.name)
        try:
            agent.wait_for("the agent's start", agent.started, AGENT_START_TIMEOUT)
            yield agent
        finally:
            agent.stop()
            log.close()

    # ------------------------------------------------------------------ what the kernel says
    def path(self, rel: str, name: str, hierarchy: str = "cpu") -> str:
        return os.path.join(self.tree.path(hierarchy, rel), name)

    def read(self, rel: str, name: str, hierarchy: str = "cpu") -> str:
        with open(self.path(rel, name, hierarchy)) as f:
            return f.read().strip()

    def write(self, rel: str, name: str, value: str, hierarchy: str = "cpu") -> None:
        """The kubelet's part: a cgroup file of the node's own tree."""
        with open(self.path(rel, name, hierarchy), "w") as f:
            f.write(value)

    def set_quota(self, rel: str, quota: int) -> None:
        """The CFS quota in µs per 100 ms period; -1 for unlimited."""
        if self.version == 1:
            self.write(rel, "cpu.cfs_quota_us", str(quota))
        else:
            self.write(rel, "cpu.max", f"{'max' if quota < 0 else quota} {PERIOD_US}")

    def set_memory_limit(self, rel: str, limit: int) -> None:
        """The memory limit, where this node has the memory controller for ``rel`` (v1: its memory
        hierarchy dir, v2: ``memory.max``, present when the tree was given the controller)."""
        name, hierarchy = ("memory.limit_in_bytes", "memory") if self.version == 1 else ("memory.max", "cpu")
        if os.path.exists(self.path(rel, name, hierarchy)):
            self.write(rel, name, str(limit), hierarchy)

    def quota(self, rel: str) -> int:
        """The CFS quota in µs per 100 ms period; -1 for unlimited."""
        if self.version == 1:
            return int(self.read(rel, "cpu.cfs_quota_us"))
        q, _period = self.read(rel, "cpu.max").split()
        return -1 if q == "max" else int(q)

    def burst(self, rel: str) -> int:
        """The CFS burst in µs (v1 ``cpu.cfs_burst_us``, v2 ``cpu.max.burst``)."""
        return int(self.read(rel, "cpu.cfs_burst_us" if self.version == 1 else "cpu.max.burst"))

    def cpu_stat(self, rel: str) -> dict[str, int]:
        return _kv(self.read(rel, "cpu.stat"))

    def usage_us(self, rel: str) -> int:
        """CPU time the cgroup's processes used, µs (v1 cpuacct.usage, v2 cpu.stat usage_usec)."""
        if self.version == 1:
            return int(self.read(rel, "cpuacct.usage", "cpuacct")) // 1000
        return self.cpu_stat(rel)["usage_usec"]

    def cpus_allowed(self, pid: int) -> set[int]:
        """``Cpus_allowed_list`` of ``/proc/<pid>/status``: where the scheduler may run the process."""
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpus(line.split(":", 1)[1])
        raise ValueError(f"/proc/{pid}/status has no Cpus_allowed_list")

    def rates(self, rels: list[str], seconds: float) -> tuple[list[float], float]:
        """CPU used by each of ``rels`` and by the whole node (``/proc/stat``) over ``seconds``, in cores."""
        before = [self.usage_us(r) for r in rels]
        node0, t0 = node_busy_seconds(), time.monotonic()
        time.sleep(seconds)
        after = [self.usage_us(r) for r in rels]
        node1, t1 = node_busy_seconds(), time.monotonic()
        dt = t1 - t0
        return [(a - b) / 1e6 / dt for a, b in zip(after, before)], (node1 - node0) / dt


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    audit_file: str
    log_file: str

    def audit(self, strategy: str | None = None, target_suffix: str | None = None) -> list[dict[str, Any]]:
        """The audit records so far (the agent flushes once per batch)."""
        out = []
        try:
            with open(self.audit_file) as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line being written
            if strategy and rec.get("strategy") != strategy:
                continue
            if target_suffix and not str(rec.get("target", "")).endswith(target_suffix):
                continue
            out.append(rec)
        return out

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float,
                 detail: Callable[[], str] | None = None) -> Any:
        """Poll ``check`` until it returns something true; fail with the agent's log (and ``detail()``,
        what the test knows of the node's state) after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"the agent exited ({self.proc.returncode}) before {what}:\n{self.log()}")
            if time.monotonic() > deadline:
                extra = f"\n{detail()}" if detail is not None else ""
                raise AssertionError(f"waited {timeout:.0f} s in vain for {what}{extra}; agent log:\n{self.log()}")
            time.sleep(0.1)

    def started(self) -> bool:
        """Whether the agent logged its start line (``starting: ...``, before its first tick)."""
        try:
            with open(self.log_file, "rb") as f:
                return b" starting: " in f.read()
        except OSError:
            return False

    def log(self) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(f.readlines()[-40:])
        except OSError:
            return ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@contextlib.contextmanager
def in_process_agent(node: RealNode, proc_root: str, strategies: list[str], *, gates: dict[str, bool] | None = None,
                     qos: Any = None, seconds: float = 1800.0) -> Iterator[Any]:
    """The agent in this process (a thread) on the node's cgroups, with ``proc_root`` as its /proc; stopped
    after.  For tests that look at its parts (its PSI watch, its strategies' runs) while it runs."""
    from qosmanager.agent import Agent as InProcess
    from qosmanager.agent import AgentConfig
    from qosmanager.framework.strategy import QoSConfig

    tree = node.tree
    if tree.version == 1:
        roots = HostRoots(cgroup=tree.root, proc=proc_root, kubelet_cgroup_root="/")
    else:
        roots = HostRoots(cgroup=tree.mount, proc=proc_root, kubelet_cgroup_root=os.path.join(tree.own, tree.name))
    agent = InProcess(AgentConfig(roots=roots, node_name="real-node", pods_file=node.pods_file,
                                  node_file=node.node_file, node_slo_file=node.slo_file, metrics_addr="",
                                  audit_log=node.audit_file, strategies=list(strategies), feature_gates=gates or {},
                                  cgroup_version=str(tree.version), cgroup_driver="cgroupfs",
                                  qos=qos if qos is not None else QoSConfig()))
    with agent_running(agent, seconds):
        yield agent


def wait_until(what: str, check: Callable[[], Any], timeout: float) -> None:
    """Poll ``check`` every 10 ms until it is true; fail saying ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s in vain for {what}"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# a proc root with the node-wide inputs a test sets itself


class ProcView:
    """A proc root for the agent (``--proc-root``): ``/proc``'s entries as symlinks (pid dirs linked as
    they appear, so kill mode can check a process's cgroup), except the files the test sets:

    * ``stat`` (with ``cpus``): the node's CPUs busy ``busy`` (0..1) of the time;
    * ``meminfo`` (with ``memory``): ``MemTotal`` ``memory[0]`` and ``memory[1]()`` bytes in use.

    On a shared machine other work moves the real node-wide numbers; these files make the node the
    test's own.  They are rewritten every 0.1 s in place at a fixed length (the agent keeps them open)."""

    def __init__(self, root: str, *, cpus: int | None = None, busy: float = 0.0,
                 memory: tuple[int, Callable[[], int]] | None = None) -> None:
        self.root, self.cpus, self.busy, self.memory = root, cpus, busy, memory
        self.own = {n for n, on in (("stat", cpus is not None), ("meminfo", memory is not None)) if on}
        os.makedirs(root)
        self._busy_ticks = self._idle_ticks = 0.0
        self._at = time.monotonic()
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        self._link()
        if self.cpus is not None:
            self._write_stat()
        if self.memory is not None:
            total, used = self.memory[0], min(self.memory[1](), self.memory[0])
            kb = [total // 1024, (total - used) // 1024]
            self._put("meminfo", f"MemTotal:       {kb[0]:012d} kB\nMemFree:        {kb[1]:012d} kB\n"
                                 f"MemAvailable:   {kb[1]:012d} kB\n")

    def _link(self) -> None:
        have = set(os.listdir(self.root))
        for name in os.listdir("/proc"):
            if name not in have and name not in self.own:
                with contextlib.suppress(FileExistsError):
                    os.symlink(f"/proc/{name}", os.path.join(self.root, name))

    def _write_stat(self) -> None:
        assert self.cpus is not None
        now = time.monotonic()
        elapsed = (now - self._at) * CLK_TCK
        self._at = now
        self._busy_ticks += elapsed * self.busy
        self._idle_ticks += elapsed * (1 - self.busy)
        zeros = " ".join(["000000000000"] * 6)

        def row(busy: float, idle: float) -> str:
            return f"{int(busy):012d} 000000000000 000000000000 {int(idle):012d} {zeros}"

        text = f"cpu  {row(self._busy_ticks * self.cpus, self._idle_ticks * self.cpus)}\n"
        text += "".join(f"cpu{i:<4d}{row(self._busy_ticks, self._idle_ticks)}\n" for i in range(self.cpus))
        self._put("stat", text)

    def _put(self, name: str, text: str) -> None:
        fd = os.open(os.path.join(self.root, name), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, text.encode(), 0)  # the same length every time: no truncation to race with
        finally:
            os.close(fd)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@contextlib.contextmanager
def proc_view(node: RealNode, **kw: Any) -> Iterator[ProcView]:
    """A :class:`ProcView` in the node's work dir while the block runs."""
    view = ProcView(os.path.join(node.workdir, "proc"), **kw)
    try:
        yield view
    finally:
        view.close()


# ---------------------------------------------------------------------------------------------
# plain readers of kernel files


def node_busy_seconds() -> float:
    """CPU seconds the node has been busy (``/proc/stat``: user + nice + system + irq + softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu"
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / CLK_TCK


def parse_cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _kv(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[k] = int(v)
    return out


def kv_file(path: str) -> dict[str, int]:
    with open(path) as f:
        return _kv(f.read())


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise ValueError("/proc/meminfo has no MemTotal")


def _set_memory_limit(obj: dict[str, Any], limit: int) -> None:
    """Each container's memory limit (batch-memory for a BE pod), above its request."""
    for c in obj["spec"]["containers"]:
        limits, requests = c["resources"]["limits"], c["resources"]["requests"]
        name = BATCH_MEMORY if BATCH_MEMORY in limits else "memory"
        if name == "memory" and limits.get("cpu") == requests.get("cpu"):
            raise ValueError("a Guaranteed pod's memory limit is its request")
        if limit < int(requests[name]):
            raise ValueError(f"memory limit {limit} below the request {requests[name]}")
        limits[name] = str(limit)


def _drop_limits(obj: dict[str, Any], *, cpu: bool, memory: bool) -> None:
    """Take the CPU (``cpu``, batch-cpu) and/or memory limits out of a pod object's containers."""
    names = ((("cpu", BATCH_CPU) if cpu else ()) + (("memory", BATCH_MEMORY) if memory else ()))
    for c in obj["spec"]["containers"]:
        limits = c["resources"].get("limits", {})
        for n in names:
            limits.pop(n, None)


def _write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)
