"""cpuSuppress's v1 step for cpusets: no BE cgroup is ever outside its parent's set.

cgroup v1 refuses a cpuset outside its parent's (EACCES) and a parent's that would leave out CPUs of a
child's (EBUSY); v2 takes both and clamps ``cpuset.cpus.effective`` instead, so v2 needs no step.
Where every level is written in one batch the executor's leveled order (:mod:`qosmanager.executor.order`)
is enough: a cpuset that gains CPUs widens parents first, one that loses CPUs narrows children first.
Two cases write some levels and not others:

* **A parent written over children it does not write**: with a static kubelet CPU manager and a pool
  too small for the wanted CPUs, koordlet writes every BE CPU to the QoS and pod dirs and nothing to the
  containers, which keep the kubelet's shared pool (the kubelet's reserved CPUs with it); the BE CPU
  manager's recovery leaves the containers of pods its hook manages alone.  On v1 such a parent gets
  its value widened by what its children keep (read from the kernel): :meth:`V1CPUSets.cover`.  The
  QoS and pod dirs are no limit there (the containers carry the BE set), so BE gains no CPU by it.
* **Containers written under pod dirs it does not write**: the fail-safe hold under a static CPU
  manager re-asserts the containers only.  On v1 a container whose pod dir someone else narrowed gets
  the BE set within its pod dir's (what v2 puts in effect for the same write); with nothing in common
  the BE set is written as is and the kernel's refusal is reported (:meth:`V1CPUSets.clip`).  The
  pod dirs found narrowed are remembered, and the next cpuset plan is written whole, outside the write
  cache, in one batch: the pod dirs widened back first, then their containers given their set
  (:attr:`V1CPUSets.clipped`).

Deeper cgroups (inside a container) are not walked: a container narrowed below one of them is refused
(EBUSY) and reported like any refused protection write.
"""

from __future__ import annotations

from collections.abc import Sequence

from qosmanager.framework.context import Context
from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list

CPUSET = "cpuset.cpus"

# a cpuset plan: [(dirs, value), ...]
CPUSetPlan = list[tuple[list[str], str]]


class V1CPUSets:
    """cgroup v1: BE cpuset plans kept valid level by level (see the module docstring)."""

    def __init__(self) -> None:
        # pod dirs a held container was clipped to (someone else narrowed them); the next plan is whole
        self.clipped: set[str] = set()
        # the last cover: (the walk it read, what it was asked, what it answered); dropped when a cpuset
        # write is refused (a kept child changed meanwhile)
        self._cover: tuple[Sequence[str], list[tuple[int, str]], CPUSetPlan] | None = None

    def forget(self) -> None:
        """A BE cpuset write was refused: read the kept children again at the next plan."""
        self._cover = None

    def cover(self, ctx: Context, walk: Sequence[str], plan: CPUSetPlan) -> CPUSetPlan:
        """``plan`` with each written dir widened, on v1, by the CPUs of the children (in ``walk``, the
        BE dirs parents first) the plan does not write; unchanged on v2 and where every dir is written."""
        if ctx.cgroup_version != 1 or sum(len(dirs) for dirs, _ in plan) >= len(walk):
            return plan
        asked = [(len(dirs), value) for dirs, value in plan]
        cached = self._cover
        if cached is not None and cached[0] is walk and cached[1] == asked:
            return cached[2]
        wanted: dict[str, set[int]] = {}
        for dirs, value in plan:
            cpus = set(parse_cpu_list(value))
            for d in dirs:
                wanted[d] = cpus
        kept = [d for d in walk if d not in wanted and d.rpartition("/")[0] in wanted]
        holds: dict[str, set[int]] = {}
        for d, text in zip(kept, _read_now(ctx, kept)):
            try:
                holds[d] = set(parse_cpu_list(text or ""))
            except ValueError:
                continue  # unreadable: the kernel checks it anyway, and a refusal is reported
        # bottom-up (the walk lists parents first): each written dir holds what its children hold
        need = {d: set(cpus) for d, cpus in wanted.items()}
        for d in reversed(walk):
            parent = d.rpartition("/")[0]
            if parent in need and parent != d:
                child = need.get(d, holds.get(d))
                if child:
                    need[parent] |= child
        groups: dict[str, list[str]] = {}
        for dirs, value in plan:
            for d in dirs:
                cpus = need[d]
                groups.setdefault(value if cpus == wanted[d] else format_cpu_list(cpus), []).append(d)
        out = [(dirs, value) for value, dirs in groups.items()]
        self._cover = (walk, asked, out)
        return out

    def clip(self, ctx: Context, containers: Sequence[str], value: str) -> list[tuple[str, str]]:
        """The held BE set ``value`` for each container written without its pod dir: on v1 within the pod
        dir's set where that is narrower (the pod dir is remembered in :attr:`clipped`)."""
        if ctx.cgroup_version != 1:
            return [(d, value) for d in containers]
        cpus = set(parse_cpu_list(value))
        pods = sorted({d.rpartition("/")[0] for d in containers})
        sets: dict[str, set[int]] = {}
        for p, text in zip(pods, _read_now(ctx, pods)):
            try:
                sets[p] = set(parse_cpu_list(text or ""))
            except ValueError:
                continue
        out = []
        for d in containers:
            pod = d.rpartition("/")[0]
            within = cpus & sets.get(pod, cpus)
            if within and within != cpus:
                self.clipped.add(pod)
                out.append((d, format_cpu_list(within)))
            else:
                out.append((d, value))  # nothing in common: the kernel refuses it, and that is reported
        return out


def _read_now(ctx: Context, dirs: Sequence[str]) -> list[str | None]:
    """What the kernel holds now (not what the write cache remembers this agent writing): the files are
    another writer's, or were changed by one."""
    return [ctx.read_cgroup_counter("cpuset", d, CPUSET) for d in dirs]
