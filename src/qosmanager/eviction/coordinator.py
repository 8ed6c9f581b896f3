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

Kill mode ends every process of the victim pod's cgroup subtree -- the pod dir and everything below
it, at any depth (a container that nests cgroups: systemd inside, docker-in-docker, a runtime's
sandbox or exec sessions one level down), at most :data:`MAX_KILL_DIRS` cgroups read -- and never
hits a bystander:

* cgroup v2: one write of ``1`` to the pod dir's ``cgroup.kill`` (Linux >= 5.14); the kernel sends
  SIGKILL to every process of the subtree at once, children forked during the kill included, and to
  nothing outside it.  Only ever the pod's own dir, never a QoS dir or kubepods (the executor refuses
  anything else), and not at all when the subtree holds pid 1, the agent or its parent.
* cgroup v1 (the cpu hierarchy), and v2 where ``cgroup.kill`` is missing or the write is refused:
  pid by pid.  A pid read from a ``cgroup.procs`` of the subtree is signalled only when it is > 1,
  neither the agent nor its parent, and ``<proc root>/<pid>/cgroup``, read just before, places it in
  the pod's cgroup (the process pinned by a pidfd first, so the pid cannot be reused in between).
  The subtree is read again and new processes (forked during the kill) are signalled, for up to
  :data:`KILL_ROUNDS` rounds; processes still appearing after that fail the eviction (tried again).

Lines that are not pids are skipped and counted.  Signals and the ``cgroup.kill`` write go through the
executor (:meth:`Executor.kill <qosmanager.executor.executor.Executor.kill>`): a ``kill`` audit record
naming the pids seen and how they are killed is flushed before anything is sent, ``--dry-run`` sends
nothing (it audits what it would kill), and the executor's stats count the signals.  The ``evict``
record after it carries the outcome (``kill``: ``cgroup.kill`` or ``sigkill``, ``killed``, ``rounds``,
``fallback``: why v2 signalled pid by pid).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qosmanager._native import sysio
from qosmanager.api.pod import QOS_LS, QOS_LSE, QOS_LSR, PodMeta
from qosmanager.eviction.types import EvictDecision, EvictResult, EvictTask, Victim
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor
from qosmanager.executor.kill import CGROUP_KILL, Kill
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.states.store import StateStore

log = logging.getLogger(__name__)

MODES = ("none", "kill", "api")
PID_MAX_LIMIT = 1 << 22  # the kernel's largest pid_max (64-bit)
_PID_DIGITS = len(str(PID_MAX_LIMIT))
_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
KILL_ROUNDS = 5  # pid by pid: rounds of SIGKILL while new processes appear in the pod's cgroups
KILL_PAUSE = 0.01  # seconds before the second round's scan (then 0.02, 0.03 ...): the signalled exit
MAX_KILL_DIRS = 4096  # cgroups read below a pod dir (a pod nesting more is killed only in part on v1)

_Outcome = tuple[bool, "str | None", dict[str, Any]]  # ok, error, what the evict record adds


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
                 clock: Callable[[], float] = time.time, executor: Executor | None = None,
                 pause: Callable[[float], None] = time.sleep) -> None:
        """``executor``: where kill mode's signals go (the agent's, so stats and dry run are shared;
        None: one of its own); ``pause``: how kill mode waits between its rounds."""
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
        if executor is not None and dry_run and not executor.dry_run:
            raise ValueError("a dry-run eviction coordinator needs a dry-run executor")
        self._executor = executor
        self._pause = pause
        self._no_cgroup_kill_logged = False
        self.pending: dict[str, Pending] = {}
        self.backoff: dict[str, float] = {}  # uid -> not before (a refused API eviction)
        self.evicted_total = 0
        self.garbage_pid_lines = 0  # kill mode: cgroup.procs tokens that were not pids (skipped)
        self.refused_pids = 0  # kill mode: listed in a victim's cgroup.procs, but /proc placed them elsewhere
        self.history: list[EvictDecision] = []  # bounded record for replay/simulate/tests
        self.on_decision: list[Callable[[EvictDecision, str], None]] = []

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = Executor(self.layout, self.audit, dry_run=self.dry_run, clock=self.clock)
        return self._executor

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
                ok, error, how = self._evict(strategy, pod, task, now)
                quiet = bool(how.pop("quiet", False))  # a refused kill already said: counted, not audited
                done.add(pod.uid)
                if ok:
                    result.newly_evicted = True
                    self.evicted_total += 1
                    self.pending[pod.uid] = Pending(pod.uid, pod.key, strategy, task.feature, now,
                                                    now + self.pending_ttl)
                    add(result.released, aggregate(pod))
                    self._decide(strategy, task, victim, "evicted", not (self.dry_run or self.mode == "none"),
                                 self._reason(task, victim), result, now, error, how)
                    if satisfied(task, need):
                        break
                else:
                    self._decide(strategy, task, victim, "failed", False, self._reason(task, victim), result,
                                 now, error, how, audit=not quiet)
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
                reason: str, result: EvictResult, now: float, error: str | None = None,
                how: Mapping[str, Any] | None = None, audit: bool = True) -> None:
        d = EvictDecision(victim.pod, task.feature, action, executed, reason, error)
        result.decisions.append(d)
        self.history.append(d)
        if len(self.history) > 10_000:
            del self.history[:5000]
        extra = {"feature": task.feature, "mode": "dry-run" if self.dry_run else self.mode, **(how or {})}
        if audit:
            self.audit.record(strategy=strategy, action="evict", target=victim.pod.key, uid=victim.pod.uid,
                              reason=reason, executed=executed, error=error, ts=now, **extra)
        for cb in self.on_decision:
            cb(d, strategy)

    def _evict(self, strategy: str, pod: PodMeta, task: EvictTask, now: float) -> _Outcome:
        if self.mode == "kill":
            ok, error, how = self._kill(strategy, pod, task, now)
            if self.dry_run:  # what it would kill is audited (the executor sent nothing); decided as evicted
                if error:
                    how["would_fail"] = error
                return True, None, how
            return ok, error, how
        if self.dry_run or self.mode == "none":
            return True, None, {}
        assert self.api is not None
        out = self.api(pod, task.koordlet_reason)
        if out.ok:
            return True, None, {}
        if out.retry_after > 0:
            self.backoff[pod.uid] = now + out.retry_after
        return False, out.error or "eviction refused", {}

    # ------------------------------------------------------------------ kill mode
    def _kill(self, strategy: str, pod: PodMeta, task: EvictTask, now: float) -> _Outcome:
        """SIGKILL every process of the pod's cgroup subtree (containers, sandbox, the pod dir itself,
        whatever a runtime or a container nests below them), and no other.

        cgroup v2: the pod dir's ``cgroup.kill`` ends the whole subtree at once (forks during the kill
        included); where it is missing or refused, and on v1, the pids are signalled one by one, in
        rounds until the subtree lists no process not signalled yet (children forked meanwhile) or
        :data:`KILL_ROUNDS` is reached.  Each pid is checked first: > 1, neither the agent nor its
        parent, and ``<proc>/<pid>/cgroup`` read now places it in the pod (pinned by a pidfd before
        that check, so a reused pid cannot be hit).  A pid found elsewhere is not the pod's (left
        alone, logged); one that cannot be checked fails the eviction (retried next round).  Every
        signal (and the ``cgroup.kill`` write) goes through the executor, which audits it, pids named,
        before it is sent; the ``evict`` record after it says how it ended (``kill``, ``killed``,
        ``rounds``).
        """
        try:
            pod_rel = self.layout.pod_dir(pod.kube_qos, pod.uid)
        except ValueError as e:
            return False, str(e), {}
        scan = self._scan(pod, pod_rel, first=True)
        fallback = ""
        if self.layout.version == 2 and (scan.pids or scan.capped):  # (nothing seen: nothing to kill)
            done, fallback = self._kill_cgroup(strategy, pod, task, pod_rel, scan, now)
            if done is not None:
                return done
        ok, error, extra = self._kill_rounds(strategy, pod, task, pod_rel, scan, now)
        if fallback:
            extra["fallback"] = fallback
        return ok, error, extra

    def _kill_cgroup(self, strategy: str, pod: PodMeta, task: EvictTask, pod_rel: str, scan: _Scan,
                     now: float) -> tuple[_Outcome | None, str]:
        """cgroup v2: write the pod dir's ``cgroup.kill`` (through the executor).  The outcome, or None
        and why not when the pids are to be signalled one by one instead."""
        if not os.path.exists(self.layout.file("", pod_rel, CGROUP_KILL)):
            if not self._no_cgroup_kill_logged:
                self._no_cgroup_kill_logged = True
                log.info("kill mode: %s has no %s (Linux < 5.14?): processes are signalled one by one",
                         pod_rel, CGROUP_KILL)
            return None, f"no {CGROUP_KILL} (Linux < 5.14?)"
        # the kernel kills by membership: a bystander cannot be hit.  But never where the subtree holds
        # pid 1, the agent or its parent: the pid-by-pid path refuses those and fails loudly
        me, parent = os.getpid(), os.getppid()
        forbidden = sorted({p for p in scan.pids if p <= 1 or p in (me, parent)}
                           | {p for p in (1, me, parent) if self._in_pod(p, pod_rel) == "ok"})
        if forbidden:  # said once, then counted (the executor's refusals)
            self.executor.refuse_kill(Kill(
                strategy, pod.key, pod.uid, forbidden, cgroup=pod_rel, extra={"feature": task.feature},
                reason=task.koordlet_reason), f"{pod_rel} holds pid(s) {_few(forbidden)} (init, the agent or "
                f"its parent): no {CGROUP_KILL}, each process is checked and signalled on its own", now)
            return None, f"not {CGROUP_KILL}: the pod's cgroups hold pid(s) {_few(forbidden)}"
        named: list[int] = []
        unchecked = 0
        strangers: list[int] = []
        for pid in scan.pids:
            verdict = self._in_pod(pid, pod_rel)
            if verdict == "ok":
                named.append(pid)
            elif verdict == "stranger":
                strangers.append(pid)
            elif verdict != "gone":
                unchecked += 1
        self._strangers(pod, strangers)
        extra: dict[str, Any] = {"feature": task.feature}
        if unchecked:
            extra["unchecked"] = unchecked
        if scan.capped:
            extra["dirs_capped"] = MAX_KILL_DIRS
        capped = (f"; pids named from its first {MAX_KILL_DIRS} cgroups only, the kernel ends the rest too"
                  if scan.capped else "")
        res = self.executor.kill(Kill(
            strategy, pod.key, pod.uid, named, cgroup=pod_rel, extra=extra,
            reason=f"{task.koordlet_reason}: {CGROUP_KILL} of {pod_rel}: SIGKILL every process of {pod.key} "
                   f"and below ({len(named)} seen just now){capped}"), now)
        if res.status in ("done", "dry-run"):
            return (True, None, {"kill": CGROUP_KILL, "killed": len(named)}), ""
        name = errno.errorcode.get(res.error, str(res.error))
        why = f"{CGROUP_KILL} failed: {name}: {os.strerror(res.error)}"
        log_at = logging.INFO if res.status == "unsupported" else logging.WARNING
        log.log(log_at, "kill %s: %s; its processes are signalled one by one", pod.key, why)
        return None, why

    def _kill_rounds(self, strategy: str, pod: PodMeta, task: EvictTask, pod_rel: str, scan: _Scan,
                     now: float) -> _Outcome:
        """Check and SIGKILL the pids one by one, in rounds (see :meth:`_kill`)."""
        decided: set[int] = set()  # signalled, or left alone for good (strangers, unchecked)
        held: dict[int, int] = {}  # signalled pid -> its pidfd (-1: none): exited, or still dying?
        problems: list[str] = []
        never: list[int] = []  # pid 1, the agent, its parent: refused every round while they are there
        killed = rounds = 0
        capped = scan.capped
        try:
            for rnd in range(1, KILL_ROUNDS + 2):
                if rnd > 1:
                    self._pause(KILL_PAUSE * (rnd - 1))
                    scan = self._scan(pod, pod_rel, first=False)
                    capped = capped or scan.capped
                fresh = [p for p in scan.pids if p not in decided or _exited(held.get(p, -1))]
                if not fresh:
                    break
                if rnd > KILL_ROUNDS:
                    problems.append(f"processes still appear in {pod_rel} after {KILL_ROUNDS} rounds of "
                                    f"SIGKILL (pids {_few(fresh)}): a fork loop? tried again next round")
                    break
                targets: list[tuple[int, int]] = []  # (pid, pidfd or -1)
                strangers: list[int] = []
                try:
                    for pid in fresh:
                        old = held.pop(pid, None)
                        if old is not None and old >= 0:
                            os.close(old)  # that process exited: the pid is another's now
                        decided.add(pid)
                        verdict, fd = self._check(pid, pod_rel)
                        if verdict == "ok":
                            targets.append((pid, fd))
                        elif verdict == "stranger":
                            strangers.append(pid)
                        elif verdict != "gone":
                            problems.append(f"pid {pid}: {verdict}")
                            if pid <= 1 or pid in (os.getpid(), os.getppid()):
                                never.append(pid)
                    self._strangers(pod, strangers)
                    if targets:
                        rounds = rnd
                        extra: dict[str, Any] = {"feature": task.feature, "round": rnd}
                        if scan.capped:
                            extra["dirs_capped"] = MAX_KILL_DIRS
                        more = " more" if rnd > 1 else ""
                        res = self.executor.kill(Kill(
                            strategy, pod.key, pod.uid, [p for p, _ in targets], [fd for _, fd in targets],
                            extra=extra,
                            reason=f"{task.koordlet_reason}: SIGKILL {len(targets)}{more} processes of "
                                   f"{pod.key}, each found in {pod_rel} just now"
                                   + (f" (round {rnd})" if rnd > 1 else "")), now)
                        killed += res.sent
                        for pid, err in res.errors.items():
                            if err != errno.ESRCH:  # ESRCH: it exited meanwhile
                                problems.append(f"pid {pid}: {os.strerror(err)}")
                finally:
                    for pid, fd in targets:
                        held[pid] = fd  # kept open: the next round tells this process from a pid reuse
                if not targets or self.executor.dry_run:
                    break  # nothing was sent: the next scan would find the same
        finally:
            for fd in held.values():
                if fd >= 0:
                    os.close(fd)
        if capped:
            problems.append(f"{pod_rel} holds more than {MAX_KILL_DIRS} cgroups: the processes of those "
                            "beyond were not signalled")
        extra = {"kill": "sigkill", "killed": killed, "rounds": rounds}
        if problems:
            if never and len(never) == len(problems):  # only those refused: said once, then counted
                first = self.executor.refuse_kill(Kill(
                    strategy, pod.key, pod.uid, sorted(never), extra={"feature": task.feature},
                    reason=task.koordlet_reason), "; ".join(problems), now)
                extra["quiet"] = not first
            else:
                for p in problems:
                    log.warning("kill %s: %s", pod.key, p)
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            return False, "; ".join(problems[:5]) + more, extra
        return True, None, extra

    def _strangers(self, pod: PodMeta, strangers: list[int]) -> None:
        if strangers:
            self.refused_pids += len(strangers)
            log.warning("kill %s: pids %s are listed in its cgroup.procs but %s/<pid>/cgroup places them "
                        "elsewhere; not signalled", pod.key, _few(strangers), self.layout.roots.proc)

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
            if _exited(fd):  # a zombie: nothing left to kill
                os.close(fd)
                return "gone", -1
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

    def _scan(self, pod: PodMeta, pod_rel: str, *, first: bool) -> _Scan:
        """The pids in the ``cgroup.procs`` of the pod's dir and every cgroup below it (v1: the cpu
        hierarchy), at most :data:`MAX_KILL_DIRS` cgroups; a line that is not a pid (garbage, out of
        range) is skipped (counted and logged on the ``first`` scan of a kill), never raises."""
        sub = "cpu" if self.layout.version == 1 else ""
        dirs, capped = self.layout.subtree(sub, pod_rel, MAX_KILL_DIRS)
        if capped and first:
            log.warning("kill %s: %s holds more than %d cgroups; only the first %d are read", pod.key,
                        pod_rel, MAX_KILL_DIRS, MAX_KILL_DIRS)
        if not dirs:
            return _Scan([], capped)
        fds = sysio.open_batch([self.layout.file(sub, d, "cgroup.procs") for d in dirs], os.O_RDONLY)
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
        if bad and first:
            self.garbage_pid_lines += bad
            log.warning("kill %s: skipped %d lines of its cgroup.procs that are not pids", pod.key, bad)
        return _Scan(sorted(pids), capped)


@dataclass(slots=True)
class _Scan:
    pids: list[int]
    capped: bool  # the subtree holds more cgroups than were read


def _exited(pidfd: int) -> bool:
    """Whether the process a pidfd pins has exited (a pidfd turns readable then); False without one."""
    if pidfd < 0:
        return False
    poller = select.poll()  # (not select(): the agent's descriptors go far beyond FD_SETSIZE)
    poller.register(pidfd, select.POLLIN)
    try:
        return bool(poller.poll(0))
    except OSError:
        return False


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
