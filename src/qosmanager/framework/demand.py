"""What the strategies (and the exported metrics) need measured, and the collector's plan from it.

A strategy declares its needs with :meth:`Strategy.needs`: a few :class:`Need` values, each a metric
(a metric-cache name: ``node_cpu_usage``, ``besteffort_cpu_usage``, ``pod_cpu_usage``,
``container_cpu_throttled`` ...), its scope (node, QoS class, pod, container), how fresh the newest
sample must be, the window its queries look back over, which pods or containers (all, or a set of
keys) and, optionally, a condition: ``near`` gives the proximity of the strategy's trigger (the
watched value over its threshold, 1.0 = triggered) and the need holds only while that comes within
:data:`ENTER_MARGIN` of the trigger; it is dropped again below :data:`EXIT_MARGIN` (hysteresis both
ways, so a value hovering at the margin does not flip the plan every tick).

The :class:`Planner` turns the union of the needs of the enabled strategies into a
:class:`CollectPlan` every collector tick: which node and QoS-class files to read, and for pods and
containers which keys, which of their files and how often (in ticks).  What no need names is not
read.  Freshness becomes a cadence: a need of 10 s is served by reading each pod every 10th tick,
the pods spread over the ticks (``slot % every == tick % every``), so the cost is even and the
eviction windows keep a history.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qosmanager.metrics import cache as mc

if TYPE_CHECKING:
    from qosmanager.framework.context import Context

log = logging.getLogger(__name__)

NODE, QOS, POD, CONTAINER = "node", "qos", "pod", "container"
SCOPES = (NODE, QOS, POD, CONTAINER)
SLOW_SECONDS = 10.0
"""Default freshness of the per-pod usage history (well under the readers' 20 s delta gap)."""
STATE_SECONDS = 30.0
"""Default freshness of a state that changes rarely and is carried between reads (cpusets)."""
ENTER_MARGIN = 0.10
"""A conditional need switches on when its trigger's proximity reaches 1 - this (90 %)."""
EXIT_MARGIN = 0.20
"""... and off again only below 1 - this (80 %)."""

# the stat files of a pod or container slot (bits of the readers' FILE_* indices)
F_USAGE, F_CPUSTAT, F_MEMSTAT, F_CPUSET = 1, 2, 4, 8
BE_CONTAINERS = "be"
"""``Need.keys`` selector: the containers of pods in the BestEffort QoS dir."""

Proximity = Callable[["Context"], "float | None"]


@dataclass(frozen=True)
class Need:
    """One measurement a strategy asks for (see the module docstring)."""

    metric: str
    scope: str
    freshness: float = 1.0  # seconds: the newest sample is at most this old
    window: float = 0.0  # seconds its queries look back (the history it needs)
    keys: frozenset[str] | str | None = None  # pods (uids) / containers (ids); None: all
    near: Proximity | None = None  # only while the trigger is near (None: always)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"need {self.metric}: unknown scope {self.scope!r}")
        if not self.freshness > 0 or not math.isfinite(self.freshness):
            raise ValueError(f"need {self.metric}: freshness must be a positive number of seconds")
        if self.metric not in mc.METRIC_NAMES:
            raise ValueError(f"need {self.metric}: not a metric-cache name")


def files_of(metric: str, version: int) -> int:
    """The stat files (bits) a pod or container metric is read from."""
    _, m = mc.METRIC_NAMES[metric]
    if m == mc.CPU_USAGE:
        return F_USAGE if version == 1 else F_CPUSTAT
    if m == mc.CPU_THROTTLED_RATIO:
        return F_CPUSTAT
    return F_MEMSTAT


@dataclass(frozen=True)
class Demand:
    """What the collector reads of one kind of cgroup: which keys, which files, every how many ticks."""

    kind: str  # POD | CONTAINER
    keys: frozenset[str] | str | None
    files: int
    every: int = 1


@dataclass(frozen=True)
class CollectPlan:
    """One tick's reads: node files, the QoS dirs, and the pod and container demands."""

    node_cpu: bool = False
    node_memory: bool = False
    qos: bool = False
    be_real_limit: bool = False
    demands: tuple[Demand, ...] = ()
    near: tuple[str, ...] = ()  # the strategies whose trigger is near (for the log and the tests)


@dataclass
class Planner:
    """Builds each tick's :class:`CollectPlan` from the needs, keeping the hysteresis state."""

    version: int
    collect_interval: float = 1.0
    _near: dict[tuple[str, int], bool] = field(default_factory=dict)
    _seen: dict[Proximity, float | None] = field(default_factory=dict)
    _key: tuple[object, ...] = ()
    _sources: list[Sequence[Need]] = field(default_factory=list)
    last: CollectPlan = field(default_factory=CollectPlan)

    def ticks(self, seconds: float) -> int:
        return max(1, round(seconds / self.collect_interval))

    def is_near(self, owner: str, index: int, need: Need, ctx: Context) -> bool:
        """Whether a conditional need holds now (hysteresis: on at 1 - ENTER, off below 1 - EXIT)."""
        assert need.near is not None
        if need.near in self._seen:  # one estimate per strategy and tick
            p = self._seen[need.near]
        else:
            try:
                p = need.near(ctx)
                p = None if p is None else float(p)
            except (Exception, SystemExit):  # a strategy's estimate must not stop collection: read what it asks
                log.exception("%s: trigger proximity failed; collecting its detail", owner)
                p = math.inf
            self._seen[need.near] = p
        key = (owner, index)
        on = self._near.get(key, False)
        if p is None or math.isnan(p):
            on = False
        elif on:
            on = p >= 1.0 - EXIT_MARGIN
        else:
            on = p >= 1.0 - ENTER_MARGIN
        self._near[key] = on
        return on

    def plan(self, ctx: Context, sources: Iterable[tuple[str, Sequence[Need]]]) -> CollectPlan:
        self._seen.clear()
        sources = list(sources)
        # which conditional needs hold now (their hysteresis advances every tick)
        on = tuple(need.near is None or self.is_near(owner, i, need, ctx)
                   for owner, needs in sources for i, need in enumerate(needs))
        sig = (tuple((owner, id(needs)) for owner, needs in sources), on)
        if sig == self._key and all(a is b for a, b in zip(self._sources, (n for _, n in sources))):
            return self.last  # the same needs in the same state: the same plan (object)
        node_cpu = node_memory = qos = be_limit = False
        demands: dict[tuple[str, frozenset[str] | str | None, int], int] = {}  # (kind, keys, every) -> files
        near: list[str] = []
        holds = iter(on)
        for owner, needs in sources:
            for need in needs:
                if not next(holds):
                    continue
                if need.near is not None and owner not in near:
                    near.append(owner)
                kind, m = mc.METRIC_NAMES[need.metric]
                if kind == "node":
                    if need.metric == "be_cpu_real_limit":
                        be_limit = qos = True
                        be_key: tuple[str, frozenset[str] | str | None, int] = (
                            CONTAINER, BE_CONTAINERS, self.ticks(need.freshness))
                        demands[be_key] = demands.get(be_key, 0) | F_CPUSET
                    elif need.metric.startswith(("node_", "sys_")):
                        if "memory" in m:
                            node_memory = True
                        else:
                            node_cpu = True
                        if need.metric.startswith("sys_"):
                            qos = True
                    else:
                        qos = True
                    continue
                if kind == "app":
                    continue  # host applications are few and always read when configured
                key = (kind if kind == POD else CONTAINER, need.keys, self.ticks(need.freshness))
                demands[key] = demands.get(key, 0) | files_of(need.metric, self.version)
        plan = CollectPlan(node_cpu, node_memory, qos, be_limit,
                           tuple(Demand(k, keys, f, every) for (k, keys, every), f in demands.items()),
                           tuple(near))
        if plan.near != self.last.near:
            log.info("collector: detail for %s", ", ".join(plan.near) if plan.near else "no strategy")
        self.last = plan
        self._key = sig
        self._sources = [n for _, n in sources]  # kept alive, so their ids stay theirs
        return plan


__all__ = [
    "BE_CONTAINERS",
    "CONTAINER",
    "ENTER_MARGIN",
    "EXIT_MARGIN",
    "NODE",
    "POD",
    "QOS",
    "SLOW_SECONDS",
    "STATE_SECONDS",
    "CollectPlan",
    "Demand",
    "Need",
    "Planner",
    "files_of",
]
