"""PSI triggers: :meth:`Executor.psi_trigger <qosmanager.executor.executor.Executor.psi_trigger>`.

Registering a pressure stall trigger is a write to a kernel file (``some <stall µs> <window µs>`` to a
``memory.pressure``, ``cpu.pressure`` or ``/proc/pressure/<resource>``), so it is a host change like any
other and comes through the executor: audited as ``"action": "psi-trigger"`` (``target`` the display path,
``value`` the line), and not made under ``--dry-run``.

It does not fit :meth:`Executor.apply`: the trigger lives as long as the descriptor the line was written
to, which its caller keeps and polls, and nothing in the file changes (a read shows the averages still).
So it has no write cache, no original to restore and no conflict to detect: closing the descriptor is
the whole undo, which the kernel also does when the process exits, however it exits.

Audited at each registration and each dry run (a watcher registers a file again only after its trigger
ended: its cgroup was removed), and once per distinct failure of a file (the same errno again is not
re-audited until that file has had a trigger in between; at most :data:`MAX_FAILED` files remembered).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from qosmanager._native import sysio
from qosmanager.executor.audit import AuditLog
from qosmanager.host.roots import HostRoots

REGISTERED, DRY_RUN, FAILED = "registered", "dry-run", "failed"
MAX_FAILED = 4096


@dataclass(frozen=True, slots=True)
class PressureTrigger:
    """A watcher's wish: a PSI trigger ``line`` on the pressure file at ``path`` (absolute)."""

    strategy: str  # who asks (the audit's ``strategy``)
    path: str
    line: str  # "some 5000 500000"
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TriggerResult:
    status: str  # REGISTERED, DRY_RUN or FAILED
    fd: int = -1  # the descriptor holding the trigger (REGISTERED): the caller polls and closes it
    errno: int = 0  # FAILED: why


class Triggers:
    def __init__(self, roots: HostRoots, audit: AuditLog, dry_run: bool) -> None:
        self.roots = roots
        self.audit = audit
        self.dry_run = dry_run
        self.failed: dict[str, int] = {}  # path -> errno of its last audited failure

    def target(self, path: str) -> str:
        """The display path: relative to the cgroup root, or ``proc/...``."""
        for root, prefix in ((self.roots.cgroup, ""), (self.roots.proc, "proc/")):
            if path.startswith(root.rstrip("/") + "/"):
                return prefix + os.path.relpath(path, root)
        return path

    def register(self, t: PressureTrigger, now: float) -> TriggerResult:
        target = self.target(t.path)
        if self.dry_run:
            self.audit.record(strategy=t.strategy, action="psi-trigger", target=target, value=t.line,
                              reason=t.reason, executed=False, ts=now)
            self.audit.flush()
            return TriggerResult(DRY_RUN)
        try:
            fd = sysio.psi_trigger(t.path, t.line.encode())
        except OSError as e:
            err = e.errno or errno.EIO
            if self.failed.get(t.path) != err:
                if len(self.failed) >= MAX_FAILED:
                    self.failed.clear()
                self.failed[t.path] = err
                self.audit.record(strategy=t.strategy, action="psi-trigger", target=target, value=t.line,
                                  reason=t.reason, executed=False,
                                  error=f"{errno.errorcode.get(err, str(err))}: {os.strerror(err)}", ts=now)
                self.audit.flush()
            return TriggerResult(FAILED, errno=err)
        self.failed.pop(t.path, None)
        self.audit.record(strategy=t.strategy, action="psi-trigger", target=target, value=t.line,
                          reason=t.reason, executed=True, ts=now)
        self.audit.flush()
        return TriggerResult(REGISTERED, fd=fd)


__all__ = ["DRY_RUN", "FAILED", "REGISTERED", "PressureTrigger", "TriggerResult", "Triggers"]
