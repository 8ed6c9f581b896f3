"""The agent's metric families and the hooks that feed them.

koordlet's names are kept where koordlet has the metric (``pkg/koordlet/metrics``), so existing
dashboards keep working (``koordlet_pod_eviction`` is exposed untyped so that neither format renames
it ``..._total``: see :mod:`~qosmanager.exporter.registry`); the agent process's own figures are the
standard ``process_*`` families of ``prometheus_client``; everything else is ``qosmanager_``.
Where a value comes from:

* **Counters the agent keeps anyway** (``CollectorStats``, ``ExecutorStats``, ``StrategyStats``,
  the state store's ``health``, the metric cache's size) are *pulled* at scrape time on the HTTP
  thread: the agent's loop pays nothing for them.
* **Events** come through O(1) hooks on the agent's thread: the scheduler's ``on_run`` (tick
  durations, failure streaks, last success per job), the executor's ``on_batch`` (write durations
  by kind and status, the BE limit cpuSuppress wrote), the eviction coordinator's ``on_decision``.
  A hook that raises is logged once and never reaches the agent.

The BE suppression gauges follow koordlet's meaning: ``koordlet_be_suppress_cpu_cores{type}``
is the BE limit of the policy in use as cpuSuppress last handed it to the executor (cpuset: CPUs of
the BE cpuset; cfsQuota: quota / period), the decided value also when the kernel refused the write;
the series of a policy that is recovered (not in use, or suppression switched off) disappears.  LS
used cores are the non-BE pods' usage cpuSuppress last computed; BE used cores are the collector's
last ``be_cpu_usage`` sample.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from qosmanager.api.nodeslo import CPU_SUPPRESS_POLICY_CFS_QUOTA, CPU_SUPPRESS_POLICY_CPUSET
from qosmanager.exporter.promlib import GCCollector, PlatformCollector
from qosmanager.exporter.registry import (
    Counter,
    Gauge,
    Histogram,
    LabelValues,
    ProcessCollector,
    Registry,
    exponential_buckets,
)
from qosmanager.host import resources as res
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.cpuset import parse_cpu_list

if TYPE_CHECKING:
    from qosmanager.eviction.coordinator import EvictionCoordinator
    from qosmanager.eviction.types import EvictDecision
    from qosmanager.executor.executor import Executor, WriteResult
    from qosmanager.framework.manager import QoSManager
    from qosmanager.framework.memreaction import MemoryReactions
    from qosmanager.framework.scheduler import Job, Scheduler
    from qosmanager.host.cgroups import CgroupLayout
    from qosmanager.metrics.cache import MetricCache
    from qosmanager.metrics.collector import Collector
    from qosmanager.states.store import StateStore

log = logging.getLogger(__name__)

# koordlet: prometheus.ExponentialBuckets(0.01, 4, 8), in milliseconds (a cgroup write is ~40 us)
UPDATE_BUCKETS_MS = exponential_buckets(0.01, 4, 8)
# the fast path samples every 50 ms: its reactions range from ~50 ms to a few samples
REACTION_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
# memory protection reacts within a sample or two of the trigger (50 ms) up to a few collector ticks (1 s each)
MEMORY_REACTION_BUCKETS_S = (0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0)
# agent ticks range from ~100 us (an idle strategy) to ~100 ms (a 1,000-pod reconcile)
TICK_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

CPU_SUPPRESS = "cpuSuppress"
QUOTA, CPUSET = "cpu.cfs_quota_us", "cpuset.cpus"
# results whose value never reached (and will not reach) the file
NOT_APPLIED = frozenset({"invalid", "unsupported", "missing", "failed", "lost", "superseded"})
# the BE limit gauge keeps what cpuSuppress decided when the kernel refused it (a failed write)
NOT_DECIDED = NOT_APPLIED - {"failed"}
EXECUTED = ("written", "failed")

KubeSourceGetter = Callable[[], object]


class PressureCounts(Protocol):
    """What ``/metrics`` reads of the PSI watch (:class:`qosmanager.framework.psi.PressureWatch`)."""

    def event_counts(self) -> Mapping[tuple[str, str], int]: ...
    def trigger_counts(self) -> Mapping[tuple[str, str], int]: ...


class AgentMetrics:
    """Every family of ``/metrics``, bound to the agent's parts (any of them may be left out)."""

    def __init__(self, registry: Registry | None = None, *, node_name: str = "",
                 clock: Callable[[], float] = time.time, collect_interval: float = 1.0,
                 layout: CgroupLayout | None = None, store: StateStore | None = None,
                 cache: MetricCache | None = None, collector: Collector | None = None,
                 executor: Executor | None = None, coordinator: EvictionCoordinator | None = None,
                 manager: QoSManager | None = None, scheduler: Scheduler | None = None,
                 file_source: object = None, kube_source: KubeSourceGetter | None = None,
                 process: bool = True) -> None:
        self.registry = registry if registry is not None else Registry()
        self._node_name = node_name
        self.clock = clock
        self.collect_interval = collect_interval
        self.layout = layout
        self.store = store
        self.cache = cache
        self.collector = collector
        self.executor = executor
        self.manager = manager
        self.file_source = file_source
        self.kube_source = kube_source or (lambda: None)
        self.started_at = clock()
        # the strategies that run (enabled is decided once, at start); disabled ones show no series
        self._strategies = [s.name for s in manager.enabled()] if manager is not None else []
        # liveness facts for /healthz, written on the agent's thread under _lock
        self._lock = threading.Lock()
        self.last_success: dict[str, float] = {}  # job -> wall time of its last run without an error
        self.failure_streaks: dict[str, int] = {}  # job -> runs that failed in a row
        self._job_errors: dict[str, int] = {}
        self._tick_children: dict[str, Any] = {}
        self._update_children: dict[tuple[str, str], Any] = {}
        self._kinds: dict[str, str] = {}
        self._hook_failed: set[str] = set()
        self._want_process = process
        self.memory_reactions: MemoryReactions | None = None  # set by Exporter.for_agent
        self.psi: PressureCounts | None = None  # the PSI watch (framework/psi), set by Exporter.for_agent
        self._define()
        if scheduler is not None:
            scheduler.on_run.append(self.on_job_run)
        if executor is not None:
            executor.on_batch.append(self.on_write_batch)
        if coordinator is not None:
            coordinator.on_decision.append(self.on_decision)

    @property
    def node_name(self) -> str:
        if self._node_name:
            return self._node_name
        node = self.store.node if self.store is not None else None
        return node.name if node is not None else ""

    # ------------------------------------------------------------------
    # the families
    # ------------------------------------------------------------------
    def _define(self) -> None:
        r = self.registry
        # -- koordlet's names -------------------------------------------------------------
        self.be_suppress_cores = Gauge(
            "koordlet_be_suppress_cpu_cores",
            "CPU cores BestEffort pods are suppressed to by the policy in use (cpuset: CPUs of the BE "
            "cpuset; cfsQuota: BE quota / period), as cpuSuppress last set them", ("node", "type"), r)
        Gauge("koordlet_be_suppress_ls_used_cpu_cores",
              "CPU cores used by non-BE pods when cpuSuppress last computed the BE budget",
              ("node",), r).pull(self._ls_used_cores)
        Gauge("koordlet_be_suppress_be_used_cpu_cores",
              "CPU cores used by BestEffort pods (the BE QoS cgroup), last collector sample",
              ("node",), r).pull(self._be_used_cores)
        self.koord_evictions = Counter(
            "koordlet_pod_eviction", "Pods evicted, by the koordlet feature that evicted them",
            ("node", "reason"), r)
        self.update_duration = Histogram(
            "koordlet_resource_update_duration_milliseconds",
            "Duration of executed file updates in milliseconds (a batch's time shared by its writes), "
            "by kind (cgroup, resctrl, system) and status (success, failed)",
            ("type", "status"), buckets=UPDATE_BUCKETS_MS, registry=r)
        # -- the agent's own ----------------------------------------------------------------
        self.tick_duration = Histogram(
            "qosmanager_tick_duration_seconds",
            "Duration of one run of a scheduled job: the collector pass (collect) or a strategy tick",
            ("job",), buckets=TICK_BUCKETS_S, registry=r)
        self.be_limit_reaction = Histogram(
            "qosmanager_be_limit_reaction_seconds",
            "The fast path's BE CPU limit writes: seconds from the start of the sample window that showed a "
            "rise in non-BE load to the lowered limit in the kernel (none in --react-mode tick)",
            buckets=REACTION_BUCKETS_S, registry=r)
        self.memory_reaction = Histogram(
            "qosmanager_memory_protection_reaction_seconds",
            "Memory protection's reaction, by level: seconds from the start of the sample window that showed the "
            "node's memory crossing the level's line (memory trigger or collector sample; L - 5 % for levels 1 "
            "and 2, T for 3) to BE's memory cap (1), its memory.reclaim (2) or an eviction (3) in the kernel",
            ("level",), buckets=MEMORY_REACTION_BUCKETS_S, registry=r)
        Gauge("qosmanager_job_last_success_timestamp_seconds",
              "Wall time of the last run of a job that did not fail", ("job",), r).pull(self._last_success)
        Gauge("qosmanager_job_consecutive_failures", "Runs of a job that failed in a row",
              ("job",), r).pull(self._streaks)
        Gauge("qosmanager_containers_tracked", "Containers the collector samples",
              registry=r).pull(lambda: self._collector_stat("containers"))
        Gauge("qosmanager_pods_tracked", "Pods the collector samples",
              registry=r).pull(lambda: self._collector_stat("pods"))
        Gauge("qosmanager_collector_pending_cgroups",
              "Cgroups the collector waits for (not created yet, or vanished while their pod is listed)",
              registry=r).pull(lambda: self._collector_stat("pending"))
        Gauge("qosmanager_collector_partial_cgroups",
              "Tracked cgroups some of whose stat files are missing (their other metrics are still read)",
              registry=r).pull(lambda: self._collector_stat("partial"))
        Counter("qosmanager_collector_read_errors_total",
                "Stat files that could not be read or parsed (that metric of that cgroup skipped)",
                registry=r).pull(lambda: self._collector_stat("read_errors"))
        Gauge("qosmanager_descriptors", "The agent's descriptor budget for cgroup files (budget) and the "
              "descriptors its readers and executor hold (held); files beyond the budget are reopened at "
              "every read", ("kind",), r).pull(self._descriptors)
        Counter("qosmanager_audit_write_errors_total",
                "Flushes of the audit log that failed (their records dropped; see the audit-log condition)",
                registry=r).pull(self._audit_errors)
        Counter("qosmanager_write_cache_hits_total",
                "Writes answered by the executor's write cache (no syscall at all)",
                registry=r).pull(lambda: self._executor_stat("cache_hits"))
        Counter("qosmanager_writes_total",
                "Write requests by outcome: written, unchanged (the file held the value), cached, "
                "failed, missing (the file is gone), invalid (refused value), lost (another strategy owns "
                "the file)", ("status",), r).pull(self._writes)
        Counter("qosmanager_failed_writes_total", "Writes the kernel refused",
                registry=r).pull(lambda: self._executor_stat("failed"))
        Gauge("qosmanager_write_conflicts",
              "Files another writer keeps changing back (e.g. koordlet owning the same knob), by resource: "
              "rewritten with backoff instead of at every check",
              ("resource",), r).pull(self._write_conflicts)
        Gauge("qosmanager_decided_not_in_force",
              "Files whose decided BE protection (the BE QoS dir's CFS quota or cpuset) is not in force: "
              "refused by the kernel or held back by a write conflict, by strategy and resource",
              ("strategy", "resource"), r).pull(self._not_in_force)
        self.evictions = Counter(
            "qosmanager_evictions_total",
            "Eviction decisions by strategy, koordlet feature and result: evicted, decided (audited only "
            "under --evict-mode none or --dry-run), pending (already being evicted), failed, skipped "
            "(refused: LS without opt-in, LSE/LSR, backoff)", ("strategy", "feature", "result"), r)
        Counter("qosmanager_kill_signals_total",
                "Kill-mode evictions' host actions: SIGKILLs sent one by one (sigkill) and subtrees ended "
                "with one write of a pod's cgroup.kill (cgroup_kill)", ("how",), r).pull(self._kills)
        Counter("qosmanager_strategy_errors_total", "Strategy ticks that raised",
                ("strategy",), r).pull(self._strategy_errors)
        Gauge("qosmanager_plugin_info",
              "Strategy plugins found at start (1 each): their gate, strategy, package, version and state: on "
              "(it runs), off (its gate is off), failed (did not import, failed a check or raised when built) or "
              "stopped (its ticks kept raising; what it changed was restored)",
              ("gate", "strategy", "package", "version", "state"), r).pull(self._plugins)
        Counter("qosmanager_watch_restarts_total", "Kubernetes watches restarted, by resource",
                ("resource",), r).pull(self._watch_restarts)
        Gauge("qosmanager_source_connected", "Whether a state source is connected (1) or not (0)",
              ("source",), r).pull(self._connected)
        Gauge("qosmanager_last_sync_timestamp_seconds",
              "Wall time of the last successful sync of each kind of state (node, pods, nodeslo)",
              ("source",), r).pull(self._last_sync)
        Gauge("qosmanager_degraded",
              "Degraded conditions the agent works around (1 while active): a bad NodeSLO field, a node "
              "counter that cannot be read, a missing kube QoS cgroup, ...; /healthz says what each means",
              ("condition",), r).pull(self._degraded)
        Gauge("qosmanager_nodeslo_invalid_fields",
              "NodeSLO fields the agent dropped (1 per field, by JSON path): out of range or of the wrong "
              "type, an unknown key, an enum value koordlet reads as another; koordlet's default (or "
              "reading) applies there or what the field sets is left as it is, everything else applies; "
              "/healthz says why", ("field",), r).pull(self._nodeslo_invalid)
        Gauge("qosmanager_memory_protection_level",
              "The memory protection level memoryHigh has in force: 0 none (BE's cap lifted), 1 BE capped "
              "(memory.high on the BestEffort QoS dir; v1: its soft limit), 2 capped and reclaiming "
              "(memory.reclaim); only while memoryHigh runs (gate BEMemoryHigh)",
              registry=r).pull(self._memory_level)
        Counter("qosmanager_psi_events_total",
                "PSI trigger events (an LS class stalled past the trigger's threshold within its window), by "
                "resource (memory) and scope of the pressure file: node (/proc/pressure), qos (the Burstable "
                "QoS dir), pod (a Guaranteed pod); only while the PSI watch runs", ("resource", "scope"),
                r).pull(lambda: self._psi(events=True))
        Gauge("qosmanager_psi_triggers",
              "PSI triggers registered now, by resource and scope (as qosmanager_psi_events_total); all 0: "
              "none could be registered (no PSI, --dry-run, refused: /healthz info says why)",
              ("resource", "scope"), r).pull(lambda: self._psi(events=False))
        Gauge("qosmanager_metric_cache_bytes", "Bytes held by the metric cache's ring buffers",
              registry=r).pull(lambda: self.cache.nbytes() if self.cache is not None else None)
        if self._want_process:
            self._define_process(r)

    def _define_process(self, r: Registry) -> None:
        """The standard families every Prometheus client exports, from ``prometheus_client``'s own
        collectors: ``process_*`` (resident and virtual memory, CPU seconds, open and maximum
        descriptors, start time; read from ``/proc/self`` at scrape time, open descriptors in O(1):
        :class:`~qosmanager.exporter.registry.ProcessCollector`), ``python_gc_*`` and
        ``python_info``.  They replace ``qosmanager_process_resident_memory_bytes``,
        ``qosmanager_process_cpu_seconds_total`` and ``qosmanager_descriptors_open``."""
        try:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        except Exception as e:  # e.g. a name clash: the agent's own families still work
            log.warning("no process metrics: %s", e)

    # ------------------------------------------------------------------
    # hooks (agent thread, O(1) per event)
    # ------------------------------------------------------------------
    def on_job_run(self, job: Job, seconds: float) -> None:
        """Scheduler ``on_run``: the tick histogram, and whether the job failed this time.

        A strategy's exception is caught by the QoS manager (so the scheduler sees no error); its
        ``StrategyStats.errors`` counts it, and both counters are summed here.
        """
        try:
            child = self._tick_children.get(job.name)
            if child is None:
                child = self._tick_children[job.name] = self.tick_duration.labels(job.name)
            child.observe(seconds)
            errors = job.errors
            st = self.manager.stats.get(job.name) if self.manager is not None else None
            if st is not None:
                errors += st.errors
            failed = errors > self._job_errors.get(job.name, 0)
            self._job_errors[job.name] = errors
            now = self.clock()
            with self._lock:
                if failed:
                    self.failure_streaks[job.name] = self.failure_streaks.get(job.name, 0) + 1
                else:
                    self.failure_streaks[job.name] = 0
                    self.last_success[job.name] = now
        except Exception:
            self._hook_error("on_run")

    def on_write_batch(self, results: Sequence[WriteResult], seconds: float) -> None:
        """Executor ``on_batch``: durations of executed writes; cpuSuppress's BE limit."""
        if not results:
            return
        try:
            groups: dict[tuple[str, str], int] = {}
            for r in results:
                if r.status in EXECUTED:
                    key = (self._kind(r.write.resource), "success" if r.status == "written" else "failed")
                    groups[key] = groups.get(key, 0) + 1
            if groups:
                per_write_ms = seconds * 1000.0 / sum(groups.values())
                for key, n in groups.items():
                    child = self._update_children.get(key)
                    if child is None:
                        child = self._update_children[key] = self.update_duration.labels(*key)
                    child.observe(per_write_ms, n)
            if results[0].write.strategy == CPU_SUPPRESS:
                self._suppressed(results)
        except Exception:
            self._hook_error("on_batch")

    def on_decision(self, d: EvictDecision, strategy: str) -> None:
        """Coordinator ``on_decision``: one count per decision."""
        try:
            result = d.action
            if result == "evicted" and not d.executed:
                result = "decided"
            self.evictions.labels(strategy, d.feature, result).inc()
            if result == "evicted":
                self.koord_evictions.labels(self.node_name, d.feature).inc()
        except Exception:
            self._hook_error("on_decision")

    def on_memory_reaction(self, level: int, seconds: float) -> None:
        """A memory protection level acted (:mod:`qosmanager.framework.memreaction`)."""
        self.memory_reaction.labels(str(level)).observe(seconds)

    def jobs(self) -> tuple[dict[str, float], dict[str, int]]:
        """Snapshots of ``(last success per job, failures in a row per job)``, safe on any thread."""
        with self._lock:
            return dict(self.last_success), dict(self.failure_streaks)

    def _hook_error(self, hook: str) -> None:
        if hook not in self._hook_failed:
            self._hook_failed.add(hook)
            log.exception("metrics hook %s failed (logged once; the agent is not affected)", hook)

    def _kind(self, resource: str) -> str:
        """koordlet's updater kind of a resource: cgroup, resctrl or system (sysctls, sysfs knobs)."""
        kind = self._kinds.get(resource)
        if kind is None:
            try:
                root = res.get(resource).root
            except KeyError:
                root = "?"
            if root == "cgroup":
                kind = "cgroup"
            else:
                kind = "resctrl" if resource.startswith("resctrl.") else "system"
            self._kinds[resource] = kind
        return kind

    def _suppressed(self, results: Sequence[WriteResult]) -> None:
        """Set the BE suppression gauge from what cpuSuppress asked for in this batch.

        The cpuset gauge is the smallest CPU set of the batch: with a static kubelet CPU manager
        the QoS and pod dirs keep every BE CPU and only containers are narrowed.
        """
        be_dir = self.layout.qos_dir(KubeQoS.BESTEFFORT) if self.layout is not None else None
        quota: int | None = None
        cpus: int | None = None
        for r in results:
            if r.status in NOT_DECIDED:
                continue
            w = r.write
            if w.resource == QUOTA and w.cgroup == be_dir:
                try:
                    quota = int(w.value)
                except ValueError:
                    continue
            elif w.resource == CPUSET:
                try:
                    n = len(parse_cpu_list(w.value))
                except ValueError:
                    continue
                cpus = n if cpus is None else min(cpus, n)
        policy, enabled = CPU_SUPPRESS_POLICY_CPUSET, True
        if self.store is not None:
            thr = self.store.nodeslo.resource_used_threshold_with_be
            enabled = thr.enable is not False
            if thr.cpu_suppress_policy == CPU_SUPPRESS_POLICY_CFS_QUOTA:
                policy = CPU_SUPPRESS_POLICY_CFS_QUOTA
        node = self.node_name
        if quota is not None:
            if quota < 0 or not enabled or policy != CPU_SUPPRESS_POLICY_CFS_QUOTA:
                self.be_suppress_cores.remove(node, CPU_SUPPRESS_POLICY_CFS_QUOTA)  # recovered
            else:
                cores = quota / res.CFS_PERIOD_US
                self.be_suppress_cores.labels(node, CPU_SUPPRESS_POLICY_CFS_QUOTA).set(cores)
        if cpus is not None:
            if not enabled or policy != CPU_SUPPRESS_POLICY_CPUSET:
                self.be_suppress_cores.remove(node, CPU_SUPPRESS_POLICY_CPUSET)  # recovered
            else:
                self.be_suppress_cores.labels(node, CPU_SUPPRESS_POLICY_CPUSET).set(cpus)

    # ------------------------------------------------------------------
    # pulled values (HTTP thread: scalar reads and snapshots only)
    # ------------------------------------------------------------------
    def _ls_used_cores(self) -> Mapping[LabelValues, float] | None:
        s = self.manager.strategies.get(CPU_SUPPRESS) if self.manager is not None else None
        q = getattr(s, "last_suppress", None)  # a frozen record, replaced whole on each tick
        used = getattr(q, "used", None)
        pods = getattr(used, "pods", None)
        if pods is None:
            return None
        return {(self.node_name,): float(pods)}

    def _be_used_cores(self) -> Mapping[LabelValues, float] | None:
        if self.cache is None:
            return None
        now = self.clock()
        # a sample older than two intervals is stale (koordlet's freshness rule for node metrics)
        milli = self.cache.query("be_cpu_usage", now - 2 * self.collect_interval, now, "last")
        if milli is None or math.isnan(milli):
            return None
        return {(self.node_name,): milli / 1000.0}

    def _memory_level(self) -> float | None:
        if self.manager is None or "memoryHigh" not in self._strategies:
            return None
        return float(self.manager.shared.memory_protection.level)

    def _psi(self, *, events: bool) -> Mapping[LabelValues, float] | None:
        w = self.psi
        if w is None:
            return None
        return {key: float(n) for key, n in (w.event_counts() if events else w.trigger_counts()).items()}

    def _collector_stat(self, name: str) -> float | None:
        return None if self.collector is None else float(getattr(self.collector.stats, name))

    def _executor_stat(self, name: str) -> float | None:
        return None if self.executor is None else float(getattr(self.executor.stats, name))

    def _kills(self) -> Mapping[LabelValues, float] | None:
        if self.executor is None:
            return None
        st = self.executor.stats
        return {("sigkill",): float(st.signals), ("cgroup_kill",): float(st.cgroup_kills)}

    def _descriptors(self) -> Mapping[LabelValues, float] | None:
        if self.collector is None:
            return None
        b = self.collector.budget
        return {("budget",): float(b.total), ("held",): float(b.held())}

    def _audit_errors(self) -> float | None:
        return None if self.executor is None else float(self.executor.audit.write_errors)

    def _writes(self) -> Mapping[LabelValues, float] | None:
        if self.executor is None:
            return None
        st = self.executor.stats
        return {("written",): st.written, ("unchanged",): st.unchanged, ("cached",): st.cache_hits,
                ("failed",): st.failed, ("missing",): st.missing, ("invalid",): st.invalid,
                ("lost",): st.lost}

    def _write_conflicts(self) -> Mapping[LabelValues, float] | None:
        if self.executor is None:
            return None
        return {(resource,): float(n) for resource, n in self.executor.conflicts().items()}

    def _not_in_force(self) -> Mapping[LabelValues, float] | None:
        if self.executor is None:
            return None
        return {sk: float(n) for sk, n in self.executor.not_in_force().items()}

    def _strategy_errors(self) -> Mapping[LabelValues, float] | None:
        if self.manager is None:
            return None
        stats = self.manager.stats
        return {(name,): stats[name].errors for name in self._strategies if name in stats}

    def _plugins(self) -> Mapping[LabelValues, float] | None:
        if self.manager is None:
            return None
        m = self.manager
        return {(p.gate, p.strategy, p.package, p.version, m.plugin_state(p)): 1.0 for p in m.plugins}

    def _degraded(self) -> Mapping[LabelValues, float] | None:
        if self.store is None:
            return None
        return {(key,): 1.0 for key in self.store.conditions.snapshot()}

    def _nodeslo_invalid(self) -> Mapping[LabelValues, float] | None:
        if self.store is None:
            return None
        return {(path,): 1.0 for path, _ in self.store.nodeslo.invalid_fields}

    def _last_success(self) -> Mapping[LabelValues, float]:
        return {(job,): t for job, t in self.jobs()[0].items()}

    def _streaks(self) -> Mapping[LabelValues, float]:
        return {(job,): n for job, n in self.jobs()[1].items()}

    def _watch_restarts(self) -> Mapping[LabelValues, float] | None:
        """The Kubernetes source's ``watch_restarts``: a number, or a mapping resource -> number."""
        src = self.kube_source()
        raw = getattr(src, "watch_restarts", None) if src is not None else None
        if raw is None:
            return None
        if isinstance(raw, Mapping):
            try:
                items = list(dict(raw).items())
            except RuntimeError:  # changed size while copied: skip this scrape
                return None
            return {(str(k),): float(v) for k, v in items if _is_number(v)}
        if _is_number(raw):
            return {("all",): float(raw)}
        return None

    def _connected(self) -> Mapping[LabelValues, float]:
        out: dict[LabelValues, float] = {}
        files = getattr(self.file_source, "files", None)
        if files:
            out[("files",)] = 1.0 if getattr(self.file_source, "connected", True) else 0.0
        src = self.kube_source()
        if src is not None:
            out[("kubernetes",)] = 1.0 if getattr(src, "connected", False) is True else 0.0
        return out

    def _last_sync(self) -> Mapping[LabelValues, float] | None:
        if self.store is None:
            return None
        return {(kind,): h.last_sync for kind, h in list(self.store.health.items()) if h.last_sync > 0}


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
