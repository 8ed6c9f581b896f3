"""A scenario's memory over time on a fake host: ``replay``'s ``memoryLoad`` (docs/interfaces.md).

The scenario says what the node would hold if nothing held BE back, as series of ``[ts, bytes]`` (linear
between samples, held before the first and after the last): ``nonBE``, the node's used memory outside BE
(LS pods, system: MemTotal - MemAvailable less BE's part), and what BE would hold, ``beAnon`` (anonymous
memory: the kernel cannot take it back without swap) and ``beCache`` (page cache).  At every update the
model applies the kernel's rules for the BE QoS dir as the fake kernel has them in force
(:func:`hold`, the rule ``simulate``'s load model applies per container):

* page cache that a ``memory.high`` written below BE's usage or a ``memory.reclaim`` took
  (:meth:`~qosmanager.sim.fakekernel.FakeKernel.take_reclaimed`) is gone from then on;
* under ``memory.high`` BE's anonymous growth stalls at the cap (throttled: what BE held stays, however low
  the cap), and its page cache is cut to what the cap leaves; each update that held BE counts one ``high``
  event in ``memory.events``.  cgroup v1 has no ``memory.high``: nothing holds BE there.

The node's memory stalls follow (:func:`~qosmanager.sim.fakestall.memory_stall`, kept in :attr:`MemoryLoad.stall`
for the pressure files): every class stalls when MemAvailable falls below the page cache in use (BE's, and
``nonBECache``: the page cache outside BE the workloads keep touching, counted as available, 0 when the
scenario has none), BE alone for the share of its growth the cap denied and the page cache it cut.

It writes what the agent reads: the BE QoS dir's ``memory.stat`` and usage file, ``/proc/meminfo`` (node
used = ``nonBE`` + BE's anonymous memory: page cache is available memory) and returns the node's used
bytes (replay stores it as the ``node_memory_usage`` sample of that moment).  Pods' own files are the
scenario's.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.fakestall import Stall, memory_stall


def hold(prev_anon: float | None, want_anon: float, want_cache: float,
         high: int | None) -> tuple[float, float, bool]:
    """BE's (anonymous memory, page cache, held) under ``high`` (None: no cap): anonymous growth since
    ``prev_anon`` stalls at the cap, what BE held stays; page cache is cut to what the cap leaves."""
    if high is None:
        return want_anon, want_cache, False
    prev = want_anon if prev_anon is None else min(prev_anon, want_anon)
    anon = min(want_anon, max(prev, float(high)))
    room = max(0.0, high - anon)
    cache = min(want_cache, room)
    return anon, cache, anon < want_anon or cache < want_cache


class MemoryLoad:
    """The model (see the module docstring) on ``host``, from ``series`` (``nonBE``, ``beAnon``,
    ``beCache``: samples sorted by time)."""

    def __init__(self, host: FakeHost, series: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        self.host = host
        self.series = {k: list(v) for k, v in series.items()}
        self.times = {k: [ts for ts, _ in v] for k, v in self.series.items()}
        self.be_rel = host.layout.qos_dir(KubeQoS.BESTEFFORT)
        self.be_dir = host.layout.abs_dir("memory", self.be_rel)
        self.anon: float | None = None  # BE's anonymous memory at the last update
        self.cut = 0.0  # BE's page cache reclaimed so far (gone for good)
        self.high_events = 0
        self.used = 0
        self.stall = Stall()  # how the classes stalled up to the last update

    def want(self, key: str, t: float) -> float:
        """The series ``key`` at ``t`` (0 when the scenario has none)."""
        pts = self.series.get(key)
        if not pts:
            return 0.0
        i = bisect.bisect_right(self.times[key], t)
        if i == 0:
            return pts[0][1]
        if i == len(pts):
            return pts[-1][1]
        (t0, v0), (t1, v1) = pts[i - 1], pts[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def update(self, t: float) -> int:
        """The node at ``t``: BE held under the cap in force, files written; the node's used bytes."""
        kernel = self.host.kernel
        high = kernel.memory_high(self.be_dir) if kernel is not None else None
        if kernel is not None:
            self.cut += kernel.take_reclaimed(self.be_dir)
        want_cache = max(0.0, self.want("beCache", t) - self.cut)
        want_anon = self.want("beAnon", t)
        prev = want_anon if self.anon is None else min(self.anon, want_anon)
        anon, cache, held = hold(self.anon, want_anon, want_cache, high)
        self.anon = anon
        if held and kernel is not None:
            self.high_events += 1
            kernel.memory_event(self.be_dir, "high")
        a, c = int(anon), int(cache)
        self.host.set_memory(self.be_rel, a // 3, a - a // 3, 0, c // 2, c - c // 2)
        total = self.host.memory_bytes
        self.used = min(total, int(self.want("nonBE", t)) + a)
        total_kb = total // 1024
        avail_kb = max(0, total_kb - self.used // 1024)
        self.host.set_meminfo(total_kb, avail_kb - avail_kb // 20, avail_kb)
        growth = want_anon - prev
        self.stall = memory_stall(total - self.used, cache + self.want("nonBECache", t),
                                  be_alive=want_anon + want_cache > 0,
                                  be_denied=(want_anon - anon) / growth if growth > 0 else 0.0,
                                  be_cache_kept=cache / want_cache if want_cache > 0 else 1.0)
        return self.used


__all__ = ["MemoryLoad", "hold"]
