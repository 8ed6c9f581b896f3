"""The closed-loop load model of ``qosmanager simulate``.

Every model step the model advances simulated time by ``dt`` and writes, in kernel format, what a
busy colocated node would show: the cumulative CPU time (v1 ``cpuacct.usage``, v2 ``cpu.stat``
``usage_usec``), CFS throttling counters (``cpu.stat``) and memory (``memory.stat`` and the usage
file) of every container, pod and kube QoS dir, plus ``/proc/stat`` and ``/proc/meminfo``.  The
agent's collector reads exactly these files, so it measures what the model decided.

*Closed loop*: before deciding BE usage the model reads back the limits the agent wrote on the BE
QoS dir (CFS quota and cpuset), so the agent's writes change what BE gets::

    LS used  = min(LS demand, capacity - system)                         (LS always wins the CPU)
    BE used  = max(0, min(BE demand, BE limit, capacity - system - LS used))
    BE limit = min(quota / period, number of CPUs in the BE cpuset)       (unlimited quota: no cap)

LS demand follows a day compressed into the run (``trough + (peak - trough) * (1 - cos 2πx) / 2``
for ``x`` = the fraction of the run elapsed), times a little noise, plus one spike.  BE demand is a
constant share of the node.  Memory: LS and most BE pods hold a steady working set (``be_growth``
lets every BE pod grow slowly, ``ls_growth`` every LS pod); a few BE pods (the lowest-priority ones:
leaking batch jobs) grow linearly, which drives node memory over the NodeSLO's eviction threshold.  On cgroup v2
the model also honours the BE QoS dir's ``memory.high`` as the kernel would (asking the fake kernel what is in
force): BE's page cache is reclaimed down to the cap first, then BE's anonymous growth stalls at it (throttled,
not killed), and each step that held BE counts one ``high`` event in ``memory.events``; page cache that
``memory.reclaim`` or a lowered ``memory.high`` took is gone and comes back slowly (``be_cache_refill``).  The
node's memory stalls and waits for a CPU follow (:mod:`~qosmanager.sim.fakestall`: the pressure files and the
fake kernel's PSI triggers): every class stalls on memory when ``MemAvailable`` falls below the page cache in
use, BE alone when its memory.high denies it growth or cuts its page cache; runnable tasks wait for a CPU while
LS's demand, what BE's limit lets it run and the system's share exceed the CPUs.  Memory moves continuously, as
CPU time does: each sub-step (:meth:`LoadModel.substep`, the fast path's and the memory trigger's 50 ms)
advances it too and writes what the trigger and memoryHigh read -- ``/proc/meminfo`` and the BE QoS dir's memory
files -- so the node crosses a line between two steps and the trigger sees it at its next sample (pods' own
files follow at the next step).  An evicted pod stops using CPU and memory at once and its cgroups disappear
``termination_seconds`` later (the caller takes it out of the pods file then); like the kernel, the parents keep
the CPU time it consumed.

Per-container values are numpy vectors, pod and QoS-dir values are ``bincount`` sums of them; file
bodies are formatted from precomputed templates and written in one native batch per step (open,
``pwrite`` + truncate, close), so a step costs tens of milliseconds for 2,000 containers.
``cpuacct.stat`` is left as built (the agent does not read it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qosmanager._native import sysio
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.sim.fakehost import (
    CFS_PERIOD_US,
    USER_HZ,
    V1_MEMORY_STAT_KEYS,
    V1_MEMORY_UNLIMITED,
    V2_MEMORY_STAT_KEYS,
    FakeHost,
    FakePod,
)
from qosmanager.sim.fakestall import NodePressure, cpu_stall, memory_stall

PERIODS_PER_SECOND = 1_000_000 // CFS_PERIOD_US  # CFS periods of 100 ms
_QOS_INDEX = {KubeQoS.GUARANTEED: 0, KubeQoS.BURSTABLE: 1, KubeQoS.BESTEFFORT: 2}
_BE = 2


@dataclass(frozen=True)
class LoadShape:
    """The load, as fractions of the node's CPUs and memory (see the module docstring)."""

    ls_trough: float = 0.28  # LS CPU demand at the start and end of the run
    ls_peak: float = 0.52  # ... in the middle of the run
    noise: float = 0.03  # relative standard deviation of the LS demand per step
    spike_start: float = 0.62  # the spike begins at this fraction of the run ...
    spike_length: float = 0.10  # ... and lasts this fraction of it
    spike_height: float = 0.18  # added LS demand during the spike
    be_demand: float = 0.85  # BE wants this much CPU in total (all BE pods alive)
    system_cpu: float = 0.03  # CPU used outside pods
    system_memory: float = 0.08
    ls_memory: float = 0.32  # working sets of all LS pods together
    be_memory: float = 0.22  # ... and of all BE pods at the start
    page_cache: float = 0.2  # page cache per pod, relative to its working set
    leakers: float = 0.02  # share of BE pods that leak memory (at least 2)
    leak_total: float = 0.18  # memory the leakers add over the whole run if never evicted
    be_growth: float = 0.0  # every BE pod's working set grows by this fraction of itself over the run
    ls_growth: float = 0.0  # ... and every LS pod's
    termination_seconds: float = 2.0  # eviction to cgroups gone
    be_cache_refill: float = 0.002  # reclaimed BE page cache comes back at this share of the node per second


@dataclass(frozen=True, slots=True)
class _CPUStep:
    """How the CPU was shared over one (sub-)step (cores)."""

    alive_ctr: np.ndarray
    system: float
    ls_demand: float
    ls_used: float
    be_demand: float
    be_used: float
    quota: int
    be_cpus: int
    be_limit: float


@dataclass
class StepRecord:
    """What the node did during one model step (cores unless noted)."""

    t: float  # simulated seconds since the start
    ls_demand: float
    ls_used: float
    be_demand: float
    be_used: float
    be_limit: float  # cores BE may use: min(quota, cpuset); inf when unlimited
    be_quota_us: int  # the BE QoS dir's CFS quota (-1: unlimited)
    be_cpus: int  # CPUs in the BE QoS dir's cpuset
    system: float
    memory_used: int  # bytes (total - available)
    memory_total: int
    pods_alive: int
    be_pods_alive: int
    evicted_total: int
    be_memory: int = 0  # bytes the BE QoS dir holds (its page counter: anon + page cache)
    be_memory_high: int = -1  # the memory.high in force on the BE QoS dir (-1: max, or v1)
    be_high_events: int = 0  # steps and sub-steps so far in which the kernel held BE at memory.high
    memory_level: int = 0  # the memory protection level memoryHigh had in force (set by simulate)
    ls_stall_ms: float = 0.0  # LS's memory stall so far (its classes' memory.pressure "some", ms)
    be_stall_ms: float = 0.0  # BE's (at memory.high, or the node short of memory)
    ls_cpu_stall_ms: float = 0.0  # LS's waits for a CPU so far (its classes' cpu.pressure "some", ms)
    psi_events: int = 0  # PSI trigger events the fake kernel sent the agent so far (set by simulate)
    be_soft_limit: int = -1  # v1: memory.soft_limit_in_bytes of the BE QoS dir (-1: unlimited, or v2)


class LoadModel:
    """Drives a :class:`FakeHost` (see the module docstring)."""

    def __init__(self, host: FakeHost, pods: Sequence[FakePod], priorities: Mapping[str, int], *,
                 duration: float, shape: LoadShape | None = None, seed: int = 0) -> None:
        if duration <= 0:
            raise ValueError("duration must be positive")
        self.host = host
        self.shape = shape or LoadShape()
        self.duration = duration
        self.capacity = float(host.n_cpus)
        self.memory_total = int(host.memory_bytes)
        self.rng = np.random.default_rng(seed)
        self.pods = list(pods)
        self.uid_index = {p.uid: i for i, p in enumerate(self.pods)}
        n_pods = len(self.pods)
        self.pod_qos = np.array([_QOS_INDEX[KubeQoS(p.qos)] for p in self.pods], dtype=np.int64)
        self.pod_be = self.pod_qos == _BE
        self.pod_alive = np.ones(n_pods, dtype=bool)  # using resources (not evicted)
        self.pod_present = np.ones(n_pods, dtype=bool)  # cgroups exist (not yet removed)
        self.removal_at = np.full(n_pods, np.inf)
        self.ctr_pod = np.array([i for i, p in enumerate(self.pods) for _ in p.containers], dtype=np.int64)
        n_ctr = len(self.ctr_pod)
        self.ctr_be = self.pod_be[self.ctr_pod] if n_ctr else np.zeros(0, dtype=bool)
        # how demand and memory spread over containers: fixed skewed weights
        self.cpu_weight = self.rng.lognormal(0.0, 0.6, n_ctr)
        mem_weight = self.rng.lognormal(0.0, 0.5, n_ctr)
        self.mem_base = np.zeros(n_ctr)
        for be, share in ((False, self.shape.ls_memory), (True, self.shape.be_memory)):
            sel = self.ctr_be == be
            if sel.any():
                self.mem_base[sel] = share * self.memory_total * mem_weight[sel] / mem_weight[sel].sum()
        self.leak_rate = self._leak_rates(priorities)
        self.leak_rate[self.ctr_be] += self.shape.be_growth * self.mem_base[self.ctr_be] / duration
        self.leak_rate[~self.ctr_be] += self.shape.ls_growth * self.mem_base[~self.ctr_be] / duration
        # cumulative counters per container
        self.cpu_ns = np.zeros(n_ctr)
        self.periods = np.zeros(n_ctr)
        self.throttled = np.zeros(n_ctr)
        self.throttled_ns = np.zeros(n_ctr)
        self.node_busy_ticks = 0.0
        self.node_idle_ticks = 0.0
        self.t = 0.0
        self.t_mem = 0.0  # the time memory was last advanced to (steps and sub-steps)
        self.noise = 1.0
        self.evicted_total = 0
        self.writer = _CgroupWriter(host)
        # the kernel's memory.high on the BE QoS dir (v2 fake kernels): what BE actually holds
        self.kernel = host.kernel if host.version == 2 else None
        self.be_dir = (host.layout.abs_dir("", host.layout.qos_dir(KubeQoS.BESTEFFORT)) if host.version == 2
                       else "")
        self.anon_held: np.ndarray | None = None  # per container, the step before
        self.be_cache_cut = 0.0  # BE page cache reclaimed and not yet refilled (bytes)
        self.be_high_events = 0
        self.be_denied = 0.0  # the share of BE's wanted growth (page cache) its memory.high denied ...
        self.be_cache_kept = 1.0  # ... left it, at the last (sub-)step
        guaranteed = [host.pod_dir(p.uid) for p in self.pods if p.qos is KubeQoS.GUARANTEED]
        rules = host.kernel.psi if host.kernel is not None else None
        self.pressure = NodePressure(host.layout, rules, guaranteed if host.version == 2 else ())
        self.cpu_pressure = NodePressure(host.layout, rules, guaranteed if host.version == 2 else (),
                                         resource="cpu")
        self._soft_limit = (host.layout.file("memory", host.layout.qos_dir(KubeQoS.BESTEFFORT),
                                             "memory.soft_limit_in_bytes") if host.version == 1 else "")
        self._rebuild_targets()

    def _leak_rates(self, priorities: Mapping[str, int]) -> np.ndarray:
        """Bytes per second per container: the lowest-priority BE pods leak (ties: pod order).
        (``be_growth`` adds a slower growth of every BE pod on top.)"""
        rate = np.zeros(len(self.ctr_pod))
        be = [i for i in range(len(self.pods)) if self.pod_be[i]]
        if not be:
            return rate
        n_leak = min(len(be), max(2, int(len(be) * self.shape.leakers)))
        leakers = sorted(be, key=lambda i: priorities.get(self.pods[i].uid, 0))[:n_leak]
        per_pod = self.shape.leak_total * self.memory_total / self.duration / n_leak
        for i in leakers:
            sel = self.ctr_pod == i
            rate[sel] = per_pod / max(1, int(sel.sum()))
        return rate

    # ------------------------------------------------------------------ the loop
    def ls_fraction(self, t: float) -> float:
        """LS CPU demand at ``t`` as a fraction of capacity, before noise."""
        s = self.shape
        x = min(max(t / self.duration, 0.0), 1.0)
        daily = s.ls_trough + (s.ls_peak - s.ls_trough) * (1.0 - math.cos(2.0 * math.pi * x)) / 2.0
        spike = s.spike_height if s.spike_start <= x < s.spike_start + s.spike_length else 0.0
        return daily + spike

    def step(self, t: float) -> StepRecord:
        """Advance to ``t`` (simulated seconds since the start) and write every file."""
        dt = max(0.0, t - self.t)
        self.t = t
        s = self.shape
        self.noise = max(0.0, 1.0 + self.rng.normal(0.0, s.noise))  # the sub-steps until the next step keep it
        # per container: usage spread by (jittered) weights
        jitter = self.rng.lognormal(0.0, 0.1, len(self.cpu_weight))
        cpu = self._advance_cpu(t, dt, self.cpu_weight * jitter)
        anon, cache, mem_used, be_high = self._advance_memory(t, cpu.alive_ctr)
        self._write(anon, cache, mem_used)
        be_memory = int(anon[self.ctr_be].sum() + cache[self.ctr_be].sum()) if len(anon) else 0
        soft = _int(_read(self._soft_limit), -1) if self._soft_limit else -1
        return StepRecord(t=t, ls_demand=cpu.ls_demand, ls_used=cpu.ls_used, be_demand=cpu.be_demand,
                          be_used=cpu.be_used, be_limit=cpu.be_limit, be_quota_us=cpu.quota, be_cpus=cpu.be_cpus,
                          system=cpu.system, memory_used=mem_used, memory_total=self.memory_total,
                          pods_alive=int(self.pod_alive.sum()),
                          be_pods_alive=int((self.pod_alive & self.pod_be).sum()),
                          evicted_total=self.evicted_total, be_memory=be_memory, be_memory_high=be_high,
                          be_high_events=self.be_high_events, ls_stall_ms=self.pressure.ls_stall_us / 1000.0,
                          be_stall_ms=self.pressure.be_stall_us / 1000.0,
                          ls_cpu_stall_ms=self.cpu_pressure.ls_stall_us / 1000.0,
                          be_soft_limit=soft if 0 <= soft < V1_MEMORY_UNLIMITED else -1)

    def _advance_memory(self, t: float, alive_ctr: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
        """Memory at ``t``: steady working sets, the growers grown, evicted pods holding nothing, BE under its
        memory.high since the last (sub-)step.  Returns (anon, page cache) per container, the node's used
        bytes (MemTotal - MemAvailable) and the memory.high in force on BE (-1: none)."""
        mem_dt, self.t_mem = max(0.0, t - self.t_mem), t
        anon = np.where(alive_ctr, self.mem_base + self.leak_rate * t, 0.0)
        cache = anon * self.shape.page_cache
        be_high = self._hold_be(anon, cache, mem_dt)
        self.anon_held = anon
        mem_used = min(int(self.shape.system_memory * self.memory_total + anon.sum()), self.memory_total)
        if len(anon):
            self.pressure.advance(t, memory_stall(
                self.memory_total - mem_used, float(cache.sum()), ls_alive=bool((alive_ctr & ~self.ctr_be).any()),
                be_alive=bool((alive_ctr & self.ctr_be).any()), be_denied=self.be_denied,
                be_cache_kept=self.be_cache_kept))
        return anon, cache, mem_used, be_high

    def _advance_cpu(self, t: float, dt: float, w: np.ndarray) -> _CPUStep:
        """CPU time over the ``dt`` seconds up to ``t``: LS takes its demand, BE what its limit in force and
        the rest of the node leave it, spread over the containers by the weights ``w``; CFS periods and, where
        the limit held BE back, throttling counted."""
        s = self.shape
        cap = self.capacity
        system = s.system_cpu * cap
        alive_ctr = self.pod_alive[self.ctr_pod] if len(self.ctr_pod) else np.zeros(0, dtype=bool)
        ls_sel = alive_ctr & ~self.ctr_be
        be_sel = alive_ctr & self.ctr_be
        ls_share = ls_sel.sum() / max(1, int((~self.ctr_be).sum()))
        ls_demand = self.ls_fraction(t) * self.noise * cap * ls_share
        ls_used = min(ls_demand, cap - system)
        quota, period, be_cpus = self.writer.read_be_limit()
        be_limit = min(float(be_cpus), quota / period if quota > 0 and period > 0 else math.inf)
        be_share = be_sel.sum() / max(1, int(self.ctr_be.sum()))
        be_demand = s.be_demand * cap * be_share
        be_used = max(0.0, min(be_demand, be_limit, cap - system - ls_used))
        usage = np.zeros(len(w))
        for sel, total in ((ls_sel, ls_used), (be_sel, be_used)):
            ws = w[sel].sum()
            if ws > 0:
                usage[sel] = total * w[sel] / ws
        self.cpu_ns += usage * dt * 1e9
        periods = dt * PERIODS_PER_SECOND
        self.periods[alive_ctr] += periods
        if be_demand > 0 and be_used < be_demand and be_limit < cap:  # BE held back by its limit
            ratio = 1.0 - be_used / be_demand
            self.throttled[be_sel] += periods * ratio
            self.throttled_ns[be_sel] += periods * ratio * CFS_PERIOD_US * 1000 / 2
        self.cpu_pressure.advance(t, cpu_stall(cap, system, ls_demand, min(be_demand, be_limit), be_used,
                                               ls_alive=bool(ls_sel.any()), be_alive=bool(be_sel.any())))
        busy = ls_used + be_used + system
        self.node_busy_ticks += busy * dt * USER_HZ
        self.node_idle_ticks += max(0.0, cap - busy) * dt * USER_HZ
        return _CPUStep(alive_ctr, system, ls_demand, ls_used, be_demand, be_used, quota, be_cpus, be_limit)

    def substep(self, t: float) -> None:
        """Between two steps, at the fast path's cadence: CPU time advanced to ``t`` at the LS demand of
        ``t`` (with the last step's noise) and the BE limit in force now, as :meth:`step` splits it, and
        written where the fast path samples it -- the kube QoS dirs' usage and ``/proc/stat`` -- as a
        kernel's counters move continuously.  Memory advances too (BE held under its memory.high), written
        where the memory trigger and memoryHigh read it: ``/proc/meminfo`` and the BE QoS dir's memory files.
        Per-container and pod files and throttling are the next step's to write (it integrates from here on)."""
        dt = t - self.t
        if dt <= 0:
            return
        self.t = t
        cpu = self._advance_cpu(t, dt, self.cpu_weight)
        anon, cache, mem_used, _ = self._advance_memory(t, cpu.alive_ctr)
        self._write_meminfo(mem_used)
        if len(anon):
            be_anon, be_cache = int(anon[self.ctr_be].sum()), int(cache[self.ctr_be].sum())
            self.host.set_memory(self.host.layout.qos_dir(KubeQoS.BESTEFFORT), be_anon // 3, be_anon - be_anon // 3,
                                 0, be_cache // 2, be_cache - be_cache // 2)
        layout = self.host.layout
        # kubepods holds every pod (removed ones keep their CPU time in the parents, as in step)
        for qos, sel in ((KubeQoS.GUARANTEED, slice(None)), (KubeQoS.BURSTABLE, self.pod_qos[self.ctr_pod] == 1),
                         (KubeQoS.BESTEFFORT, self.ctr_be)):
            self.host.set_cpu_usage(layout.qos_dir(qos), int(self.cpu_ns[sel].sum()))
        n = self.host.n_cpus
        self.host.set_proc_stat(_spread(int(self.node_busy_ticks), n), _spread(int(self.node_idle_ticks), n))

    def _hold_be(self, anon: np.ndarray, cache: np.ndarray, dt: float) -> int:
        """The kernel's memory.high on the BE QoS dir, applied in place to BE's containers: page cache
        reclaimed first, then anonymous growth stalled (what BE held the step before stays).  Returns the
        cap in force (-1: none)."""
        self.be_denied, self.be_cache_kept = 0.0, 1.0
        if self.kernel is None or not len(anon):
            return -1
        be = self.ctr_be
        self.be_cache_cut += self.kernel.take_reclaimed(self.be_dir)
        self.be_cache_cut = max(0.0, self.be_cache_cut - self.shape.be_cache_refill * self.memory_total * dt)
        want_cache = float(cache[be].sum())
        if want_cache > 0 and self.be_cache_cut > 0:
            cache[be] *= max(0.0, want_cache - self.be_cache_cut) / want_cache
        high = self.kernel.memory_high(self.be_dir)
        if high is None:
            return -1
        held = False
        prev = anon[be] if self.anon_held is None else np.minimum(self.anon_held[be], anon[be])
        growth = anon[be] - prev
        room = max(0.0, high - float(prev.sum()))
        if growth.sum() > room:
            self.be_denied = 1.0 - room / float(growth.sum())
            anon[be] = prev + growth * (room / float(growth.sum()))
            held = True
        room_cache = max(0.0, high - float(anon[be].sum()))
        have_cache = float(cache[be].sum())
        if have_cache > room_cache:
            self.be_cache_kept = room_cache / have_cache
            cache[be] *= room_cache / have_cache
            held = True
        if held:
            self.be_high_events += 1
            self.kernel.memory_event(self.be_dir, "high")
        return high

    # ------------------------------------------------------------------ evictions
    def evict(self, uid: str, t: float) -> bool:
        """The pod stops now; its cgroups go ``termination_seconds`` later.  False if unknown or gone."""
        i = self.uid_index.get(uid)
        if i is None or not self.pod_alive[i]:
            return False
        self.pod_alive[i] = False
        self.removal_at[i] = t + self.shape.termination_seconds
        self.evicted_total += 1
        return True

    def pod_memory(self, uid: str, t: float) -> int:
        """Working set of a pod at ``t`` had it kept running (what evicting it released)."""
        i = self.uid_index.get(uid)
        if i is None:
            return 0
        sel = self.ctr_pod == i
        return int((self.mem_base[sel] + self.leak_rate[sel] * t).sum())

    def due_removals(self, t: float) -> list[str]:
        """Pods whose termination finished by ``t``: their cgroups are removed now; the caller drops them
        from the pods file."""
        due = np.flatnonzero(self.pod_present & (self.removal_at <= t))
        if not due.size:
            return []
        uids = [self.pods[i].uid for i in due.tolist()]
        for i, uid in zip(due.tolist(), uids):
            self.pod_present[i] = False
            self.host.remove_pod(uid)
        self._rebuild_targets()
        return uids

    # ------------------------------------------------------------------ files
    def _rebuild_targets(self) -> None:
        present = [i for i in range(len(self.pods)) if self.pod_present[i]]
        self._present_pods = np.array(present, dtype=np.int64)
        # containers are numbered pod by pod, so this is also the order of the present pods' containers
        self._present_ctrs = np.flatnonzero(self.pod_present[self.ctr_pod]).astype(np.int64)
        layout = self.host.layout
        qos = (KubeQoS.GUARANTEED, KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT)
        dirs = [layout.qos_dir(q) for q in qos]
        pod_dirs = [self.host.pod_dir(self.pods[i].uid) for i in present]
        dirs += pod_dirs
        for i, pod_dir in zip(present, pod_dirs):
            dirs += [layout.container_dir(pod_dir, c.container_id) for c in self.pods[i].containers]
        self.writer.set_dirs(dirs)

    def _write(self, anon: np.ndarray, cache: np.ndarray, mem_used: int) -> None:
        n_pods = len(self.pods)
        ctr_pod = self.ctr_pod

        def per_pod(v: np.ndarray) -> np.ndarray:
            return np.bincount(ctr_pod, weights=v, minlength=n_pods) if len(ctr_pod) else np.zeros(n_pods)

        ctr_vals = (self.cpu_ns, self.periods, self.throttled, self.throttled_ns, anon, cache)
        pod_vals = [per_pod(v) for v in ctr_vals]
        # kube QoS dirs: kubepods holds every pod; burstable and besteffort their own (removed pods keep
        # their CPU time in the parents, as the kernel does)
        qos_rows = []
        for sel in (np.ones(n_pods, dtype=bool), self.pod_qos == 1, self.pod_be):
            qos_rows.append([float(v[sel].sum()) for v in pod_vals])
        # a QoS dir's periods: a parent counts its own periods, not the sum of its children's
        for row in qos_rows:
            row[1] = self.t * PERIODS_PER_SECOND
            row[2] = min(row[2], row[1])
        cols = [np.concatenate([np.array([r[j] for r in qos_rows]), pod_vals[j][self._present_pods],
                                ctr_vals[j][self._present_ctrs]]) for j in range(len(ctr_vals))]
        self.writer.write(*cols)
        self._write_meminfo(mem_used)
        n = self.host.n_cpus
        self.host.set_proc_stat(_spread(int(self.node_busy_ticks), n), _spread(int(self.node_idle_ticks), n))


    def _write_meminfo(self, mem_used: int) -> None:
        total_kb = self.memory_total // 1024
        avail_kb = max(0, total_kb - mem_used // 1024)
        cache_kb = int(avail_kb * 0.05)
        self.host.set_meminfo(total_kb, max(0, avail_kb - cache_kb), avail_kb)


class _CgroupWriter:
    """Formats and writes the stat files of a list of cgroup dirs in one native batch per step."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.layout = host.layout
        self.version = host.version
        self.dirs: list[str] = []
        self.paths: list[str] = []
        self._mem_tmpl = _memory_stat_template(self.version)
        be = self.layout.qos_dir(KubeQoS.BESTEFFORT)
        if self.version == 1:
            self._limit_files = (self.layout.file("cpu", be, "cpu.cfs_quota_us"),
                                 self.layout.file("cpu", be, "cpu.cfs_period_us"),
                                 self.layout.file("cpuset", be, "cpuset.cpus"))
        else:
            self._limit_files = (self.layout.file("", be, "cpu.max"), "",
                                 self.layout.file("", be, "cpuset.cpus"))

    def set_dirs(self, dirs: Sequence[str]) -> None:
        self.dirs = list(dirs)
        f = self.layout.file
        names: tuple[tuple[str, str], ...]
        if self.version == 1:
            names = (("cpuacct", "cpuacct.usage"), ("cpu", "cpu.stat"), ("memory", "memory.stat"),
                     ("memory", "memory.usage_in_bytes"))
        else:
            names = (("", "cpu.stat"), ("", "memory.stat"), ("", "memory.current"))
        self.paths = [f(sub, d, name) for d in self.dirs for sub, name in names]

    def write(self, cpu_ns: np.ndarray, periods: np.ndarray, throttled: np.ndarray, throttled_ns: np.ndarray,
              anon: np.ndarray, cache: np.ndarray) -> None:
        rows = zip(cpu_ns.astype(np.int64).tolist(), periods.astype(np.int64).tolist(),
                   throttled.astype(np.int64).tolist(), throttled_ns.astype(np.int64).tolist(),
                   anon.astype(np.int64).tolist(), cache.astype(np.int64).tolist())
        mem_tmpl = self._mem_tmpl
        bodies: list[bytes] = []
        add = bodies.append
        if self.version == 1:
            for ns, per, thr, thr_ns, an, fi in rows:
                ia, ifl = an // 3, fi // 2
                add(b"%d\n" % ns)
                add(b"nr_periods %d\nnr_throttled %d\nthrottled_time %d\nnr_bursts 0\nburst_time 0\n"
                    % (per, thr, thr_ns))
                add(mem_tmpl % (fi, an, ia, an - ia, ifl, fi - ifl, fi, an, ia, an - ia, ifl, fi - ifl))
                add(b"%d\n" % (an + fi))
        else:
            for ns, per, thr, thr_ns, an, fi in rows:
                ia, ifl = an // 3, fi // 2
                us = ns // 1000
                user = us * 7 // 10
                add(b"usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods %d\nnr_throttled %d\n"
                    b"throttled_usec %d\nnr_bursts 0\nburst_usec 0\n" % (us, user, us - user, per, thr,
                                                                        thr_ns // 1000))
                add(mem_tmpl % (an, fi, ia, an - ia, ifl, fi - ifl))
                add(b"%d\n" % (an + fi))
        fds = sysio.open_batch(self.paths, os.O_WRONLY)
        ok = fds >= 0
        try:
            if ok.any():
                idx = np.flatnonzero(ok)
                payloads = [bodies[i] for i in idx.tolist()]
                sysio.pwrite_batch(fds[idx], payloads, np.ones(len(idx), dtype=np.uint8))
        finally:
            sysio.close_batch(fds[ok])

    def read_be_limit(self) -> tuple[int, int, int]:
        """(quota µs or -1, period µs, CPUs in the cpuset) of the BE QoS dir, as the agent left them."""
        quota_file, period_file, cpuset_file = self._limit_files
        quota, period = -1, CFS_PERIOD_US
        text = _read(quota_file)
        if self.version == 1:
            quota = _int(text, -1)
            period = _int(_read(period_file), CFS_PERIOD_US)
        else:
            parts = text.split()
            if parts:
                quota = -1 if parts[0] == "max" else _int(parts[0], -1)
            if len(parts) > 1:
                period = _int(parts[1], CFS_PERIOD_US)
        cpus_text = _read(cpuset_file).strip()
        try:
            # v2: an empty cpuset.cpus means "inherit": every CPU of the node
            n_cpus = len(parse_cpu_list(cpus_text)) if cpus_text else self.host.n_cpus
        except ValueError:
            n_cpus = self.host.n_cpus
        return quota, period, n_cpus


def _spread(total: int, n: int) -> list[int]:
    """``total`` ticks over ``n`` CPUs, summing exactly to ``total`` (the node reads the sum); each
    CPU's share never decreases as ``total`` grows, as a kernel counter would not."""
    q, r = divmod(total, n)
    return [q + (1 if i < r else 0) for i in range(n)]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _int(text: str, default: int) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return default


def _memory_stat_template(version: int) -> bytes:
    """memory.stat in kernel key order with ``%d`` where the model's numbers go.

    v1 fills cache, rss, inactive_anon, active_anon, inactive_file, active_file and their ``total_``
    twins; v2 fills anon, file and the four LRU lists.  Every other key is 0 (limits: unlimited).
    """
    if version == 1:
        dynamic = ("cache", "rss", "inactive_anon", "active_anon", "inactive_file", "active_file")
        keys = V1_MEMORY_STAT_KEYS
        fixed = {"hierarchical_memory_limit": V1_MEMORY_UNLIMITED,
                 "hierarchical_memsw_limit": V1_MEMORY_UNLIMITED}
        lines = []
        for k in keys:
            base = k[6:] if k.startswith("total_") else k
            if base in dynamic:
                lines.append(f"{k} %d")
            else:
                lines.append(f"{k} {fixed.get(k, 0)}")
        # the %d slots appear in key order: local six, then the six total_ ones
        return ("\n".join(lines) + "\n").encode()
    dynamic2 = ("anon", "file", "inactive_anon", "active_anon", "inactive_file", "active_file")
    return ("\n".join(f"{k} %d" if k in dynamic2 else f"{k} 0" for k in V2_MEMORY_STAT_KEYS) + "\n").encode()
