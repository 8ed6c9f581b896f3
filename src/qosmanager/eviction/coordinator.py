"""The eviction coordinator: one queue for every strategy (koordlet-qos §2.8, with fixes).

``execute(strategy, tasks, now)`` walks the tasks in order (koordlet's ``KillAndEvictPods``):
for each task not yet satisfied it evicts down the task's victim list until what was released
covers what the task asked for.  What a pod releases is aggregated over every task with the same
target (resource-wise maximum, as koordlet), so one eviction can satisfy several tasks.

Pending release: a pod already being evicted (by any strategy, in this round or an earlier one)
counts as released -- credited before any new victim is picked, wherever it sits in the task's
order -- and is never evicted twice; it stays pending until it is gone from the pod
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

Kill mode never hits a bystander: a pid read from the pod's ``cgroup.procs`` is signalled only when
it is > 1, neither the agent nor its parent, and ``<proc root>/<pid>/cgroup``, read just before,
places it in the pod's cgroup (the process pinned by a pidfd first, so the pid cannot be reused
in between).  Lines that are not pids are skipped and counted.  A ``kill`` audit record naming the
pids is flushed before the first signal; the ``evict`` record after it carries the outcome.
:meth:`EvictionCoordinator._signal` is the only place the agent sends a signal.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from qosmanager._native import sysio
from qosmanager.api.pod import QOS_LS, QOS_LSE, QOS_LSR, PodMeta
from qosmanager.eviction.types import EvictDecision, EvictResult, EvictTask, Victim
from qosmanager.executor.audit import AuditLog
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.states.store import StateStore

log = logging.getLogger(__name__)

MODES = ("none", "kill", "api")
PID_MAX_LIMIT = 1 << 22  # the kernel's largest pid_max (64-bit)
_PID_DIGITS = len(str(PID_MAX_LIMIT))
_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


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
        self.garbage_pid_lines = 0  # kill mode: cgroup.procs tokens that were not pids (skipped)
        self.refused_pids = 0  # kill mode: listed in a victim's cgroup.procs, but /proc placed them elsewhere
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
            # Pending victims first, wherever they sit in the order: a killed pod's usage is 0, so it
            # sorts last by usage, and crediting it only there would evict the pods before it anyway.
            for victim in task.victims:
                pod = victim.pod
                if pod.uid not in done and self.is_pending(pod.uid, now):
                    done.add(pod.uid)
                    add(result.released, aggregate(pod))
                    result.decisions.append(EvictDecision(pod, task.feature, "pending", False,
                                                          "already being evicted: counted as released"))
                    if satisfied(task, need):
                        break
            if satisfied(task, need):
                continue
            for victim in task.victims:
                pod = victim.pod
                if pod.uid in done:
                    continue
                refusal = self._refuse(pod, now)
                if refusal:
                    done.add(pod.uid)  # decided for this round: one audit record, not one per task
                    self._decide(strategy, task, victim, "skipped", False, refusal, result, now)
                    continue
                ok, error = self._evict(strategy, pod, task, now)
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

    def _evict(self, strategy: str, pod: PodMeta, task: EvictTask, now: float) -> tuple[bool, str | None]:
        if self.dry_run or self.mode == "none":
            return True, None
        if self.mode == "kill":
            return self._kill(strategy, pod, task, now)
        assert self.api is not None
        out = self.api(pod, task.koordlet_reason)
        if out.ok:
            return True, None
        if out.retry_after > 0:
            self.backoff[pod.uid] = now + out.retry_after
        return False, out.error or "eviction refused"

    # ------------------------------------------------------------------ kill mode
    def _kill(self, strategy: str, pod: PodMeta, task: EvictTask, now: float) -> tuple[bool, str | None]:
        """SIGKILL every process in the pod's cgroups (containers, sandbox, the pod dir itself), and no other.

        Each pid listed in a ``cgroup.procs`` is checked first: it must be > 1, neither the agent nor its
        parent, and ``<proc>/<pid>/cgroup`` read now must place it in the pod's cgroup.  The process is
        pinned by a pidfd before that check where the kernel has them, so a pid reused in between cannot
        be hit.  A pid found in another cgroup is not the pod's (left alone, logged); one that cannot be
        checked fails the eviction (retried next round).  The ``kill`` audit record naming the pids is on
        disk before the first signal; the ``evict`` record after it says how it ended.
        """
        try:
            pod_rel = self.layout.pod_dir(pod.kube_qos, pod.uid)
        except ValueError as e:
            return False, str(e)
        pids = self._pids(pod, pod_rel)
        targets: list[tuple[int, int]] = []  # (pid, pidfd or -1)
        problems: list[str] = []
        strangers: list[int] = []
        try:
            for pid in pids:
                verdict, fd = self._check(pid, pod_rel)
                if verdict == "ok":
                    targets.append((pid, fd))
                elif verdict == "stranger":
                    strangers.append(pid)
                elif verdict != "gone":
                    problems.append(f"pid {pid}: {verdict}")
            if strangers:
                self.refused_pids += len(strangers)
                log.warning("kill %s: pids %s are listed in its cgroup.procs but %s/<pid>/cgroup places them "
                            "elsewhere; not signalled", pod.key, _few(strangers), self.layout.roots.proc)
            if targets:
                self.audit.record(strategy=strategy, action="kill", target=pod.key, uid=pod.uid,
                                  value=" ".join(str(p) for p, _ in targets), executed=False, ts=now,
                                  reason=f"{task.koordlet_reason}: SIGKILL {len(targets)} processes of "
                                         f"{pod.key}, each found in {pod_rel} just now",
                                  feature=task.feature, stage="before-signal")
                self.audit.flush()  # on disk before the first signal
            for pid, fd in targets:
                err = self._signal(pid, fd)
                if err not in (0, errno.ESRCH):  # ESRCH: it exited meanwhile
                    problems.append(f"pid {pid}: {os.strerror(err)}")
        finally:
            for _, fd in targets:
                if fd >= 0:
                    os.close(fd)
        if problems:
            for p in problems:
                log.warning("kill %s: %s", pod.key, p)
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            return False, "; ".join(problems[:5]) + more
        return True, None

    def _check(self, pid: int, pod_rel: str) -> tuple[str, int]:
        """``("ok", pidfd or -1)`` when ``pid`` may be signalled as one of the pod's, else why not:
        ``"gone"`` (exited), ``"stranger"`` (in another cgroup) or a sentence (cannot be checked)."""
        if pid <= 1:
            return "pid 1 and below are never signalled", -1
        if pid == os.getpid():
            return "the agent itself is never signalled", -1
        if pid == os.getppid():
            return "the agent's parent is never signalled", -1
        fd = -1
        if _PIDFD:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                return "gone", -1
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    return f"cannot pin the process: {e.strerror}", -1
        verdict = self._in_pod(pid, pod_rel)
        if verdict != "ok" and fd >= 0:
            os.close(fd)
            fd = -1
        return verdict, fd

    def _in_pod(self, pid: int, pod_rel: str) -> str:
        path = self.layout.roots.proc_path(f"{pid}/cgroup")
        try:
            with open(path, "rb") as f:
                text = f.read(1 << 16).decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            return "gone"
        except OSError as e:
            return f"cannot read {path}: {e.strerror}"
        where = proc_cgroup_path(text, self.layout.version)
        if where is None:
            hierarchy = "the cpu hierarchy" if self.layout.version == 1 else "the unified hierarchy (0::)"
            return f"{path} has no line for {hierarchy}"
        return "ok" if in_cgroup(where, pod_rel) else "stranger"

    def _signal(self, pid: int, pidfd: int) -> int:
        """The one place a signal is sent: SIGKILL through the pidfd (or by pid where there are none);
        0 or the errno."""
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError as e:
            return e.errno or errno.EIO
        return 0

    def _pids(self, pod: PodMeta, pod_rel: str) -> list[int]:
        """The pids in the ``cgroup.procs`` of the pod's dir and its children; a line that is not a pid
        (garbage, out of range) is skipped and counted, never raises."""
        sub = "cpu" if self.layout.version == 1 else ""
        dirs = self.layout.dirs_up_to_depth(sub, pod_rel, 1)
        paths = [self.layout.file(sub, d, "cgroup.procs") for d in dirs]
        if not paths:
            return []
        fds = sysio.open_batch(paths, os.O_RDONLY)
        ok = fds[fds >= 0]
        try:
            data = sysio.pread_batch(ok, 1 << 20)
        finally:
            sysio.close_batch(ok)
        pids: set[int] = set()
        bad = 0
        for d in data:
            if isinstance(d, bytes):
                got, n_bad = parse_pids(d)
                pids.update(got)
                bad += n_bad
        if bad:
            self.garbage_pid_lines += bad
            log.warning("kill %s: skipped %d lines of its cgroup.procs that are not pids", pod.key, bad)
        return sorted(pids)


def parse_pids(data: bytes) -> tuple[list[int], int]:
    """``cgroup.procs`` content -> (pids, count of tokens that are not a pid in 1..PID_MAX_LIMIT).

    Each token is checked for length before it is converted: a 50-digit line costs nothing and never
    overflows a fixed-width integer (where it could wrap into pid 1 or -1, "every process")."""
    pids: list[int] = []
    bad = 0
    for tok in data.split():
        if tok.isdigit() and len(tok) <= _PID_DIGITS:
            pid = int(tok)
            if 0 < pid <= PID_MAX_LIMIT:
                pids.append(pid)
                continue
        bad += 1
    return pids, bad


def proc_cgroup_path(text: str, version: int) -> str | None:
    """The path ``/proc/<pid>/cgroup`` gives for the hierarchy kill mode reads pids from: on v1 the
    line whose controllers include ``cpu`` (each hierarchy has its own line), on v2 the ``0::`` line."""
    for line in text.splitlines():
        hid, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep and sep2):
            continue
        if version == 2:
            if hid == "0" and not controllers:
                return path
        elif "cpu" in controllers.split(","):
            return path
    return None


def in_cgroup(path: str, pod_rel: str) -> bool:
    """Whether a ``/proc/<pid>/cgroup`` path lies in the pod's dir (or below).

    The path counts from the hierarchy's root (or the reader's cgroup-namespace root, with ``..``
    components); the agent's cgroup root may be mounted further down.  So the pod dir's components
    (which end in the pod's UID) must appear as one contiguous run in the path."""
    parts = [p for p in path.strip().split("/") if p]
    want = [p for p in pod_rel.split("/") if p]
    n = len(want)
    if not n:
        return False
    return any(parts[i:i + n] == want for i in range(len(parts) - n + 1))


def _few(pids: Sequence[int]) -> str:
    return ", ".join(map(str, pids[:10])) + (f" (and {len(pids) - 10} more)" if len(pids) > 10 else "")


def _amount(q: float) -> str:
    """An amount for the audit, exact: byte counts must not turn into ``1.28849e+10``."""
    return str(int(q)) if float(q).is_integer() else repr(float(q))
