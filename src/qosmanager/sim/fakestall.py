"""Memory stalls on a simulated node: the pressure files (PSI) ``simulate``'s and ``replay``'s models write.

The kernel counts the time tasks wait for memory (reclaim, refaults of evicted page cache, throttling at
``memory.high``) in each pressure file: ``some`` (at least one task of the group stalled) and ``full`` (all
its non-idle tasks at once), as cumulative ``total`` µs and as averages over 10, 60 and 300 s.  A load model
says, at each of its (sub-)steps, how its classes stalled since the last (:func:`memory_stall`, shares of
time); :class:`NodePressure` integrates that into the files and lets the fake kernel's triggers
(:meth:`~qosmanager.sim.fakepsi.PressureRules.update`) judge the totals as the kernel does.

The model of who stalls, and how much:

* **the node cannot keep its page cache**: while ``MemAvailable`` covers the page cache the workloads keep
  touching, reclaim takes only cold pages and nobody waits; below it, part of every access to that cache
  refaults and every class stalls ``THRASH_MAX x (1 - available / page cache)`` of the time (up to
  :data:`THRASH_MAX` with nothing available: direct reclaim on every allocation);
* **BE held at ``memory.high``** (cgroup v2): BE's allocators sleep in the kernel's throttle for the share
  of their growth the cap denied, and BE refaults the page cache the cap cut as above.  These are BE's
  stalls only: LS's files do not count them (the node's ``some`` does, its ``full`` only when LS stalls too).

Per group ``some`` is the share of time it stalled; ``full`` is taken as ``some²`` (as if two of its tasks
stalled independently), and for a parent of LS and BE ``some = 1 - (1 - ls)(1 - be)``, ``full = ls_full x
be_full``.  The files: the node's ``/proc/pressure/memory`` and, on v2, ``memory.pressure`` of kubepods,
the Burstable and BestEffort QoS dirs and each Guaranteed pod's dir (the LS classes the agent watches);
containers' own files stay as built.  A file is rewritten only when its figures move (at most every
(sub-)step while a class stalls, then every 2 s while its averages decay), so a node that never stalls costs
nothing.  The averages follow the kernel's: every 2 s, ``avg = avg x e + pct x (1 - e)`` with its fixed-point
``e`` (1677, 1981, 2034 / 2048 for 10, 60, 300 s).

CPU pressure (``/proc/pressure/cpu``, v2 ``cpu.pressure`` of the same groups) is kept the same way from the
load model's CPU split (:func:`cpu_stall`): runnable tasks wait while LS's demand, what BE's limit lets it
run and the system's share exceed the CPUs, so a BE limit lowered to the room LS leaves ends LS's wait.  The
node's CPU ``full`` stays 0, as the kernel shows it.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.procfs import parse_psi
from qosmanager.sim.fakepsi import PressureRules

THRASH_MAX = 0.5  # share of time a task stalls with no memory available at all
PSI_FREQ = 2.0  # seconds between two updates of the averages
_EXP = (1677 / 2048, 1981 / 2048, 2034 / 2048)  # the kernel's EXP_10s, EXP_60s, EXP_300s
NODE_FILE = "pressure/memory"


def thrash_share(available: float, page_cache: float) -> float:
    """The share of time a task touching memory stalls: 0 while ``available`` bytes cover the page cache in
    use, :data:`THRASH_MAX` with none available."""
    if available >= page_cache:
        return 0.0
    if page_cache <= 0 or available <= 0:
        return THRASH_MAX
    return THRASH_MAX * (1.0 - available / page_cache)


@dataclass(frozen=True, slots=True)
class Stall:
    """Shares of time (0 .. 1) the classes stalled on memory since the last (sub-)step; a class with no
    task running (every BE pod evicted) has none."""

    ls: float = 0.0  # each LS class (Burstable, Guaranteed pods): the node's thrash
    be: float = 0.0  # BE: the node's thrash, or its throttle and refaults at memory.high when more
    ls_alive: bool = True
    be_alive: bool = True

    @property
    def some(self) -> float:
        """A parent of both classes (the node, kubepods): some task of either stalled."""
        return 1.0 - (1.0 - self.ls) * (1.0 - self.be)

    @property
    def full(self) -> float:
        """... every task of both stalled at once (each class's ``full`` is its ``some²``)."""
        if not self.be_alive:
            return self.ls * self.ls
        if not self.ls_alive:
            return self.be * self.be
        return (self.ls * self.be) ** 2


def cpu_stall(cpus: float, system: float, ls_demand: float, be_allowed: float, be_used: float, *,
              ls_alive: bool = True, be_alive: bool = True) -> Stall:
    """Waits for a CPU (``cpu.pressure``) in one (sub-)step: while LS's demand, what BE's limit lets it run
    (``be_allowed``: min(demand, limit)) and the system's share exceed the ``cpus``, runnable tasks wait -- LS
    for the excess's share of what is runnable (the scheduler favours LS by weight, yet a BE task it finds on
    a CPU runs until preempted), BE for what its limit allows but it does not get.  Time BE spends throttled
    at its quota is not a wait for a CPU (its tasks are off the runqueue)."""
    runnable = ls_demand + be_allowed
    over = ls_demand + be_allowed + system - cpus
    ls = min(1.0, over / runnable) if over > 0 and runnable > 0 and ls_demand > 0 else 0.0
    be = min(1.0, max(0.0, be_allowed - be_used) / be_allowed) if be_allowed > 0 else 0.0
    return Stall(ls if ls_alive else 0.0, be if be_alive else 0.0, ls_alive, be_alive)


def memory_stall(available: float, page_cache: float, *, ls_alive: bool = True, be_alive: bool = True,
                 be_denied: float = 0.0, be_cache_kept: float = 1.0) -> Stall:
    """The stall of one (sub-)step (see the module docstring): ``available`` bytes (MemAvailable) against
    the ``page_cache`` in use; ``be_denied`` the share of BE's wanted growth its memory.high denied,
    ``be_cache_kept`` the share of its wanted page cache the cap left it."""
    thrash = thrash_share(available, page_cache)
    be = max(thrash, min(1.0, max(0.0, be_denied)), THRASH_MAX * (1.0 - min(1.0, max(0.0, be_cache_kept))))
    return Stall(thrash if ls_alive else 0.0, be if be_alive else 0.0, ls_alive, be_alive)


class PressureFile:
    """One pressure file's figures: cumulative totals (µs) and the kernel's averages."""

    def __init__(self, paths: list[str], t: float) -> None:
        self.paths = paths  # the files showing these figures (cgroups of one kind start alike, at 0)
        self.total = [0.0, 0.0]  # some, full (µs)
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(paths[0]) as f:
                psi = parse_psi(f.read())
            self.total = [float(psi.some.total), float(psi.full.total)]
        self.avg = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        self.t = t
        self.period_start = t
        self.period_stall = [0.0, 0.0]  # µs stalled in the averaging period so far
        self.written = ""

    def advance(self, t: float, some: float, full: float) -> None:
        """Up to ``t``, stalled ``some`` and ``full`` of the time (shares)."""
        while t > self.t:
            end = min(t, self.period_start + PSI_FREQ)
            dt = end - self.t
            for i, share in enumerate((some, full)):
                self.total[i] += share * dt * 1e6
                self.period_stall[i] += share * dt * 1e6
            self.t = end
            if end >= self.period_start + PSI_FREQ - 1e-9:
                for i in (0, 1):
                    pct = 100.0 * self.period_stall[i] / (PSI_FREQ * 1e6)
                    self.avg[i] = [a * e + pct * (1.0 - e) for a, e in zip(self.avg[i], _EXP)]
                self.period_start, self.period_stall = end, [0.0, 0.0]

    def text(self) -> str:
        return "".join(f"{name} avg10={a[0]:.2f} avg60={a[1]:.2f} avg300={a[2]:.2f} total={int(tot)}\n"
                       for name, a, tot in zip(("some", "full"), self.avg, self.total))

    def write(self) -> bool:
        """Write the files if the figures moved; whether they were written."""
        body = self.text()
        if body == self.written:
            return False
        self.written = body
        data = body.encode()
        for path in self.paths:
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError:  # its cgroup is gone
                continue
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        return True


class NodePressure:
    """The pressure files of a simulated node, moved by :meth:`advance` (see the module docstring).

    ``guaranteed`` are the dirs of the Guaranteed pods (v2); :attr:`ls_stall_us` and :attr:`be_stall_us`
    are the LS classes' and BE's ``some`` stall so far (µs), for a summary."""

    def __init__(self, layout: CgroupLayout, rules: PressureRules | None, guaranteed: Iterable[str] = (),
                 t: float = 0.0, resource: str = "memory") -> None:
        self.rules = rules
        self.resource = resource
        self.files: list[tuple[PressureFile, str]] = [  # (figures, "node" | "all" | "ls" | "be")
            (PressureFile([layout.roots.proc_path(f"pressure/{resource}")], t), "node")]
        if layout.version == 2:
            def f(dirs: Iterable[str]) -> PressureFile:
                return PressureFile([layout.file("", d, f"{resource}.pressure") for d in dirs], t)

            self.files += [(f([layout.qos_dir(KubeQoS.GUARANTEED)]), "all"),  # kubepods
                           (f([layout.qos_dir(KubeQoS.BURSTABLE), *guaranteed]), "ls"),
                           (f([layout.qos_dir(KubeQoS.BESTEFFORT)]), "be")]
        self.ls_stall_us = 0.0
        self.be_stall_us = 0.0
        self.ls_peak = 0.0  # the largest LS share of one (sub-)step
        self.ls_since: float | None = None  # when LS began to stall (None: it does not now)
        self.ls_first: float | None = None  # when it first did
        self.t = t

    def advance(self, t: float, stall: Stall) -> None:
        """Up to ``t`` the classes stalled as ``stall`` says; the files written, the triggers updated."""
        dt = max(0.0, t - self.t)
        self.t = max(self.t, t)
        self.ls_stall_us += stall.ls * dt * 1e6
        self.be_stall_us += stall.be * dt * 1e6
        self.ls_peak = max(self.ls_peak, stall.ls)
        if stall.ls <= 0:
            self.ls_since = None
        elif self.ls_since is None:
            self.ls_since = self.t - dt  # it began within this (sub-)step: its start bounds it
            if self.ls_first is None:
                self.ls_first = self.ls_since
        now_us = math.floor(t * 1e6)
        watched = set(self.rules.watched()) if self.rules is not None else ()
        for pf, who in self.files:
            if who == "ls":
                some, full = stall.ls, stall.ls * stall.ls
            elif who == "be":
                some, full = stall.be, stall.be * stall.be
            else:
                some, full = stall.some, stall.full
                if who == "node" and self.resource == "cpu":
                    full = 0.0  # the kernel's: CPU full is undefined system-wide, shown as 0
            pf.advance(t, some, full)
            pf.write()
            for path in pf.paths:
                if path in watched:
                    assert self.rules is not None
                    self.rules.update(path, now_us, int(pf.total[0]), int(pf.total[1]))


__all__ = ["THRASH_MAX", "NodePressure", "PressureFile", "Stall", "cpu_stall", "memory_stall", "thrash_share"]
