"""The fast path: BE's CPU limit lowered within a tenth of a second of a rise in LS demand.

koordlet reacts at its tick: cpuSuppress sees a new LS load only in the next collector window (1 s),
and a window that began before the load sees a fraction of it, so BE's quota reaches the level that
leaves LS its CPU one to three seconds after the load started.  The fast path watches the few counters
that tell LS demand -- the node's busy time (``/proc/stat``) and the kube QoS dirs' usage (kubepods and
BestEffort: ``cpuacct.usage`` on v1, ``cpu.stat`` on v2) on its own thread, from descriptors it keeps
open (one ``pread`` each): every ``interval`` (50 ms) while the load it estimates moves towards the trigger
level below, every second interval (100 ms) while it stays away (a thread wake-up was most of what the fast
path cost; a sample that covers half the way to the level brings the interval back, and its successor's
window spans only the rise, so a burst a quiet sample saw in part is seen whole one interval later: see
:mod:`qosmanager._native.sampler`).  The sampling stays in C, without the GIL
(:class:`qosmanager._native.CounterSampler`): the thread returns to Python only when the non-BE load it
estimates reaches the *trigger level*, the lowest load at which the decision below could write
(:meth:`FastPath.trigger_levels`, set again after every decision and after the jobs that move its inputs):
a Python wake-up per sample cost more CPU than the rest of the agent together.  The thread runs in
``SCHED_FIFO`` where the agent may (:func:`qosmanager.host.sched.realtime`): a rise in LS demand is when
the CPUs are busiest, and an ordinary thread's samples then waited for a CPU, 40-80 ms each at load 8-11.
Refused, the thread stays an ordinary one, and ``/healthz`` says so under ``info`` (:data:`REALTIME_NOTE`),
not as a fault; the log warns when the process lacks ``CAP_SYS_NICE`` (the shipped DaemonSet grants it),
and says it at info when the kernel refused all the same (``CONFIG_RT_GROUP_SCHED``: no budget for a pod).
From the sampler's window (the last two intervals, 100 ms) it recomputes BE's budget with cpuSuppress's own formula
(:func:`~qosmanager.strategies.cpu_suppress.calculate_be_suppress_cpu`: capacity x threshold - non-BE
pods - host applications - system) and, when that is lower than the BE quota in force by more than the
hysteresis (the larger of cpuSuppress's 1 % bypass and 0.2 cores; for half a second after a write only
the bypass, since a rise that began mid-window shows in part first), writes it at once through the
executor (as cpuSuppress, audited, honouring ``--dry-run``).

It only ever **lowers** the limit.  Raising stays with the tick, in koordlet's bounded steps (10 % of the
node per tick): the strategy's tick takes the lower of its own budget and the fast path's latest one
(:attr:`FastPath.cap`), so the tick's one-second averages, which still hold the quiet time before a
burst, do not raise BE again while LS's load lasts.

Under the cpuset policy it narrows BE's cpuset the same way: when the budget (plus the hysteresis)
needs fewer whole CPUs than BE holds, the CPUs the tick would pick for it (koordlet's picks, from the
LSR and LS pools of the tick's last decision, at least two) go to the dirs the tick last wrote (the QoS
dir, pods and containers; containers only with a static kubelet CPU manager), as the tick's own
``be-cpuset`` plan: the executor narrows children before parents (v1 refuses a parent cpuset below a
child's), and the plan's next version from the tick is compared with what the fast path wrote.  The
tick takes the fast path's budget as its cap here too, and widens again by one CPU in ten per tick.

The fast path acts only where the tick's decision is exact from the QoS dirs alone: the policy in use
(cfsQuota or cpuset), a decision from data (not the fail-safe hold), and no pod whose class differs from its
kube QoS dir (those are read one by one at the tick).  The host applications' term comes from the tick's
last decision; with host applications configured the system term does too.  Otherwise it watches and
does nothing; cpuSuppress alone decides, at its pace.

On cgroup v1 a BE pod or container may hold a quota of its own (koordlet's batch-cpu hook), and the
kernel refuses a parent's quota below a child's (EINVAL).  With the BE dir's quota, the fast path lowers
every BE pod and container whose quota in the kernel is above it to the same value, in the same executor
batch (falling limits go children first), keeping cpuSuppress's record of their own quotas so that the
tick gives them back as the budget rises.  It reads only the children that can be above it: those last
seen above it and those never read (every one after v1 refused a BE quota, its own write's included,
until the tick has read them all again).  The BE tree is walked again whenever the pod set changed, so a pod the tick
has not seen yet is read before its parent goes below it.

Nothing the scheduler's thread does blocks it: a pods-file decode, a relist, a slow strategy, or an
audit log on a full disk run elsewhere; its shared steps are the executor's lock for its one write and, on
v1 when it lowers children, cpuSuppress's lock on their record (held while a tick fits them).
``--react-mode tick`` turns it off (koordlet's pace, for comparison).  ``simulate`` and ``replay`` call
:meth:`FastPath.step` themselves on their simulated clocks (``replay`` with ``counters`` integrated from a
scenario's samples instead of the files).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qosmanager._native import (
    SAMPLER_KIND_NS,
    SAMPLER_KIND_USAGE_USEC,
    SAMPLER_WOKE_STOP,
    CounterSampler,
)
from qosmanager.api.nodeslo import CPU_SUPPRESS_POLICY_CFS_QUOTA, CPU_SUPPRESS_POLICY_CPUSET
from qosmanager.api.pod import KUBE_QOS_BESTEFFORT
from qosmanager.executor.executor import Executor, Plan, Write
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list
from qosmanager.host.procfs import cap_sys_nice, clock_ticks
from qosmanager.host.resources import CFS_PERIOD_US
from qosmanager.host.sched import realtime
from qosmanager.states.store import StateStore
from qosmanager.strategies._helpers import FilteredUsage, go_div
from qosmanager.strategies.cpu_suppress import (
    BE_MIN_CPUSET_CORES,
    BE_MIN_QUOTA,
    BE_UNSET_QUOTA,
    CONTAINER_DEPTH,
    CPUSET,
    POLICY_USING,
    QUOTA,
    REASON,
    SUPPRESS_BYPASS_QUOTA_DELTA_RATIO,
    CPUSetBasis,
    CPUSuppress,
    calculate_be_suppress_cpu,
    pick_be_cpuset,
)

log = logging.getLogger(__name__)

REACT_FAST, REACT_TICK = "fast", "tick"
REACT_MODES = (REACT_FAST, REACT_TICK)
INTERVAL = 0.05  # seconds between samples
FOLLOW = 0.5  # seconds after a write in which the load's further rise is followed at the 1 % bypass
SYSTEM_SAMPLES = 21  # the system term over the last second: /proc/stat moves in clock ticks (10 ms)
HYSTERESIS_CORES = 0.2
REALTIME_NOTE = "fastpath/realtime"  # the /healthz info note when the sampler's thread stays an ordinary one


@dataclass(frozen=True, slots=True)
class Sample:
    mono: float  # seconds (monotonic)
    node: float  # busy CPU seconds of the node
    kubepods: float  # CPU seconds of the kubepods dir
    be: float  # CPU seconds of the BestEffort dir


class FastPath:
    """The sampler thread and its decisions (see the module docstring)."""

    def __init__(self, layout: CgroupLayout, store: StateStore, executor: Executor, strategy: CPUSuppress, *,
                 interval: float = INTERVAL, monotonic: Callable[[], float] = time.monotonic,
                 clock: Callable[[], float] = time.time,
                 observe: Callable[[float], object] | None = None,
                 counters: Callable[[], tuple[float, float, float]] | None = None) -> None:
        self.layout, self.store, self.executor, self.strategy = layout, store, executor, strategy
        self.interval = interval
        self.monotonic, self.clock = monotonic, clock
        self.observe = observe  # the reaction time of each write (the /metrics histogram)
        # where the counters come from instead of the files: (node busy, kubepods, BE) CPU seconds (replay)
        self.counters = counters
        self.be_dir = layout.qos_dir(KUBE_QOS_BESTEFFORT)
        if layout.version == 1:
            kubepods = layout.file("cpuacct", layout.kubepods_dir(), "cpuacct.usage")
            be = layout.file("cpuacct", self.be_dir, "cpuacct.usage")
        else:
            kubepods = layout.file("cpu", layout.kubepods_dir(), "cpu.stat")
            be = layout.file("cpu", self.be_dir, "cpu.stat")
        # the counters and their last SYSTEM_SAMPLES samples (qosmanager._native: C, or its Python twin);
        # stopping interrupts the sampler's wait (in C, without the GIL): it returns at once
        self.counter_paths = (os.path.join(layout.roots.proc, "stat"), kubepods, be)
        self._sampler = self.new_sampler(interval, -1)
        self._follow_until = float("-inf")
        self._children: tuple[int, list[str]] | None = None  # (pods generation, BE children's dirs): v1
        self.writes = 0
        self.step_errors = 0
        self.wakes = 0  # returns from the sampler to Python (the load reached the trigger level)
        self.pressures = 0  # samples taken at once on a CPU stall of LS (pressure(): a PSI trigger)
        self.pressure_writes = 0  # BE-limit writes those samples made
        self._decide_lock = threading.Lock()  # decide(): the sampler's thread and the PSI watch's
        self.not_realtime = ""  # why the sampler's thread is an ordinary one ("": SCHED_FIFO, or not started)
        self._stop = threading.Event()
        self._trigger_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        strategy.quota_cap = self.cap

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fastpath", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._sampler.interrupt()
        if self._thread is not None:
            self._thread.join(5)
        if self._thread is None or not self._thread.is_alive():
            self._sampler.close()

    def new_sampler(self, interval: float, stop_fd: int) -> Any:
        """A sampler of this fast path's counters (:class:`qosmanager._native.CounterSampler`); its wait
        ends when ``stop_fd`` is readable (-1: none) or at its ``interrupt()``."""
        kind = SAMPLER_KIND_NS if self.layout.version == 1 else SAMPLER_KIND_USAGE_USEC
        return CounterSampler(*self.counter_paths, kind, float(clock_ticks()), SYSTEM_SAMPLES, interval, stop_fd)

    @property
    def samples(self) -> int:
        """Samples taken (every interval, by the thread's sampler or by :meth:`step`)."""
        return int(self._sampler.taken)

    @property
    def errors(self) -> int:
        """Samples that found a counter unreadable, and decisions that failed."""
        return int(self._sampler.errors) + self.step_errors

    def _run(self) -> None:
        """Samples every interval in the sampler (no Python, no GIL, while the load stays below the
        trigger level); decides in Python when it reaches it.  With a counter source or a clock of its
        own (replay, tests) it steps in Python instead."""
        if self.counters is not None or self.monotonic is not time.monotonic:
            self._run_stepping()
            return
        # its samples must not wait for a CPU behind the load they react to (qosmanager.host.sched)
        why = realtime()
        if why:
            # /healthz says it under info (not a fault: the tick and the fast path still protect).  Without
            # CAP_SYS_NICE (the shipped DaemonSet grants it) it is the deployment's to fix: a warning.  With
            # it, the kernel gives real-time time only to cgroups granted some (CONFIG_RT_GROUP_SCHED) and a
            # pod's cgroup has none: the node's configuration, said once at info, not an alarm at each start
            held = cap_sys_nice()
            if held:
                why += "; CAP_SYS_NICE is held, so this kernel grants real-time time per cgroup " \
                       "(CONFIG_RT_GROUP_SCHED) and this one's cpu.rt_runtime_us is 0"
            self.store.conditions.note(REALTIME_NOTE, f"the fast path's sampler is an ordinary thread ({why}): "
                                       "on busy CPUs its samples come late, tens of ms each")
            log.log(logging.INFO if held else logging.WARNING,
                    "fast path: the sampler's thread stays an ordinary one (%s): on busy CPUs its samples "
                    "come late, tens of ms each", why)
        self.not_realtime = why
        self.retrigger()
        while self._sampler.wait() != SAMPLER_WOKE_STOP and not self._stop.is_set():
            self.wakes += 1
            try:
                self.decide()
            except Exception:  # the thread must outlive any one sample; the tick still protects
                self.step_errors += 1
                log.exception("fast path: a sample failed")
            self.retrigger()

    def _run_stepping(self) -> None:
        next_at = self.monotonic()
        while True:
            next_at += self.interval
            wait = next_at - self.monotonic()
            if wait < 0:  # fell behind (a stopped process, a starved CPU): no catch-up burst
                next_at, wait = self.monotonic(), 0.0
            if self._stop.wait(wait):
                return
            try:
                self.step()
            except Exception:  # the thread must outlive any one sample; the tick still protects
                self.step_errors += 1
                log.exception("fast path: a sample failed")

    # ------------------------------------------------------------------ one sample
    def cap(self) -> int | None:
        """The fast path's BE quota (µs per period) from its latest samples, if they are recent (two
        samples' time): the tick never sets a higher one."""
        samples, first = self._sampler.window()
        if len(samples) < 3 or self.monotonic() - samples[-1][0] > 4 * self.interval:
            return None
        milli = self._milli(samples, first)[0]
        return None if milli is None else max(go_div(milli * CFS_PERIOD_US, 1000), BE_MIN_QUOTA)

    def sample(self) -> Sample | None:
        """Read the counters now (the thread's sampler does this on its own); a clock that has not moved
        since the last sample (a simulated one, stepped again after a PSI event's sample) reads nothing."""
        now = self.monotonic()
        kept = self._sampler.samples()
        if kept and kept[-1][0] >= now:
            return Sample(*kept[-1])
        if self.counters is not None:
            self._sampler.push(now, *self.counters())
        elif not self._sampler.record(now):
            log.debug("fast path: counters unreadable")
            return None
        return Sample(*self._sampler.samples()[-1])

    def step(self) -> Write | Plan | None:
        """Read the counters; lower BE's limit when LS demand rose.  Returns the write, if any."""
        if self.sample() is None:
            return None
        return self.decide()

    def _milli(self, samples: list[tuple[float, float, float, float]],
               first_index: int) -> tuple[int | None, Sample, Sample]:
        """BE's budget (milli-cores) from these samples (None where the fast path does not decide), with
        the latest sample and the first of the pods' window (the sampler's: ``first_index``)."""
        now, first, oldest = Sample(*samples[-1]), Sample(*samples[first_index]), Sample(*samples[0])
        # first: two intervals back (one after a quiet sleep), the pods' rates over the last ~100 ms;
        # oldest: the node's over a second
        dt, span = now.mono - first.mono, now.mono - oldest.mono
        if dt <= 0 or span <= 0:
            return None, now, first
        system = (now.node - oldest.node - (now.kubepods - oldest.kubepods)) / span
        return self.budget_milli(system, (now.kubepods - first.kubepods) / dt, (now.be - first.be) / dt), now, first

    def pressure(self, follow: bool = True) -> Write | Plan | None:
        """LS stalled on CPU (a PSI trigger, :mod:`qosmanager.framework.psi`, on its thread): sample now and
        decide at once, not at the sampler's next sample (a fresh one, under half an interval old, is
        decided on again instead: a shorter window would be noise).  ``follow`` (the LS cgroups' own stall):
        the rise is followed as after a write, every interval at the 1 % bypass for :data:`FOLLOW`."""
        if self._stop.is_set():
            return None
        self.pressures += 1
        now = self.monotonic()
        if follow:
            self._follow_until = max(self._follow_until, now + FOLLOW)
        samples = self._sampler.samples()
        fresh = samples and self.counters is None and now - samples[-1][0] < self.interval / 2
        w = self.decide() if fresh else self.step()
        if w is not None:
            self.pressure_writes += 1
        self.retrigger()
        return w

    def decide(self) -> Write | Plan | None:
        """Lower BE's limit when the latest samples show a rise in LS demand.  Returns the write, if any."""
        with self._decide_lock:
            return self._decide()

    def _decide(self) -> Write | Plan | None:
        samples, first_index = self._sampler.window()
        if len(samples) < 3:
            return None
        milli, now, first = self._milli(samples, first_index)
        if milli is None:
            return None
        dt = now.mono - first.mono
        quota = max(go_div(milli * CFS_PERIOD_US, 1000), BE_MIN_QUOTA)
        s = self.strategy
        node = self.store.node
        if node is None:
            return None
        bypass = node.cpu_capacity_cores * CFS_PERIOD_US * SUPPRESS_BYPASS_QUOTA_DELTA_RATIO
        # a rise seen mid-window shows in part first: right after a write it is followed to its level
        hysteresis = bypass if now.mono < self._follow_until else max(bypass, HYSTERESIS_CORES * CFS_PERIOD_US)
        if self._policy() == CPU_SUPPRESS_POLICY_CPUSET:
            return self._lower_cpuset(milli, hysteresis, now, first)
        held = s.held_quota
        if held is None or (held != -1 and quota > held - hysteresis):
            return None
        w = Write(s.name, QUOTA, str(quota), self.be_dir, cacheable=False,
                  reason=f"{REASON} (fast path): BE quota {quota}: the non-BE load rose within "
                         f"{dt * 1e3:.0f} ms")
        writes = [w]
        if self.layout.version == 1:  # v1 refuses a parent quota below a child's: children go first
            writes = [*self._lower_children(quota), w]
        results = self.executor.apply(writes)
        if any(r.write is w and r.status == "failed" for r in results) and self.layout.version == 1:
            with s.children_lock:
                s.children.refused = True  # v1: a child above it, maybe one not read: the tick reads every one
        s.held_quota = quota
        self._wrote(now, first, bool(results))
        return w

    def _wrote(self, now: Sample, first: Sample, applied: bool) -> None:
        self.writes += 1
        self._follow_until = now.mono + FOLLOW
        if self.observe is not None and applied:
            # from the start of the window that showed the rise to the limit in the kernel
            self.observe(self.monotonic() - first.mono)

    def _held_cpus(self) -> tuple[int, CPUSetBasis] | None:
        """How many CPUs BE's cpuset holds and the basis (pools, dirs) the tick picked them from; None
        where the fast path cannot narrow it: no cpuset decision yet, no LS pools, an unreadable list."""
        s = self.strategy
        held, basis = s.held_cpuset, s.cpuset_basis
        if held is None or basis is None or not (basis.lsr or basis.ls):
            return None
        try:
            return len(parse_cpu_list(held[0])), basis
        except ValueError:
            return None

    def _lower_cpuset(self, milli: int, hysteresis: float, now: Sample, first: Sample) -> Plan | None:
        """The cpuset policy: BE's cpuset narrowed at once to the CPUs the tick would pick for this budget
        (from the pools and dirs of its last decision), when that is fewer CPUs than BE holds.  The budget
        must fall short of BE's CPUs by the hysteresis too, so noise at a whole CPU does not flap it.  The
        write is the tick's own plan (``be-cpuset``) in the executor: children narrowed before parents."""
        s = self.strategy
        held = self._held_cpus()
        if held is None:
            return None
        count, basis = held
        slack = hysteresis * 1000 / CFS_PERIOD_US  # milli-cores
        n = max(math.ceil((milli + slack) / 1000), BE_MIN_CPUSET_CORES)
        if n >= count:
            return None
        value = format_cpu_list(pick_be_cpuset(n, basis.lsr, basis.ls))
        if not value:
            return None
        reason = (f"{REASON} (fast path): BE cpuset {value} ({n} CPUs for {milli}m): the non-BE load rose "
                  f"within {(now.mono - first.mono) * 1e3:.0f} ms")
        dirs = basis.dirs

        def build() -> list[Write]:
            return [s.write(CPUSET, d, value, reason) for d in dirs]

        plan = Plan(s.name, "be-cpuset", [(list(dirs), value)], build)
        results = self.executor.apply([plan])
        s.held_cpuset = (value, basis.containers_only)
        self._wrote(now, first, bool(results))
        return plan

    def _lower_children(self, quota: int) -> list[Write]:
        """cgroup v1: every BE pod and container whose quota in the kernel is above ``quota`` lowered to it,
        as cpuSuppress's tick does (``CPUSuppress.fit_children``), with its bookkeeping: a child's own quota
        is the one found there (unless this strategy wrote it), so the tick gives it back as the budget
        rises.  The BE tree is walked again when the pod set changed (a new pod's quota is read before the
        BE dir goes below it); the executor writes falling limits children first, the BE dir last."""
        s = self.strategy
        walk = self._be_children()
        with s.children_lock:  # the children that can be above it, not every one (100,000 at 100,000 pods)
            dirs = s.children.fall_candidates(walk, quota)
        values = self.executor.read_many(QUOTA, dirs)
        out: list[Write] = []
        with s.children_lock:
            own, lowered = s.child_own, s.child_lowered
            for d, text in zip(dirs, values):
                try:
                    cur = int((text or "").strip())
                except ValueError:
                    continue
                if cur < 0 or cur <= quota:
                    continue  # unlimited children take the parent's limit; lower ones fit under it
                if lowered.get(d) != cur:
                    own[d] = cur  # its owner's (koordlet's batch-cpu hook), not ours
                lowered[d] = quota
                out.append(Write(s.name, QUOTA, str(quota), d, cacheable=False,
                                 reason=f"{REASON} (fast path): quota {quota}, the BE quota's (its own "
                                        f"{own[d]}; cgroup v1 refuses a parent quota below a child's)"))
        return out

    def _be_children(self) -> list[str]:
        """The BE pods' and containers' cpu dirs (walked again when the pod set changed)."""
        gen = self.store.pods_generation
        if self._children is None or self._children[0] != gen:
            walk = self.layout.dirs_up_to_depth("cpu", self.be_dir, CONTAINER_DEPTH)[1:]
            self._children = (gen, walk)
        return self._children[1]

    def _policy(self) -> str:
        """The suppress policy the NodeSLO asks for: the tick takes every value but cfsQuota as cpuset."""
        policy = self.store.nodeslo.resource_used_threshold_with_be.cpu_suppress_policy
        return CPU_SUPPRESS_POLICY_CFS_QUOTA if policy == CPU_SUPPRESS_POLICY_CFS_QUOTA else CPU_SUPPRESS_POLICY_CPUSET

    def budget(self, system: float, kubepods: float, be: float) -> int | None:
        """BE's quota (µs per period) by cpuSuppress's formula from these rates; see :meth:`budget_milli`."""
        milli = self.budget_milli(system, kubepods, be)
        return None if milli is None else max(go_div(milli * CFS_PERIOD_US, 1000), BE_MIN_QUOTA)

    def budget_milli(self, system: float, kubepods: float, be: float) -> int | None:
        """BE's budget (milli-cores) by cpuSuppress's formula from these rates (cores: node less kubepods,
        kubepods, the BE dir), or None where the fast path does not decide (see the module docstring)."""
        s = self.strategy
        last = s.last_suppress
        node = self.store.node
        slo = self.store.nodeslo
        split = s.last_split
        if last is None or node is None or split is None or split.corrections or s.holding:
            return None
        thr = slo.resource_used_threshold_with_be
        if s.policy_status.get(self._policy()) != POLICY_USING or thr.cpu_suppress_threshold_percent is None:
            return None
        pods = max(kubepods - be, 0.0)
        if slo.host_applications:
            system = last.used.system
        else:
            system = max(system, 0.0, node.reserved_cpu_milli / 1000)
        used = FilteredUsage(pods, last.used.host_apps, system)
        q = calculate_be_suppress_cpu(node, kubepods + system, {}, {}, (), {}, thr.cpu_suppress_threshold_percent,
                                      thr.cpu_suppress_min_percent, used)
        return q.milli

    # ------------------------------------------------------------------ when Python must look
    def retrigger(self) -> None:
        """Tell the sampler the lowest non-BE load (pods + system, cores) at which :meth:`decide` could
        write: its thread returns to Python only there.  Called after every decision of the fast path and
        after the scheduler's jobs that move its inputs (the tick's decision, the Node and NodeSLO)."""
        with self._trigger_lock:  # two threads call it: the last one's levels must be the latest
            level, follow, floor, fixed = self.trigger_levels()
            self._sampler.set_trigger(level, follow, self._follow_until, floor, fixed)

    def trigger_levels(self) -> tuple[float, float, float, float]:
        """(level, level within :data:`FOLLOW` of a write, the system term's floor, the system term when
        fixed (NaN: measured)).  With K = capacity x threshold - host applications (milli-cores), the
        budget is K - int(1000 pods) - int(1000 system), at least the floors; :meth:`decide` writes when it
        is at most a bound B (the quota in force less the hysteresis, in milli-cores; under the cpuset
        policy, the CPUs held less one, less the hysteresis).  Each truncation takes less than one, so a
        write needs 1000 (pods + system) > K - B - 2: that is the level.  A bound the floors keep the
        budget above gives an infinite level: nothing to wake for."""
        s, node, slo, last = self.strategy, self.store.node, self.store.nodeslo, self.strategy.last_suppress
        never = (math.inf, math.inf, 0.0, math.nan)
        if node is None or last is None or self.budget_milli(0.0, 0.0, 0.0) is None:
            return never
        if slo.host_applications:
            floor, fixed = 0.0, last.used.system
        else:
            floor, fixed = node.reserved_cpu_milli / 1000, math.nan
        thr = slo.resource_used_threshold_with_be
        if thr.cpu_suppress_threshold_percent is None:
            return never
        capacity = node.cpu_capacity_milli
        k = capacity * thr.cpu_suppress_threshold_percent // 100 - int(last.used.host_apps * 1000)
        min_pct = thr.cpu_suppress_min_percent
        min_milli = -math.inf if min_pct is None else capacity * min_pct // 100
        bypass = node.cpu_capacity_cores * CFS_PERIOD_US * SUPPRESS_BYPASS_QUOTA_DELTA_RATIO
        if self._policy() == CPU_SUPPRESS_POLICY_CPUSET:
            cpus = self._held_cpus()
            if cpus is None:
                return never
            count = cpus[0]
            if count <= BE_MIN_CPUSET_CORES:
                return never

            def bound(hysteresis: float) -> float:  # ceil((milli + slack) / 1000) < count
                return (count - 1) * 1000 - hysteresis * 1000 / CFS_PERIOD_US
        else:
            held = s.held_quota
            if held is None:
                return never
            if held == BE_UNSET_QUOTA:
                return -math.inf, -math.inf, floor, fixed  # any budget is a write

            def bound(hysteresis: float) -> float:  # quota <= held - hysteresis, quota >= BE_MIN_QUOTA
                x = held - hysteresis
                return -math.inf if x < BE_MIN_QUOTA else x * 1000 / CFS_PERIOD_US

        def level(hysteresis: float) -> float:
            b = bound(hysteresis)
            if b < min_milli:
                return math.inf
            return (k - b - 2) / 1000

        return level(max(bypass, HYSTERESIS_CORES * CFS_PERIOD_US)), level(bypass), floor, fixed


__all__ = ["INTERVAL", "REACT_FAST", "REACT_MODES", "REACT_TICK", "REALTIME_NOTE", "FastPath", "Sample"]
