"""Whether latency-sensitive pods stall on memory: graduated memoryEvict's "BE stalls LS" trigger.

Pressure stall information (PSI) counts the microseconds tasks waited for memory (reclaim,
refaults, throttling at ``memory.high``).  :class:`LSStallWatch` samples the cumulative ``total``
of the sources below at every memoryEvict tick and reports the largest share of the time since
the previous sample that one source spent stalled; :data:`STALL_SHARE` or more counts as a stall.

Sources, best first:

* cgroup v2: ``memory.pressure`` ``some`` of the LS classes -- the Burstable QoS dir (every
  Burstable pod beneath it) and each Guaranteed pod's dir (they sit directly under kubepods, beside
  BestEffort, so kubepods' own file would count BE's stalls at its cap as LS's);
* otherwise (cgroup v1, or a v2 kernel without cgroup PSI) ``/proc/pressure/memory`` ``full``: the
  share of time in which *every* runnable task on the node waited for memory, which an LS task's
  wait is part of (``some`` there would also count a BE task held at its cap alone).

None where the kernel has none of them (booted without PSI): graduated memoryEvict then judges by
the memory-high events and by how long the node stays over the threshold alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qosmanager.api.pod import PodMeta
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.procfs import parse_psi

STALL_SHARE = 0.01
"""LS stalled on memory at least 1 % of the time since the last sample (10 ms a second)."""


@dataclass(frozen=True, slots=True)
class Stall:
    stalled: bool
    share: float  # the largest share of time one source spent stalled since the last sample
    source: str  # which (a cgroup dir, or "/proc/pressure/memory")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class LSStallWatch:
    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self._last: dict[str, tuple[int, float]] = {}  # source -> (total µs, when)

    def sources(self, pods: Iterable[PodMeta]) -> list[tuple[str, str, str]]:
        """``(name, path, line)`` of each source (see the module docstring)."""
        lay = self.layout
        node = ("/proc/pressure/memory", lay.roots.proc_path("pressure/memory"), "full")
        if lay.version == 2:
            dirs = [lay.qos_dir(KubeQoS.BURSTABLE)]
            for pod in pods:
                if pod.kube_qos == KubeQoS.GUARANTEED.value:
                    try:
                        dirs.append(lay.pod_dir(pod.kube_qos, pod.uid))
                    except ValueError:
                        continue
            return [*((d, lay.file("", d, "memory.pressure"), "some") for d in dirs), node]
        return [node]

    def sample(self, pods: Iterable[PodMeta], now: float) -> Stall | None:
        """Sample every source; the stall since the previous sample (no stall at the first one), or
        None when no source can be read.  On v2 the node file counts only when no LS cgroup has PSI."""
        worst = Stall(False, 0.0, "")
        seen = False
        for name, path, line in self.sources(pods):
            if seen and name == "/proc/pressure/memory":
                break  # the LS cgroups answered: the node-wide figure is not needed
            text = _read(path)
            if text is None:
                self._last.pop(name, None)
                continue
            try:
                psi = parse_psi(text)
            except ValueError:
                continue
            seen = True
            total = psi.some.total if line == "some" else psi.full.total
            prev = self._last.get(name)
            self._last[name] = (total, now)
            if prev is None or now <= prev[1] or total < prev[0]:
                continue
            share = (total - prev[0]) / 1e6 / (now - prev[1])
            if share > worst.share:
                worst = Stall(share >= STALL_SHARE, share, name)
        if not seen:
            return None
        return worst
