"""What ``qosmanager simulate`` is asked and what it answers: :class:`SimConfig` and :class:`SimResult`.

The run itself is :mod:`~qosmanager.sim.simulate`; the drawing of a result :mod:`~qosmanager.sim.plot`.
Both import these types from here (and ``simulate`` keeps exporting them), so neither imports the
other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qosmanager.framework import plugins
from qosmanager.sim.load import LoadShape, StepRecord


@dataclass
class SimConfig:
    containers: int = 2000
    duration: float = 30.0
    cgroup_version: int = 1
    seed: int = 0
    cpus: int = 64
    memory_gib: int = 256
    suppress_policy: str = "cfsQuota"
    step: float = 1.0  # load-model step, simulated seconds
    collect_interval: float = 1.0
    collect_mode: str = "demand"  # the agent's --collect-mode
    feature_gates: dict[str, bool] = field(default_factory=dict)
    cpu_threshold_percent: int = 65
    memory_threshold_percent: int = 70
    shape: LoadShape = field(default_factory=LoadShape)
    audit_log: str | None = None
    workdir: str | None = None
    keep: bool = False
    real_time: bool = False
    kernel: bool = True  # the fake kernel's rules under the agent's writes (benchmarks switch it off)
    react_mode: str = "fast"  # the agent's --react-mode: "fast" runs the fast path between ticks

    def validate(self) -> None:
        if self.containers < 1:
            raise ValueError("--containers must be at least 1")
        if not 0 < self.duration <= 86_400:
            raise ValueError("--duration must be within (0, 86400] seconds")
        if self.cpus < 2 or self.cpus % 2:
            raise ValueError("--cpus must be an even number >= 2 (two threads per core)")
        if self.memory_gib < 1:
            raise ValueError("--memory-gib must be at least 1")
        if not 0 < self.step <= self.duration:
            raise ValueError("--step must be positive and at most --duration")
        if self.suppress_policy not in ("cfsQuota", "cpuset"):
            raise ValueError("--suppress-policy must be cfsQuota or cpuset")
        if self.react_mode not in ("fast", "tick"):
            raise ValueError("--react-mode must be fast or tick")
        if not 0.0 <= self.shape.ls_growth <= 10.0:
            raise ValueError("--ls-memory-growth must be within [0, 10]")
        plugins.feature_gates({"BEMemoryEvict": True, **self.feature_gates})  # unknown names: now


@dataclass
class Eviction:
    t: float
    pod: str  # namespace/name
    uid: str
    priority: int
    feature: str
    memory: int  # bytes the pod held
    reason: str


@dataclass
class JobStats:
    runs: int = 0
    cpu_seconds: float = 0.0
    errors: int = 0
    max_seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.runs += 1
        self.cpu_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)


@dataclass
class FileWrite:
    """An executed write the agent made to the BE QoS dir's CPU limits (quota or cpuset)."""

    t: float
    strategy: str
    file: str
    value: str
    old: str | None


@dataclass
class SimResult:
    config: SimConfig
    pods: int
    ls_pods: int
    be_pods: int
    strategies: list[str]
    records: list[StepRecord]
    evictions: list[Eviction]
    jobs: dict[str, JobStats]
    tick_cpu: list[float]  # agent CPU seconds per tick: a collect and every strategy run until the next one
    be_writes: list[FileWrite]
    peak_rss: int
    baseline_rss: int
    priorities: dict[str, int]  # uid -> spec.priority of every pod
    be_uids: frozenset[str]
    build_seconds: float
    run_seconds: float
    strategy_errors: dict[str, str]
    # the fast path's BE-limit writes: from the start of the window that showed the rise to the limit
    # written (simulated seconds; none in tick mode)
    reactions: list[float] = field(default_factory=list)
    # memory protection's reactions (level, when, seconds): from the start of the sample window that showed the
    # node crossing the level's line to the level's action (qosmanager.framework.memreaction)
    memory_reactions: list[tuple[int, float, float]] = field(default_factory=list)
    # PSI: the events the fake kernel's triggers sent (when, pressure file, stall µs within the window), the
    # triggers the agent held at the end (file, line) and LS's largest stall share in one (sub-)step
    psi_events: list[tuple[float, str, int]] = field(default_factory=list)
    psi_triggers: list[tuple[str, str]] = field(default_factory=list)
    ls_stall_peak: float = 0.0
    ls_stall_first: float | None = None  # when LS first stalled on memory (simulated seconds)
    psi_wakes: int = 0  # times a PSI event woke the memory levels
    # the fast path's CPU triggers (LS's cpu.pressure): their events, the triggers held at the end, the samples
    # the fast path took at once on them and the BE-limit writes those samples made
    psi_cpu_events: list[tuple[float, str, int]] = field(default_factory=list)
    psi_cpu_triggers: list[tuple[str, str]] = field(default_factory=list)
    psi_cpu_samples: int = 0
    psi_cpu_writes: int = 0
    # CPU seconds the fake kernel spent emulating the agent's calls (its rules in Python), left out of the
    # agent's figures above (tick_cpu, jobs): a node's kernel does that work in C
    kernel_emulation_seconds: float = 0.0

    @property
    def ticks(self) -> int:
        return self.jobs["collect"].runs if "collect" in self.jobs else 0

    @property
    def agent_cpu_seconds(self) -> float:
        return sum(j.cpu_seconds for j in self.jobs.values())

    def tick_cpu_stats(self) -> tuple[float, float, float]:
        """(median, mean, max) agent CPU seconds per tick."""
        ts = sorted(self.tick_cpu)
        if not ts:
            return 0.0, 0.0, 0.0
        n = len(ts)
        median = ts[n // 2] if n % 2 else (ts[n // 2 - 1] + ts[n // 2]) / 2.0
        return median, sum(ts) / n, ts[-1]
