"""The eviction coordinator: one queue for every strategy (koordlet-qos §2.8, with fixes).

``execute(strategy, tasks, now)`` walks the tasks in order (koordlet's ``KillAndEvictPods``):
for each task not yet satisfied it evicts down the task's victim list until what was released
covers what the task asked for.  What a pod releases is aggregated over every task with the same
target (resource-wise maximum, as koordlet), so one eviction can satisfy several tasks.

Pending release: a pod already being evicted (by any strategy, in this round or an earlier one)
counts as released and is never evicted twice; it stays pending until it is gone from the pod
list or ``pending_ttl`` passes.  koordlet's default kill mode never recorded evicted pods, so it
re-killed them every tick; here every mode records them.

Safety: LSE and LSR pods are never evicted; an LS pod only when it opted in with the label
``koordinator.sh/eviction-enabled: "true"`` (the opt-in koordlet's CPUEvict/MemoryEvict features
require).  A refused victim is audited and skipped.

Fixes of koordlet-qos §6 applied here:

* a task resource that no victim can release (§6b item 6: a standard ``cpu`` entry in an
  allocatable task) no longer makes the task evict its whole victim list: satisfaction is judged on
  the resources victims can release, and the remainder is audited as unsatisfiable;
* pods evicted in kill mode count as pending release (§6 item 4).

Modes: ``none`` (decide and audit only, the pod counts as pending so decisions stay stable),
``kill`` (SIGKILL every process of the pod's cgroups), ``api`` (the Kubernetes Eviction API, given
as a callable), and ``dry_run`` on top of any mode (decide and audit, act on nothing).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qosmanager._native import sysio
from qosmanager.api.pod import QOS_LS, QOS_LSE, QOS_LSR, PodMeta
from qosmanager.eviction.types import EvictDecision, EvictResult, EvictTask, Victim
from qosmanager.executor.audit import AuditLog
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.states.store import StateStore

log = logging.getLogger(__name__)

MODES = ("none", "kill", "api")


@dataclass(slots=True)
class Pending:
    uid: str
    key: str
    strategy: str
    feature: str
    since: float
    until: float


@dataclass(slots=True)
class ApiOutcome:
    """What the Eviction API answered: ok (201 or 404 = already gone), or retry after ``retry_after``."""

    ok: bool
    gone: bool = False
    retry_after: float = 0.0
    error: str = ""


ApiEvict = Callable[[PodMeta, str], ApiOutcome]


class EvictionCoordinator:
    def __init__(self, store: StateStore, layout: CgroupLayout, audit: AuditLog, *, mode: str = "none",
                 dry_run: bool = False, pending_ttl: float = 120.0, api: ApiEvict | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown eviction mode {mode!r}; one of {', '.join(MODES)}")
        if mode == "api" and api is None:
            raise ValueError("--evict-mode api needs the Kubernetes API (in-cluster or --kubeconfig)")
        self.store = store
        self.layout = layout
        self.audit = audit
        self.mode = mode
        self.dry_run = dry_run
        self.pending_ttl = pending_ttl
        self.api = api
        self.clock = clock
        self.pending: dict[str, Pending] = {}
        self.backoff: dict[str, float] = {}  # uid -> not before (a refused API eviction)
        self.evicted_total = 0
        self.history: list[EvictDecision] = []  # bounded record for replay/simulate/tests
        self.on_decision: list[Callable[[EvictDecision, str], None]] = []

    # ------------------------------------------------------------------
    def is_pending(self, uid: str, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        p = self.pending.get(uid)
        return p is not None and now < p.until

    def gc(self, now: float) -> None:
        """Drop pending entries of pods that are gone or whose time ran out."""
        pods = self.store.pods
        for uid in [u for u, p in self.pending.items() if u not in pods or now >= p.until]:
            del self.pending[uid]
        for uid in [u for u, t in self.backoff.items() if now >= t or u not in pods]:
            del self.backoff[uid]

    # ------------------------------------------------------------------
    def execute(self, strategy: str, tasks: Sequence[EvictTask], now: float) -> EvictResult:
        self.gc(now)
        result = EvictResult()
        live = [t for t in tasks if any(q > 0 for q in t.to_release.values())]
        if not live:
            return result
        # resources each target can have released, and the per-pod release functions
        by_target: dict[str, list[EvictTask]] = {}
        for t in live:
            by_target.setdefault(t.target, []).append(t)
            result.released.setdefault(t.target, {})
        lookup = {id(t): {v.pod.uid: v.release for v in t.victims} for t in live}

        def aggregate(pod: PodMeta) -> dict[str, dict[str, float]]:
            """What evicting ``pod`` releases, per target: resource-wise max over that target's tasks.

            A pod that is not one of a task's victims still releases for it what the task's
            ``release_of`` says (koordlet runs every task's resource function on every evicted pod:
            a BE pod evicted for BECPUEvict also gives back its usage to a later CPUEvict task).
            """
            out: dict[str, dict[str, float]] = {}
            for target, ts in by_target.items():
                acc: dict[str, float] = {}
                for t in ts:
                    rel = lookup[id(t)].get(pod.uid)
                    if rel is None and t.release_of is not None:
                        rel = t.release_of(pod)
                    if rel is None:
                        continue
                    for r, q in rel.items():
                        if q > acc.get(r, float("-inf")):
                            acc[r] = q
                out[target] = acc
            return out

        def add(released: dict[str, dict[str, float]], amounts: Mapping[str, Mapping[str, float]]) -> None:
            for target, rl in amounts.items():
                dst = released.setdefault(target, {})
                for r, q in rl.items():
                    dst[r] = dst.get(r, 0.0) + q

        def satisfiable(task: EvictTask) -> dict[str, float]:
            """The part of the task some victim can release (koordlet waited for the rest forever)."""
            can = {r for v in task.victims for r, q in v.release.items() if q > 0}
            return {r: q for r, q in task.to_release.items() if r in can}

        def satisfied(task: EvictTask, need: Mapping[str, float]) -> bool:
            got = result.released.get(task.target, {})
            return all(got.get(r, 0.0) >= q for r, q in need.items())

        done: set[str] = set()
        for task in live:
            need = satisfiable(task)
            missing = {r: q for r, q in task.to_release.items() if r not in need and q > 0}
            if missing:
                result.unsatisfied[task.feature] = dict(missing)
                self.audit.record(strategy=strategy, action="evict", target="", executed=False, ts=now,
                                  reason=f"{task.koordlet_reason}: no victim can release {missing} "
                                         f"(requested {dict(task.to_release)}); not evicting for it",
                                  feature=task.feature)
            if not need or satisfied(task, need):
                continue
            for victim in task.victims:
                pod = victim.pod
                if pod.uid in done:
                    continue
                if self.is_pending(pod.uid, now):
                    done.add(pod.uid)
                    add(result.released, aggregate(pod))
                    result.decisions.append(EvictDecision(pod, task.feature, "pending", False,
                                                          "already being evicted: counted as released"))
                    if satisfied(task, need):
                        break
                    continue
                refusal = self._refuse(pod, now)
                if refusal:
                    done.add(pod.uid)  # decided for this round: one audit record, not one per task
                    self._decide(strategy, task, victim, "skipped", False, refusal, result, now)
                    continue
                ok, error = self._evict(pod, task, now)
                done.add(pod.uid)
                if ok:
                    result.newly_evicted = True
                    self.evicted_total += 1
                    self.pending[pod.uid] = Pending(pod.uid, pod.key, strategy, task.feature, now,
                                                    now + self.pending_ttl)
                    add(result.released, aggregate(pod))
                    self._decide(strategy, task, victim, "evicted", not (self.dry_run or self.mode == "none"),
                                 self._reason(task, victim), result, now, error)
                    if satisfied(task, need):
                        break
                else:
                    self._decide(strategy, task, victim, "failed", False, self._reason(task, victim), result,
                                 now, error)
        self.audit.flush()
        return result

    # ------------------------------------------------------------------
    def _refuse(self, pod: PodMeta, now: float) -> str:
        if pod.qos in (QOS_LSE, QOS_LSR):
            return f"refused: {pod.key} is {pod.qos} (latency-sensitive pods are never evicted)"
        if pod.qos == QOS_LS and not pod.eviction_enabled:
            return (f"refused: {pod.key} is LS and did not opt in to eviction "
                    "(label koordinator.sh/eviction-enabled=true)")
        if pod.uid not in self.store.pods:
            return f"skipped: {pod.key} is no longer on the node"
        if now < self.backoff.get(pod.uid, 0.0):
            return f"skipped: {pod.key} waits for its eviction retry (refused earlier)"
        return ""

    @staticmethod
    def _reason(task: EvictTask, victim: Victim) -> str:
        details = ", ".join(f"{k}={v}" for k, v in victim.details.items())
        release = ", ".join(f"{r}={_amount(q)}" for r, q in victim.release.items())
        return f"{task.reason}; evict {victim.pod.key} ({details}) to release {release}".replace(" ()", "")

    def _decide(self, strategy: str, task: EvictTask, victim: Victim, action: str, executed: bool,
                reason: str, result: EvictResult, now: float, error: str | None = None) -> None:
        d = EvictDecision(victim.pod, task.feature, action, executed, reason, error)
        result.decisions.append(d)
        self.history.append(d)
        if len(self.history) > 10_000:
            del self.history[:5000]
        extra = {"feature": task.feature, "mode": "dry-run" if self.dry_run else self.mode}
        self.audit.record(strategy=strategy, action="evict", target=victim.pod.key, uid=victim.pod.uid,
                          reason=reason, executed=executed, error=error, ts=now, **extra)
        for cb in self.on_decision:
            cb(d, strategy)

    def _evict(self, pod: PodMeta, task: EvictTask, now: float) -> tuple[bool, str | None]:
        if self.dry_run or self.mode == "none":
            return True, None
        if self.mode == "kill":
            return self._kill(pod)
        assert self.api is not None
        out = self.api(pod, task.koordlet_reason)
        if out.ok:
            return True, None
        if out.retry_after > 0:
            self.backoff[pod.uid] = now + out.retry_after
        return False, out.error or "eviction refused"

    def _kill(self, pod: PodMeta) -> tuple[bool, str | None]:
        """SIGKILL every process in the pod's cgroups (containers, sandbox, the pod dir itself)."""
        pids = sorted(set(self._pids(pod)))
        if not pids:
            return True, None  # nothing runs any more: already gone
        errs = sysio.kill_batch(pids, signal.SIGKILL)
        failed = [(p, int(e)) for p, e in zip(pids, errs.tolist()) if e not in (0, 3)]  # ESRCH: exited
        if failed:
            return False, "; ".join(f"pid {p}: {os.strerror(e)}" for p, e in failed[:5])
        return True, None

    def _pids(self, pod: PodMeta) -> Iterable[int]:
        pod_dir = self.layout.pod_dir(pod.kube_qos, pod.uid)
        sub = "cpu" if self.layout.version == 1 else ""
        dirs = self.layout.dirs_up_to_depth(sub, pod_dir, 1)
        paths = [self.layout.file(sub, d, "cgroup.procs") for d in dirs]
        if not paths:
            return []
        fds = sysio.open_batch(paths, os.O_RDONLY)
        ok = fds[fds >= 0]
        try:
            data = sysio.pread_batch(ok, 1 << 20)
        finally:
            sysio.close_batch(ok)
        pids: list[int] = []
        for d in data:
            if isinstance(d, bytes):
                pids.extend(int(x) for x in d.split() if x.isdigit())
        return np.asarray(pids, dtype=np.int64).tolist()


def _amount(q: float) -> str:
    """An amount for the audit, exact: byte counts must not turn into ``1.28849e+10``."""
    return str(int(q)) if float(q).is_integer() else repr(float(q))
