"""``qosmanager simulate``: the real agent on a synthetic dense node, under a closed-loop load.

What runs is what ``qosmanager run`` runs: :class:`~qosmanager.agent.Agent` with its file source,
collector, QoS manager (every enabled strategy), executor and eviction coordinator, pointed at a
fake host (:class:`~qosmanager.sim.fakehost.FakeHost`) in a temporary directory (``/dev/shm`` when
it exists), laid out as a koordinator node (:mod:`~qosmanager.sim.koordnode`: BE pods' quotas,
shares and memory limits from their batch resources, the kubelet's values for the others).  The
node gets a pods file, a Node and a NodeSLO that switches BE suppression and memory eviction on,
and :class:`~qosmanager.sim.load.LoadModel` writes the kernel's counters every model
step, reading back the BE limits the agent wrote (the closed loop).

Time is simulated: the agent's wall clock, its scheduler's monotonic clock and the collector's
nanosecond clock all read one :class:`SimClock`, and the loop jumps from one due job to the next,
so 30 s of node time take a few seconds.  What is *measured*, not simulated: the CPU time the
agent's own jobs take (``time.process_time`` around each collect and strategy run, less the fake
kernel's emulation of the calls they make: :func:`~qosmanager.sim.fakesysio.emulation_seconds`, said apart in
the summary) and the peak RSS (psutil, sampled after every agent tick; the process also holds the simulator).

Every path the command writes (``--json``, ``--plot``, ``--workdir``, ``--audit-log``) is checked
before anything is built, and ``--plot`` needs matplotlib: a bad one is one line and exit status 2,
not a traceback after the run.  The summary names the unit of every number and prints a BE limit
at koordlet's minimum as "at the floor" with its value.

The fast path (``--react-mode fast``, the default, as ``run``) samples the node every 50 ms of simulated
time, between the scheduler's jobs; the load model then writes the counters it samples (the kube QoS
dirs' usage and ``/proc/stat``) at the same cadence (:meth:`~qosmanager.sim.load.LoadModel.substep`),
as a kernel's move continuously, so BE's limit falls between ticks when LS demand rises.  The summary
gives its reaction times; ``--react-mode tick`` leaves it off (koordlet's pace).  The memory trigger
(with memoryHigh, gate ``BEMemoryHigh``) samples ``/proc/meminfo`` at the same cadence, which the model
moves at each sub-step too: memoryHigh caps BE (level 1) within a sample of the node crossing L - 5 %,
the kernel (the fake one, honoured by the load model) holds BE at the cap, and memoryEvict evicts only
if the node still reaches T.  The summary gives the levels in force, BE's cap and the reaction times of
each level (:mod:`~qosmanager.framework.memreaction`).  The node's memory stalls are modelled too
(:mod:`~qosmanager.sim.fakestall`: the pressure files, and the fake kernel's PSI triggers judging them as the
kernel does): the agent's PSI watch (:mod:`~qosmanager.framework.psi`) registers its triggers on the
simulated node and is polled at the same 50 ms, and a trigger that fires wakes the memory levels at once;
the summary's ``PSI`` line and ``--json``'s ``psi`` give the stalls, the triggers and their events, and for
the fast path's CPU triggers (``psi.cpu``) the samples they took at once and the writes those made.

Evictions run in mode ``none`` (decide and audit); the load model honours each decision: the pod
stops using CPU and memory at once and leaves the pods file and the cgroup tree a little later, as
a pod evicted through the API would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, TextIO

import psutil

from qosmanager.agent import Agent, AgentConfig
from qosmanager.api.pod import pod_meta
from qosmanager.eviction.types import EvictDecision
from qosmanager.framework.memreaction import MemoryReactions
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost, FakePod
from qosmanager.sim.fakesysio import emulation_seconds
from qosmanager.sim.load import LoadModel, LoadShape, StepRecord
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from qosmanager.sim.result import Eviction, FileWrite, JobStats, SimConfig, SimResult
from qosmanager.sim.summary import (  # noqa: F401  (re-exported: the report)
    _BLOCKS,
    MIN_BE_CPUS,
    MIN_CFS_QUOTA_US,
    _status,
    at_floor,
    floor_text,
    result_json,
    sparkline,
    summarize,
)

SIM_NODE = "sim-node"  # the Node, the NodeSLO and every pod's spec.nodeName
BASE_WALL = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated wall time starts here (reproducible audits)
BE_PRIORITIES = (5100, 5300, 5500, 5700, 5900)  # koord-batch tiers
BE_PRIORITY_WEIGHTS = (1, 2, 4, 2, 1)


class SimClock:
    """One simulated time for every clock the agent reads."""

    def __init__(self, base_wall: float = BASE_WALL) -> None:
        self.base = base_wall
        self.elapsed = 0.0

    def wall(self) -> float:
        return self.base + self.elapsed

    def mono(self) -> float:
        return self.elapsed

    def mono_ns(self) -> int:
        return round(self.elapsed * 1e9) + 1_000_000_000  # never 0: a real monotonic clock is not


class Progress:
    """One updating status line on a terminal; plain lines (every tenth of the run) otherwise."""

    def __init__(self, stream: TextIO | None, duration: float) -> None:
        self.stream = stream
        self.tty = bool(stream is not None and stream.isatty())
        self.every = max(duration / 10.0, 1.0)
        self._next_plain = 0.0
        self._last_tty = 0.0
        self._width = 0

    def update(self, t: float, text: str) -> None:
        if self.stream is None:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last_tty < 0.1:
                return
            self._last_tty = now
            line = f"[{t:6.1f}s] {text}"
            pad = max(0, self._width - len(line))
            self._width = len(line)
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
        elif t >= self._next_plain:
            self._next_plain = t + self.every
            self.stream.write(f"[{t:6.1f}s] {text}\n")
            self.stream.flush()

    def done(self) -> None:
        if self.stream is not None and self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


# ----------------------------------------------------------------------------------------------
# the synthetic node
# ----------------------------------------------------------------------------------------------
@dataclass
class SimNode:
    root: str
    host: FakeHost
    pods: list[FakePod]
    objects: dict[str, dict[str, Any]]  # uid -> Pod object
    priorities: dict[str, int]
    pods_file: str
    node_file: str
    nodeslo_file: str
    nodeslo_spec: dict[str, Any]
    gates: dict[str, bool]


def _fast_tmp() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def build_node(cfg: SimConfig, root: str) -> SimNode:
    """The fake host with every pod laid out, and the files the agent's file source reads."""
    memory = cfg.memory_gib << 30
    host = FakeHost(os.path.join(root, "host"), version=cfg.cgroup_version, n_cpus=cfg.cpus,
                    memory_bytes=memory, seed=cfg.seed, kernel=cfg.kernel, koordinator=True)
    pods = FakeHost.make_pods(cfg.containers, seed=cfg.seed)
    rng = random.Random(cfg.seed)
    priorities: dict[str, int] = {}
    objects: dict[str, dict[str, Any]] = {}
    n_be = sum(1 for p in pods if p.qos is KubeQoS.BESTEFFORT)
    per_container_cpu = max(100, cfg.cpus * 1000 // max(1, n_be) // 2)
    for p in pods:
        if p.qos is KubeQoS.BESTEFFORT:
            prio = rng.choices(BE_PRIORITIES, BE_PRIORITY_WEIGHTS)[0]
            objects[p.uid] = pod_object(p, cpu_milli=per_container_cpu, memory=1 << 30, priority=prio,
                                        node_name=SIM_NODE)
        else:
            prio = 9500
            objects[p.uid] = pod_object(p, cpu_milli=500, memory=1 << 30, node_name=SIM_NODE)
        priorities[p.uid] = prio
    for p in pods:  # a koordinator node: each pod's cgroups laid out from its object
        host.add_pod(p, pod_meta(objects[p.uid]))
    spec = {"resourceUsedThresholdWithBE": {
        "enable": True,
        "cpuSuppressThresholdPercent": cfg.cpu_threshold_percent,
        "cpuSuppressPolicy": cfg.suppress_policy,
        "memoryEvictThresholdPercent": cfg.memory_threshold_percent,
    }}
    node = node_object(host, name=SIM_NODE, batch_cpu_milli=cfg.cpus * 1000 // 2, batch_memory=memory // 2)
    files = {name: os.path.join(root, name) for name in ("pods.json", "node.json", "nodeslo.json")}
    _atomic_json(files["node.json"], node)
    _atomic_json(files["nodeslo.json"], nodeslo_object(spec, name=SIM_NODE))
    _atomic_json(files["pods.json"], pod_list(objects.values()))
    gates = {"BEMemoryEvict": True, **cfg.feature_gates}
    return SimNode(root, host, pods, objects, priorities, files["pods.json"], files["node.json"],
                   files["nodeslo.json"], spec, gates)


def _atomic_json(path: str, obj: Any) -> None:
    """Write then rename, so the agent never reads half a file (it notices the new inode)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"))
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------
def run_simulation(cfg: SimConfig, progress: Progress | None = None) -> SimResult:
    """Build the node, run the agent and the load model for ``cfg.duration`` simulated seconds."""
    cfg.validate()
    root = tempfile.mkdtemp(prefix="qosm-sim-", dir=cfg.workdir or _fast_tmp())
    try:
        return _run(cfg, root, progress)
    finally:
        if cfg.keep:
            if progress is not None and progress.stream is not None:
                progress.stream.write(f"kept the synthetic node in {root}; the same agent on it, deciding "
                                      f"and writing nothing:\n  {kept_node_command(cfg, root)}\n")
        else:
            shutil.rmtree(root, ignore_errors=True)


def kept_node_command(cfg: SimConfig, root: str) -> str:
    """``qosmanager run --dry-run`` on a kept node, with the simulation's node name and gates, so it runs
    the strategies the simulation ran."""
    gates = {"BEMemoryEvict": True, **cfg.feature_gates}
    h = os.path.join(root, "host")
    return (f"qosmanager run --dry-run --duration 10s --metrics-addr '' --node-name {SIM_NODE} "
            f"--cgroup-root {h}/cgroup --proc-root {h}/proc --sys-root {h}/sys "
            f"--pods-file {root}/pods.json --node-file {root}/node.json --node-slo-file {root}/nodeslo.json "
            f"--collect-mode {cfg.collect_mode} "
            f"--feature-gates {','.join(f'{k}={str(v).lower()}' for k, v in gates.items())}")


def _run(cfg: SimConfig, root: str, progress: Progress | None) -> SimResult:
    t_build = time.monotonic()
    node = build_node(cfg, root)
    model = LoadModel(node.host, node.pods, node.priorities, duration=cfg.duration, shape=cfg.shape,
                      seed=cfg.seed)
    proc = psutil.Process()
    baseline_rss = proc.memory_info().rss
    clock = SimClock()
    agent_cfg = AgentConfig(roots=node.host.roots, cgroup_version=str(cfg.cgroup_version),
                            cgroup_driver="cgroupfs", node_name=SIM_NODE, pods_file=node.pods_file,
                            node_file=node.node_file, node_slo_file=node.nodeslo_file, evict_mode="none",
                            audit_log=cfg.audit_log, metrics_addr="", feature_gates=node.gates,
                            collect_interval=cfg.collect_interval, collect_mode=cfg.collect_mode,
                            react_mode=cfg.react_mode)
    agent = Agent(agent_cfg, clock=clock.wall, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=cfg.seed)
    evictions: list[Eviction] = []
    removed: set[str] = set()

    def on_decision(d: EvictDecision, strategy: str) -> None:
        if d.action == "evicted" and model.evict(d.pod.uid, clock.elapsed):
            evictions.append(Eviction(clock.elapsed, d.pod.key, d.pod.uid, d.pod.priority_value, d.feature,
                                      model.pod_memory(d.pod.uid, clock.elapsed), d.reason))

    agent.coordinator.on_decision.append(on_decision)
    be_writes: list[FileWrite] = []
    be_files = _be_limit_files(agent)

    def on_audit(rec: dict[str, Any]) -> None:
        if rec["action"] == "write" and rec["executed"] and rec["target"] in be_files:
            be_writes.append(FileWrite(clock.elapsed, rec["strategy"], rec["target"], rec["value"],
                                       rec["old"]))

    agent.audit.add_sink(on_audit)
    # the fast path and the memory trigger run here between the jobs, on the simulated clock (run() would
    # start their threads); memory protection's reactions are timed as /metrics times them
    fast, trigger, watch = agent.fastpath, agent.memtrigger, agent.psi
    psi_events: list[tuple[float, str, int]] = []  # (when, pressure file, stall µs in the window)
    cpu_events: list[tuple[float, str, int]] = []  # the same, of the fast path's cpu.pressure triggers
    rules = node.host.kernel.psi if node.host.kernel is not None else None
    if rules is not None:
        rules.on_event.append(lambda path, line, growth: (psi_events if _memory_file(path) else cpu_events).append(
            (clock.elapsed, display_path(node.host, path), growth)))
    if watch is not None:
        watch.sync()  # its thread's first act in run()

    def poll_psi() -> None:
        """The watch's thread, at once: an event wakes the memory levels (due now: the loop runs them next),
        a poke (the pod set changed) registers again."""
        if watch is not None and watch.wait(0.0):
            agent.scheduler.take_wakes()

    reactions: list[float] = []
    if fast is not None:
        fast.observe = reactions.append
    memory_reactions: list[tuple[int, float, float]] = []
    if {"memoryHigh", "memoryEvict"} & set(agent.strategy_names):
        MemoryReactions.for_agent(agent, lambda level, s: memory_reactions.append((level, clock.elapsed, s))
                                  ).count_decided = True  # the model honours every decision (evict mode none)
    sub = fast.interval if fast is not None else trigger.interval if trigger is not None else math.inf
    next_fast = sub
    build_seconds = time.monotonic() - t_build
    jobs: dict[str, JobStats] = {j.name: JobStats() for j in agent.scheduler.jobs}
    jobs.update({name: JobStats() for name, part in (("fastpath", fast), ("memtrigger", trigger), ("psi", watch))
                 if part})
    records: list[StepRecord] = []
    tick_cpu: list[float] = []
    peak_rss = baseline_rss

    def cpu() -> float:
        """The process's CPU time less the fake kernel's emulation (a node's kernel does that in C)."""
        return time.process_time() - emulation_seconds()

    emulated = 0.0  # the fake kernel's emulation within the agent's jobs (the model's writes go through it too)
    t_run = time.monotonic()
    next_step = 0.0
    try:
        while True:
            job = min(agent.scheduler.jobs, key=lambda j: j.next_at)
            model_first = next_step <= job.next_at and next_step <= next_fast
            t = min(next_step, next_fast, job.next_at)
            if t > cfg.duration + 1e-9:
                break
            clock.elapsed = t
            if cfg.real_time:
                _sleep_until(t_run + t)
            if model_first:
                gone = model.due_removals(t)
                if gone:
                    removed.update(gone)
                    left = (o for u, o in node.objects.items() if u not in removed)
                    _atomic_json(node.pods_file, pod_list(left))
                rec = model.step(t)
                poll_psi()
                rec.memory_level = agent.shared.memory_protection.level
                rec.psi_events = len(psi_events)
                records.append(rec)
                next_step = round(next_step + cfg.step, 9)
                if progress is not None:
                    progress.update(t, _status(rec, evictions, cfg))
                continue
            if next_fast <= job.next_at:
                model.substep(t)  # the counters the fast path and the memory trigger sample, as of now
                c0, e0 = cpu(), emulation_seconds()
                if watch is not None:
                    poll_psi()
                    jobs["psi"].add(cpu() - c0)
                if fast is not None:
                    fast.step()
                    jobs["fastpath"].add(cpu() - c0)
                c1 = cpu()
                if trigger is not None:
                    if trigger.check():
                        agent.scheduler.take_wakes()  # the woken jobs are due now: the loop runs them next
                    jobs["memtrigger"].add(cpu() - c1)
                if tick_cpu:
                    tick_cpu[-1] += cpu() - c0
                emulated += emulation_seconds() - e0
                next_fast = round(next_fast + sub, 9)
                continue
            c0, e0 = cpu(), emulation_seconds()
            agent.scheduler.run_job(job)
            spent = cpu() - c0
            emulated += emulation_seconds() - e0
            jobs.setdefault(job.name, JobStats()).add(spent)
            if job.name == "collect":
                tick_cpu.append(0.0)
                peak_rss = max(peak_rss, proc.memory_info().rss)
            if tick_cpu:
                tick_cpu[-1] += spent
            if job.name == "collect":
                poll_psi()  # the collector poked the watch: the pods' triggers registered
    finally:
        if progress is not None:
            progress.done()
        strategy_errors = {n: s.last_error for n, s in agent.manager.stats.items() if s.errors}
        for name, s in agent.manager.stats.items():
            if name in jobs:
                jobs[name].errors = s.errors
        psi_triggers = _psi_triggers(node.host, rules)
        cpu_triggers = _psi_triggers(node.host, rules, memory=False)
        psi_wakes = watch.memory_wakes if watch is not None else 0
        cpu_samples = (fast.pressures, fast.pressure_writes) if fast is not None else (0, 0)
        if watch is not None:
            watch.stop()
        agent.close()
    n_be = sum(1 for p in node.pods if p.qos is KubeQoS.BESTEFFORT)
    return SimResult(config=cfg, pods=len(node.pods), ls_pods=len(node.pods) - n_be, be_pods=n_be,
                     strategies=list(agent.strategy_names), records=records, evictions=evictions, jobs=jobs,
                     tick_cpu=tick_cpu, be_writes=be_writes,
                     peak_rss=peak_rss, baseline_rss=baseline_rss, priorities=dict(node.priorities),
                     be_uids=frozenset(p.uid for p in node.pods if p.qos is KubeQoS.BESTEFFORT),
                     build_seconds=build_seconds,
                     run_seconds=time.monotonic() - t_run, strategy_errors=strategy_errors, reactions=reactions,
                     memory_reactions=memory_reactions, psi_events=psi_events,
                     psi_triggers=psi_triggers, ls_stall_peak=model.pressure.ls_peak,
                     ls_stall_first=model.pressure.ls_first, psi_wakes=psi_wakes, psi_cpu_events=cpu_events,
                     psi_cpu_triggers=cpu_triggers, psi_cpu_samples=cpu_samples[0], psi_cpu_writes=cpu_samples[1],
                     kernel_emulation_seconds=emulated)


def display_path(host: FakeHost, path: str) -> str:
    """A file of the fake host as it is on a node: ``/proc/pressure/memory``, ``kubepods/.../memory.pressure``
    (relative to the cgroup root, as the audit names cgroup files)."""
    for root, prefix in ((host.roots.cgroup, ""), (host.roots.proc, "/proc/")):
        root = os.path.normpath(root)
        if path.startswith(root + "/"):
            return prefix + path[len(root) + 1:]
    return path


def _memory_file(path: str) -> bool:
    """A memory pressure file (the PSI report's; the fast path's CPU triggers are not in it)."""
    return os.path.basename(path) in ("memory.pressure", "memory")


def _psi_triggers(host: FakeHost, rules: Any, memory: bool = True) -> list[tuple[str, str]]:
    """(pressure file, line) of every memory trigger (``memory=False``: CPU trigger) the agent holds at the end."""
    if rules is None:
        return []
    return [(display_path(host, path), " ".join(map(str, line))) for path in sorted(rules.watched())
            if _memory_file(path) == memory for line in rules.triggers(path)]


def _be_limit_files(agent: Agent) -> set[str]:
    """Display paths (as the audit names them) of the BE QoS dir's quota and cpuset files."""
    names = set()
    be = agent.layout.qos_dir(KubeQoS.BESTEFFORT)
    for resource in ("cpu.cfs_quota_us", "cpuset.cpus"):
        loc = agent.executor.resolve(resource, be)
        if loc is not None:
            names.add(loc[1])
    return names


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------
def config_from_args(args: argparse.Namespace) -> SimConfig:
    return SimConfig(containers=args.containers, duration=args.duration, cgroup_version=args.cgroup_version,
                     seed=args.seed, cpus=args.cpus, memory_gib=args.memory_gib,
                     suppress_policy=args.suppress_policy, step=args.step, collect_mode=args.collect_mode,
                     feature_gates=dict(args.feature_gates), audit_log=args.audit_log, workdir=args.workdir,
                     keep=args.keep, real_time=args.real_time, react_mode=args.react_mode,
                     shape=LoadShape(ls_growth=args.ls_memory_growth))


def check_output_file(flag: str, path: str, *, make_dirs: bool = False) -> None:
    """``path`` can be written: not a directory, in a directory that exists (or, ``make_dirs``,
    can be created) and is writable.  ValueError naming ``flag`` otherwise."""
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise ValueError(f"{flag} {path}: is a directory")
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise ValueError(f"{flag} {path}: not writable")
    parent = os.path.dirname(full)
    if make_dirs:  # the nearest existing ancestor decides
        while not os.path.exists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
    if not os.path.exists(parent):
        raise ValueError(f"{flag} {path}: directory {parent} does not exist")
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: directory {parent} is not writable")


def check_output_paths(args: argparse.Namespace) -> None:
    """Every path ``simulate`` writes, checked before it builds or runs anything."""
    workdir = getattr(args, "workdir", None)
    if workdir:
        if not os.path.isdir(workdir):
            raise ValueError(f"--workdir {workdir}: "
                             + ("not a directory" if os.path.exists(workdir) else "does not exist"))
        if not os.access(workdir, os.W_OK | os.X_OK):
            raise ValueError(f"--workdir {workdir}: not writable")
    for flag, attr in (("--json", "json"), ("--plot", "plot")):
        path = getattr(args, attr, None)
        if path:
            check_output_file(flag, path)
    audit = getattr(args, "audit_log", None)
    if audit:
        check_output_file("--audit-log", audit, make_dirs=True)  # the audit log creates its directory


def simulate_from_args(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from qosmanager.sim import plot

    out = out or sys.stdout
    err = err or sys.stderr
    cfg = config_from_args(args)
    try:
        cfg.validate()
        check_output_paths(args)
        if args.plot:
            plot.check_available()
    except (ValueError, plot.PlotUnavailable) as e:
        err.write(f"qosmanager simulate: {e}\n")
        return 2
    try:
        res = run_simulation(cfg, Progress(err, cfg.duration))
    except ValueError as e:  # a bad feature gate and the like, found while building the agent
        err.write(f"qosmanager simulate: {e}\n")
        return 2
    out.write(summarize(res, unicode=_can_encode(out, _BLOCKS + "·")))
    out.flush()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result_json(res), f, indent=1)
    if args.plot:
        plot.draw(res, args.plot)
        out.write(f"plot written to {args.plot}\n")
    return 1 if res.strategy_errors else 0


def _can_encode(stream: TextIO, text: str) -> bool:
    enc = getattr(stream, "encoding", None) or "ascii"
    with contextlib.suppress(LookupError):
        try:
            text.encode(enc)
            return True
        except UnicodeEncodeError:
            return False
    return False


__all__ = [
    "Eviction",
    "JobStats",
    "Progress",
    "SimClock",
    "SimConfig",
    "SimNode",
    "SimResult",
    "build_node",
    "result_json",
    "run_simulation",
    "simulate_from_args",
    "sparkline",
    "summarize",
]
