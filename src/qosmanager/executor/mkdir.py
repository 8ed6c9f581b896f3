"""Directories (resctrl control groups): :meth:`Executor.mkdir <qosmanager.executor.executor.Executor.mkdir>`.

Decides whether a directory a strategy asks for is made: only its last component, only where the
strategy's own resource paths point (a ``rel`` that is empty, absolute or climbs with ``..`` is
refused with ValueError), audited as ``"action": "mkdir"`` (``target`` the display path, ``value``
the mode): once when created, once per dry run (the directory is then only remembered, see
:mod:`.dryrun`), once per distinct failure (the same errno again is not re-audited until the
directory has existed in between).  A directory already there costs one ``stat``.
"""

from __future__ import annotations

import errno
import os

from qosmanager._native import sysio
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.dryrun import DryRun
from qosmanager.executor.types import MakeDir
from qosmanager.host.roots import HostRoots


class Dirs:
    def __init__(self, roots: HostRoots, audit: AuditLog, dry: DryRun | None) -> None:
        """``dry``: the dry run's shadow (None: directories are made)."""
        self.roots = roots
        self.audit = audit
        self.dry = dry
        self.failed: dict[str, int] = {}  # directory -> errno of its last audited failure

    def mkdir(self, d: MakeDir, now: float) -> str:
        """``"exists"``, ``"created"``, ``"dry-run"`` (decided, not created) or ``"failed"``."""
        parts = d.rel.split("/")
        if not d.rel or d.rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"mkdir: bad directory {d.rel!r} (relative, no '.' or '..' components)")
        roots = self.roots
        if d.root == "cgroup":
            path, target = roots.cgroup_path(d.rel), d.rel
        elif d.root in ("proc", "sys"):
            path = roots.proc_path(d.rel) if d.root == "proc" else roots.sys_path(d.rel)
            target = f"{d.root}/{d.rel}"
        else:
            raise ValueError(f"mkdir: unknown root {d.root!r} (cgroup, proc or sys)")
        value = f"{d.mode:04o}"
        if os.path.isdir(path):
            if self.dry is not None:
                self.dry.dirs.discard(path)
            self.failed.pop(path, None)
            return "exists"
        if self.dry is not None:
            if path not in self.dry.dirs:
                self.dry.dirs.add(path)
                self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value,
                                  reason=d.reason, executed=False, ts=now)
                self.audit.flush()
            return "dry-run"
        try:
            sysio.mkdir(path, d.mode)  # through sysio: a fake host's kernel populates the new dir
        except FileExistsError:
            return "exists" if os.path.isdir(path) else self._error(d, path, target, value, now, errno.EEXIST)
        except OSError as e:
            return self._error(d, path, target, value, now, e.errno or errno.EIO)
        self.failed.pop(path, None)
        self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value, reason=d.reason,
                          executed=True, ts=now)
        self.audit.flush()
        return "created"

    def _error(self, d: MakeDir, path: str, target: str, value: str, now: float, err: int) -> str:
        if self.failed.get(path) != err:
            self.failed[path] = err
            error = f"{errno.errorcode.get(err, str(err))}: {os.strerror(err)}"
            self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value,
                              reason=d.reason, executed=False, error=error, ts=now)
            self.audit.flush()
        return "failed"
