"""Signals and ``cgroup.kill``: the executor's part of kill-mode eviction.

The eviction coordinator finds a victim pod's processes and checks each one (see
:mod:`qosmanager.eviction.coordinator`); what reaches the host goes through here, like every other
change, so ``--dry-run`` sends nothing and the audit sees all of it:

* a :class:`Kill` with ``cgroup`` set (cgroup v2) writes ``1`` to that cgroup's ``cgroup.kill``:
  the kernel (Linux >= 5.14) sends SIGKILL to every process of the subtree at once, children forked
  meanwhile included.  Only a pod's own dir is accepted (:class:`ValueError` for anything else: a
  QoS dir, kubepods, a container): the write ends everything below it.  A file that is missing
  (an older kernel) or a write the kernel refuses comes back as ``"unsupported"`` or ``"failed"``
  with its errno; the caller falls back to signalling pid by pid;
* without ``cgroup``, SIGKILL goes to each pid, through its pidfd where the caller pinned the
  process with one (a pid reused in between cannot be hit), else by pid.  pid 1 and below, the agent
  and its parent are refused here once more (``EPERM``), whatever the caller checked.

Each request is audited (``"action": "kill"``, ``value`` the pids seen, ``how`` ``cgroup.kill`` or
``sigkill``) and the record flushed to disk *before* anything is sent; a ``cgroup.kill`` write that
fails is audited again with its error.  Under a dry run the record says ``"stage": "dry-run"`` and
nothing is sent.  :attr:`ExecutorStats.signals <qosmanager.executor.types.ExecutorStats>` counts
the signals sent, ``cgroup_kills`` the ``cgroup.kill`` writes.

A kill the caller refuses every round (the pod's cgroups hold pid 1, the agent or its parent: those
are never signalled) is said through :class:`Refusals` (:meth:`Executor.refuse_kill
<qosmanager.executor.executor.Executor.refuse_kill>`): logged and audited (``"stage": "refused"``) the
first time, then counted in ``ExecutorStats.kills_refused`` and summed up with a ``repeats`` count at
most every ``repeat_seconds``, not one warning and one record per round.

What it needs of the executor is :class:`KillDoor` (the executor is one; this module does not import
it).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.types import ExecutorStats
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.logfmt import Repeat, RepeatLimiter

log = logging.getLogger(__name__)

CGROUP_KILL = "cgroup.kill"
# a cgroup.kill write failing with one of these means "not on this kernel / not for this cgroup"
UNSUPPORTED = frozenset({errno.ENOENT, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS,
                         errno.ERANGE})


class KillDoor(Protocol):
    """What a kill needs of the executor: its layout, audit, clock, dry-run switch, counters and the one
    place a signal is sent."""

    layout: CgroupLayout
    audit: AuditLog
    clock: Callable[[], float]
    dry_run: bool
    stats: ExecutorStats

    def _signal(self, pid: int, pidfd: int) -> int: ...


@dataclass(slots=True)
class Kill:
    """SIGKILL the processes of a pod: every one in ``cgroup``'s subtree by its ``cgroup.kill``
    (cgroup v2), or ``pids`` one by one (``pidfds``, where given, the same length: the pinned
    process or -1).  ``pids`` are named in the audit either way: those seen just before."""

    strategy: str
    target: str  # the pod, namespace/name
    uid: str | None
    pids: Sequence[int]
    pidfds: Sequence[int] = ()
    cgroup: str = ""  # the pod's own dir (relative): kill it whole with cgroup.kill
    reason: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # more fields of the audit record


@dataclass(slots=True)
class KillResult:
    how: str  # "cgroup.kill" or "sigkill"
    status: str  # "done" | "dry-run" | "unsupported" (cgroup.kill missing or refused as such) | "failed"
    error: int = 0  # the errno of a cgroup.kill write that failed
    errors: dict[int, int] = field(default_factory=dict)  # sigkill: pid -> errno of a signal not sent
    sent: int = 0  # signals sent


def kill(ex: KillDoor, k: Kill, now: float | None = None) -> KillResult:
    """:meth:`Executor.kill`: see the module docstring."""
    now = ex.clock() if now is None else now
    if k.cgroup:
        return _cgroup_kill(ex, k, now)
    if k.pidfds and len(k.pidfds) != len(k.pids):
        raise ValueError(f"kill {k.target}: {len(k.pids)} pids but {len(k.pidfds)} pidfds")
    fds = list(k.pidfds) if k.pidfds else [-1] * len(k.pids)
    _before(ex, k, "sigkill", now, pidfd=bool(fds) and all(fd >= 0 for fd in fds))
    res = KillResult("sigkill", "dry-run" if ex.dry_run else "done")
    if ex.dry_run:
        return res
    me, parent = os.getpid(), os.getppid()
    for pid, fd in zip(k.pids, fds):
        if pid <= 1 or pid in (me, parent):
            res.errors[pid] = errno.EPERM  # never: init, the agent, its parent
            continue
        err = ex._signal(pid, fd)
        if err:
            res.errors[pid] = err
        else:
            res.sent += 1
    ex.stats.signals += res.sent
    return res


def _cgroup_kill(ex: KillDoor, k: Kill, now: float) -> KillResult:
    layout = ex.layout
    parsed = layout.parse_pod_dir(k.cgroup) if layout.version == 2 else None
    if (parsed is None or layout.pod_dir(*parsed) != k.cgroup
            or (k.uid is not None and parsed[1] != k.uid)):
        raise ValueError(f"cgroup.kill is written only in a pod's own dir on cgroup v2, not in {k.cgroup!r}"
                         + (f" (pod {k.uid})" if k.uid else ""))
    path = layout.file("", k.cgroup, CGROUP_KILL)
    if not os.path.exists(path):
        return KillResult("cgroup.kill", "unsupported", errno.ENOENT)
    display = os.path.relpath(path, layout.roots.cgroup)
    _before(ex, k, "cgroup.kill", now, file=display)
    if ex.dry_run:
        return KillResult("cgroup.kill", "dry-run")
    try:
        write_cgroup_kill(path)
    except OSError as e:
        err = e.errno or errno.EIO
        status = "unsupported" if err in UNSUPPORTED else "failed"
        ex.audit.record(strategy=k.strategy, action="kill", target=k.target, uid=k.uid, value="1",
                        executed=False, ts=now, reason=k.reason, how="cgroup.kill", file=display,
                        stage=status, error=f"{errno.errorcode.get(err, str(err))}: {os.strerror(err)}",
                        **k.extra)
        ex.audit.flush()
        return KillResult("cgroup.kill", status, err)
    ex.stats.cgroup_kills += 1
    return KillResult("cgroup.kill", "done")


def _before(ex: KillDoor, k: Kill, how: str, now: float, **fields: Any) -> None:
    """The audit record of what is about to be sent, on disk before it is."""
    ex.audit.record(strategy=k.strategy, action="kill", target=k.target, uid=k.uid,
                    value=" ".join(map(str, k.pids)), executed=False, ts=now, reason=k.reason, how=how,
                    stage="dry-run" if ex.dry_run else "before-signal", **fields, **k.extra)
    ex.audit.flush()


class Refusals:
    """Kills refused every round: said once, then counted (see the module docstring)."""

    def __init__(self, audit: AuditLog, stats: ExecutorStats, repeat_seconds: float,
                 clock: Callable[[], float]) -> None:
        self.audit = audit
        self.stats = stats
        self.repeats = RepeatLimiter(repeat_seconds, clock=clock)

    def refuse(self, k: Kill, why: str, now: float) -> bool:
        """``k`` is not sent, because of ``why``; True the first time (said in full), False for a
        repeat (counted; summed up at most every ``repeat_seconds``)."""
        self.stats.kills_refused += 1
        key = (k.target, "cgroup.kill" if k.cgroup else "sigkill")
        rep = self.repeats.hit(key, why, (k, why), now)
        if rep is not None:
            self._say(rep, k, why, now)
        for _, (dk, dwhy), drep in self.repeats.due(now):
            self._say(drep, dk, dwhy, now)
        return rep is not None and rep.first

    def _say(self, rep: Repeat, k: Kill, why: str, now: float) -> None:
        times = "" if rep.first else f" ({rep.times()})"
        log.warning("kill %s refused%s: %s", k.target, times, why)
        fields: dict[str, Any] = {} if rep.first else {"repeats": rep.count}
        self.audit.record(strategy=k.strategy, action="kill", target=k.target, uid=k.uid,
                          value=" ".join(map(str, k.pids)), executed=False, ts=now, reason=k.reason,
                          how="cgroup.kill" if k.cgroup else "sigkill", stage="refused", error=why,
                          **fields, **k.extra)
        self.audit.flush()


def write_cgroup_kill(path: str) -> None:
    """``1`` into a ``cgroup.kill``: SIGKILL to every process of that cgroup and below."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)


def send_sigkill(pid: int, pidfd: int) -> int:
    """SIGKILL through the pidfd (or by pid where there is none); 0 or the errno."""
    try:
        if pidfd >= 0:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError as e:
        return e.errno or errno.EIO
    return 0
