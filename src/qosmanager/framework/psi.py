"""PSI triggers: the memory levels and the CPU fast path woken by the kernel when latency-sensitive pods stall.

Pressure stall information (PSI) lets a process ask the kernel to be told when tasks stall: a line
``some <stall µs> <window µs>`` written to a pressure file registers a trigger on the descriptor, and
``poll`` reports ``POLLPRI`` on it when the tasks the file covers stalled that long within the window (at
most once per window).  :class:`PressureWatch` registers such triggers on the memory pressure of the LS
classes and wakes the memory levels when one fires, as :mod:`~qosmanager.framework.memtrigger` does on a
crossing of their usage lines: :meth:`~qosmanager.framework.scheduler.Scheduler.wake` of the collector,
memoryHigh and memoryEvict, in that order (those that run).  The strategies still decide on their own
reads, on the scheduler's thread; memoryEvict's graduated level 3 judges the stall itself
(:mod:`qosmanager.eviction.stall`), now at once instead of at its next tick.

Where (the sources of :class:`~qosmanager.eviction.stall.LSStallWatch`, as a wake):

* cgroup v2: ``memory.pressure`` of the Burstable QoS dir and of each Guaranteed pod's dir (kubepods'
  own file would count BE stalled at its ``memory.high`` cap as LS), re-registered when the pod set
  changes (at most :data:`MAX_TRIGGERS`);
* cgroup v1, or v2 where no LS cgroup takes a trigger (``EOPNOTSUPP``: cgroup PSI switched off), the
  node's ``/proc/pressure/memory``: a node-wide signal.

The line is ``some``: any LS task stalled (the stall judgement uses ``full`` node-wide; a wake only moves
the memory jobs forward, at most once per window per trigger).  The threshold is
:data:`~qosmanager.eviction.stall.STALL_SHARE` of the window, the share the stall judgement calls a
stall.  The window is :data:`WINDOW_US` (0.5 s, the kernel's least; it then checks every 50 ms) for a
process with ``CAP_SYS_RESOURCE``; without it the kernel takes only multiples of 2 s and reports them at
its 2 s averaging cadence (:data:`UNPRIVILEGED_WINDOW_US`).

Why beside the memory trigger, not instead of it: PSI counts stall, which begins only once the kernel
reclaims (a cgroup at its limit, the node short of free pages); the levels are defined on usage lines,
and level 1 must cap BE *before* LS stalls.  The usage poll sees the lines; PSI sees LS hurt, on any
line, between two usage samples or before a tick of memoryEvict.

CPU pressure feeds the fast path (:mod:`~qosmanager.framework.fastpath`), an event source beside its
counter sampler: the same ``some`` line on ``cpu.pressure`` of the same LS cgroups (v2), and when one fires
:meth:`FastPath.pressure <qosmanager.framework.fastpath.FastPath.pressure>` samples the counters at once and
decides (cpuSuppress's formula, the write through the executor), instead of at the sampler's next sample
(50-100 ms later), then follows the rise every interval at the 1 % bypass for half a second, as after a
write.  The sampler can then sleep longer between samples without reacting later to a load LS feels.  In
the emulated v2 guest a trigger on LS's ``cpu.pressure`` fired 75-115 ms (medians of 8 rounds, host load 8)
before a 50 ms counter sampler saw LS at half a core; fed to the fast path (``tests/test_kernel_psicpu.py``,
12 rounds, host load 12) its sample came a median 67 ms after that sampler's, and BE's quota fell no sooner
(median 778 ms with it, 648 ms without; the guest's own noise is several hundred ms).

Node-wide (``/proc/pressure/cpu``: v1, or v2 without cgroup PSI) a CPU event only takes the sample, without
the follow: there BE's own stall counts too (measured here: 2
CPUs, 7 busy sessions, load 10.8, ``some`` stalled 99 % of the time and a 10 %-of-2 s trigger fired in 8 of
10 windows with no LS at all), so it may fire every window, and a sample costs ~0.2 ms.

Registering a trigger is a write to a kernel file: it goes through the executor
(:meth:`~qosmanager.executor.executor.Executor.psi_trigger`: audited, not made under ``--dry-run``).
Where no trigger can be registered (no PSI on the kernel, ``--dry-run``, a refusal) the memory levels
wake by the memory trigger and their ticks, and the fast path samples at its own cadence, as before;
``/healthz`` says so under ``info`` (:data:`NOTE`, :data:`CPU_NOTE`), not as a fault.

The thread sleeps in one ``poll`` on the triggers and a pipe, with no timeout: an idle node costs no
wake-up; it ends where no trigger is registered and none can come (no PSI, ``--dry-run``, every file
refused).  The scheduler's ``collect`` job pokes the pipe when the pod set changed or a wanted cgroup did not
exist yet (:meth:`PressureWatch.poke`), and the thread registers again.  On with the fast path
(``--react-mode fast``, the default): memory when memoryHigh or memoryEvict runs, CPU when the fast path
does (cpuSuppress runs); off in tick mode.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

from qosmanager._native import sysio
from qosmanager.api.pod import KUBE_QOS_GUARANTEED
from qosmanager.eviction.stall import STALL_SHARE
from qosmanager.executor.psi import DRY_RUN, REGISTERED, PressureTrigger, TriggerResult
from qosmanager.framework.fastpath import REACT_FAST
from qosmanager.framework.memtrigger import COLLECT, EVICT, HIGH, AgentParts, MemoryTrigger
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.procfs import cap_sys_resource

log = logging.getLogger(__name__)

WINDOW_US = 500_000
UNPRIVILEGED_WINDOW_US = 2_000_000
MAX_TRIGGERS = 64  # per resource: the Burstable dir and up to 63 Guaranteed pods
MEMORY, CPU = "memory", "cpu"
NOTE = "psi/memory"
CPU_NOTE = "psi/cpu"
NOTES = {MEMORY: NOTE, CPU: CPU_NOTE}
NAME = "psi"  # the audit's strategy
NODE, QOS, POD = "node", "qos", "pod"  # the scopes of a pressure file: /proc/pressure, the Burstable dir, a pod
SCOPES = (NODE, QOS, POD)
FASTPATH = "fastpath"  # what a CPU event wakes (wait()'s answer)
WHY = {MEMORY: "wake the memory levels when LS stalls on memory",
       CPU: "sample the fast path at once when LS stalls on CPU"}
FALLBACK = {MEMORY: "the memory levels wake by the memory trigger (usage lines) and their ticks",
            CPU: "the fast path samples at its own cadence (50-100 ms)"}


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def trigger_line(privileged: bool) -> str:
    window = WINDOW_US if privileged else UNPRIVILEGED_WINDOW_US
    return f"some {int(window * STALL_SHARE)} {window}"


class _Executor(Protocol):
    def psi_trigger(self, t: PressureTrigger, now: float | None = None) -> TriggerResult: ...


class _FastPath(Protocol):
    def pressure(self, follow: bool = True) -> object: ...


class WatchParts(AgentParts, Protocol):
    @property
    def executor(self) -> _Executor: ...


class PressureWatch:
    """The triggers and the thread that polls them (see the module docstring)."""

    def __init__(self, parts: AgentParts, executor: _Executor, wake: Callable[..., None], *,
                 privileged: bool | None = None, memory: bool = True, fastpath: _FastPath | None = None) -> None:
        self.layout, self.store, self.executor, self.wake = parts.layout, parts.store, executor, wake
        self.fastpath = fastpath  # CPU events sample it at once (None: CPU pressure is not watched)
        self.privileged = cap_sys_resource() if privileged is None else privileged
        self.line = trigger_line(self.privileged)
        self.fds: dict[str, int] = {}  # pressure file -> the descriptor holding its trigger
        self.refused: dict[str, int] = {}  # pressure file -> errno of its last refusal
        self.missing = 0  # wanted files whose cgroup does not exist yet (tried again after each collect)
        self.dry_run = False
        self.events = self.wakes = self.syncs = 0
        self.memory_wakes = 0  # wakes of the memory levels (a CPU event samples the fast path instead)
        # what is watched (the /metrics series): memory for the memory levels, cpu for the fast path
        self.resources: tuple[str, ...] = (*((MEMORY,) if memory else ()), *((CPU,) if fastpath is not None else ()))
        self.counts: dict[tuple[str, str], int] = {}  # (resource, scope) -> events (triggers that fired)
        self.synced_generation = -1
        self._lock = threading.Lock()  # fds: the thread's syncs and stop()
        self._stop = threading.Event()
        self._poke_r, self._poke_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        weakref.finalize(self, _close_fds, self._poke_r, self._poke_w)
        self._thread: threading.Thread | None = None

    @classmethod
    def for_agent(cls, agent: WatchParts) -> PressureWatch | None:
        """The agent's watch, registered as a watcher of its scheduler, or None: tick mode, or neither
        a memory level (memoryHigh, memoryEvict) nor the fast path runs."""
        names = agent.strategy_names
        memory = bool({HIGH, EVICT} & set(names))
        fastpath = getattr(agent, "fastpath", None)
        if agent.cfg.react_mode != REACT_FAST or not (memory or fastpath is not None):
            return None
        watch = cls(agent, agent.executor, agent.scheduler.wake, memory=memory, fastpath=fastpath)
        agent.scheduler.watchers.append(watch)
        agent.scheduler.on_run.append(lambda job, _: watch.poke() if job.name == COLLECT else None)
        return watch

    # ------------------------------------------------------------------ where
    def node_file(self, resource: str) -> str:
        return self.layout.roots.proc_path(f"pressure/{resource}")

    def sources(self, resource: str = MEMORY) -> list[str]:
        """The pressure files to watch for ``resource``, best first: on v2 the LS cgroups' (see the module
        docstring), on v1 the node's."""
        lay = self.layout
        if lay.version != 2:
            return [self.node_file(resource)]
        dirs = [lay.qos_dir(KubeQoS.BURSTABLE)]
        for pod in self.store.pods.values():
            if len(dirs) >= MAX_TRIGGERS:
                break
            if pod.kube_qos == KUBE_QOS_GUARANTEED:
                with contextlib.suppress(ValueError):
                    dirs.append(lay.pod_dir(pod.kube_qos, pod.uid))
        return [lay.file("", d, f"{resource}.pressure") for d in dirs]

    def sync(self) -> None:
        """Register the triggers the sources want and drop the others; for each resource the node's file
        on v2 when no LS cgroup took one.  Updates the ``/healthz`` notes."""
        self.syncs += 1
        self.synced_generation = self.store.pods_generation
        if self.dry_run:  # nothing is registered under --dry-run: asked once
            return
        wanted: list[str] = []
        got: dict[str, int] = {}
        with self._lock:
            for resource in self.resources:
                want = self.sources(resource)
                got[resource] = self._register(resource, want)
                if self.layout.version == 2 and not got[resource] and not self.dry_run:
                    node = self.node_file(resource)
                    got[resource] = self._register(resource, [node])
                    want.append(node)
                wanted += want
            for path in [p for p in self.fds if p not in wanted]:
                self._close(path)
            self.refused = {p: e for p, e in self.refused.items() if p in wanted}
            # under --dry-run nothing is ever registered: none is missing (a count above 0 poked the thread
            # into a sync after every collector run, about 1.5 wake-ups a second for nothing)
            self.missing = 0 if self.dry_run else sum(1 for p in wanted if p not in self.fds and p not in self.refused)
        for resource in self.resources:
            self._note(resource, got.get(resource, 0))

    def _register(self, resource: str, paths: list[str]) -> int:
        """Register what is not yet registered among ``paths``; how many of them hold a trigger."""
        n = 0
        for path in paths:
            if path in self.fds:
                n += 1
                continue
            if self.dry_run:
                break
            res = self.executor.psi_trigger(PressureTrigger(NAME, path, self.line, WHY[resource]))
            if res.status == REGISTERED:
                self.fds[path] = res.fd
                self.refused.pop(path, None)
                n += 1
            elif res.status == DRY_RUN:
                self.dry_run = True
                break
            elif path == self.node_file(resource) or os.path.exists(os.path.dirname(path)):
                # a pod's dir not made yet (or gone) is no refusal; no /proc/pressure is the kernel's answer
                self.refused[path] = res.errno
        return n

    def _note(self, resource: str, registered: int) -> None:
        conditions = self.store.conditions
        key, fallback = NOTES[resource], FALLBACK[resource]
        node = self.node_file(resource)
        if self.dry_run:
            msg = f"--dry-run: no PSI trigger registered (a write to a kernel file); {fallback}"
        elif not registered:
            why = ("no PSI on this kernel (booted without psi=1?)" if not os.path.exists(node)
                   else "PSI triggers refused: " + "; ".join(
                       f"{p}: {errno.errorcode.get(e, str(e))}" for p, e in sorted(self.refused.items())
                       if self.where(p)[0] == resource))
            msg = f"{why}; {fallback}"
        else:
            parts = []
            if self.layout.version == 2 and node in self.fds:
                parts.append(f"no cgroup PSI ({resource}.pressure refused): the node-wide /proc/pressure/{resource} "
                             + ("wakes the memory levels" if resource == MEMORY
                                else "samples the fast path (without following: node-wide, BE's stall counts too)"))
            if not self.privileged:
                parts.append("PSI triggers at the kernel's 2 s averaging cadence: the agent lacks "
                             "CAP_SYS_RESOURCE (windows under 2 s need it)")
            if not parts:
                if conditions.clear_note(key):
                    log.info("PSI triggers registered on %d %s pressure file(s)", registered, resource)
                return
            msg = "; ".join(parts)
        if conditions.note(key, msg):
            log.info("%s", msg)

    def _close(self, path: str) -> None:
        fd = self.fds.pop(path, -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def where(self, path: str) -> tuple[str, str]:
        """(resource, scope) of a pressure file: ``memory`` or ``cpu``; ``node`` (``/proc/pressure``),
        ``qos`` (the Burstable QoS dir) or ``pod`` (a Guaranteed pod)."""
        d, name = os.path.split(path)
        if d == os.path.dirname(self.node_file(MEMORY)):
            return name, NODE
        resource = name.partition(".")[0]
        qos = os.path.dirname(self.layout.file("", self.layout.qos_dir(KubeQoS.BURSTABLE), name))
        return resource, QOS if d == qos else POD

    def event_counts(self) -> dict[tuple[str, str], int]:
        """Events by (resource, scope), every scope of each watched resource (0 before its first), safe on
        any thread (``qosmanager_psi_events_total``)."""
        out = {(r, scope): 0 for r in self.resources for scope in SCOPES}
        with self._lock:
            out.update(self.counts)
        return out

    def trigger_counts(self) -> dict[tuple[str, str], int]:
        """Triggers registered now by (resource, scope), every scope of each watched resource, safe on any
        thread (``qosmanager_psi_triggers``)."""
        out = {(r, scope): 0 for r in self.resources for scope in SCOPES}
        with self._lock:
            paths = list(self.fds)
        for path in paths:
            key = self.where(path)
            out[key] = out.get(key, 0) + 1
        return out

    # ------------------------------------------------------------------ the thread
    def poke(self) -> None:
        """From the scheduler's thread after the collector ran: register again if the pod set changed or a
        wanted cgroup did not exist yet (the kubelet makes a pod's dir after the pod is listed)."""
        if self.layout.version == 2 and (self.missing or self.store.pods_generation != self.synced_generation):
            with contextlib.suppress(OSError):
                os.write(self._poke_w, b"\0")

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="psi", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._poke_w, b"\0")
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for path in list(self.fds):
                self._close(path)

    def _run(self) -> None:
        try:
            self.sync()
        except Exception:  # no trigger: the memory trigger, the fast path's sampler and the ticks still protect
            log.exception("PSI: registering the triggers failed")
        while not self._stop.is_set():
            if not self.fds and not self.missing:  # no PSI, --dry-run, every file refused: nothing will come
                log.debug("PSI: no trigger to wait for; the watch's thread ends")
                return
            try:
                self.wait()
            except Exception:
                log.exception("PSI: a poll failed")
                self._stop.wait(1.0)

    def wait(self, timeout: float = -1.0) -> tuple[str, ...]:
        """One ``poll`` on the triggers and the pipe (``timeout`` seconds, negative: none); wakes the memory
        levels when a memory trigger fired, samples the fast path when a CPU one did.  Returns what was
        woken: the memory jobs, then :data:`FASTPATH`."""
        with self._lock:
            by_fd = {fd: path for path, fd in self.fds.items()}
        watch = [(self._poke_r, select.POLLIN), *((fd, select.POLLPRI) for fd in by_fd)]
        ready = sysio.psi_poll(watch, timeout * 1000.0 if timeout >= 0 else -1)
        fired: set[str] = set()
        cpu_scopes: set[str] = set()
        gone, poked = False, False
        for fd, revents in ready:
            if fd == self._poke_r:
                poked = True
                with contextlib.suppress(OSError):
                    while os.read(self._poke_r, 64):
                        pass
            elif revents & (select.POLLERR | select.POLLNVAL | select.POLLHUP):
                gone = True  # the cgroup was removed: its trigger with it
                with self._lock:
                    self._close(by_fd[fd])
            elif revents & select.POLLPRI:
                resource, scope = key = self.where(by_fd[fd])
                fired.add(resource)
                if resource == CPU:
                    cpu_scopes.add(scope)
                with self._lock:
                    self.events += 1
                    self.counts[key] = self.counts.get(key, 0) + 1
        if (poked or gone) and not self._stop.is_set():
            self.sync()
        woken: tuple[str, ...] = ()
        if MEMORY in fired:
            self.memory_wakes += 1
            self.wake(COLLECT, HIGH, EVICT)
            woken = (COLLECT, HIGH, EVICT)
        if CPU in fired and self.fastpath is not None:
            # the LS cgroups' own stall is followed at the interval; the node's (BE's stall in it) only sampled
            self.fastpath.pressure(follow=bool(cpu_scopes - {NODE}))
            woken = (*woken, FASTPATH)
        if woken:
            self.wakes += 1
        return woken


def memory_watchers(agent: WatchParts) -> tuple[MemoryTrigger | None, PressureWatch | None]:
    """The agent's memory trigger (usage lines) and PSI watch, each registered with its scheduler."""
    return MemoryTrigger.for_agent(agent), PressureWatch.for_agent(agent)


__all__ = ["CPU", "CPU_NOTE", "FASTPATH", "MEMORY", "NODE", "NOTE", "POD", "QOS", "SCOPES", "UNPRIVILEGED_WINDOW_US",
           "WINDOW_US", "PressureWatch", "cap_sys_resource", "memory_watchers", "trigger_line"]
