"""The audit trail: one JSON object per line for every write and eviction decision.

Format (pinned by docs/interfaces.md)::

    {"ts": 1700000000.5, "strategy": "cpuSuppress", "action": "write",
     "target": "cpu/kubepods/besteffort/cpu.cfs_quota_us", "value": "120000", "old": "-1",
     "uid": null, "reason": "...", "executed": true}

``action`` is ``write``, ``evict``, ``mkdir`` (a directory made, e.g. a resctrl group: ``value``
its mode), ``kill`` (kill mode: the verified pids, in ``value``, recorded and flushed before the
first signal; the ``evict`` record after it carries the outcome), ``psi-trigger`` (a PSI trigger
registered: ``value`` its line) or ``error`` (a strategy raised).
``executed`` is false under ``--dry-run``, ``--evict-mode none``, or when the write or
eviction failed; then an ``error`` field says why.  Records are buffered and flushed
once per batch (not one syscall per record); the file rotates at ``max_bytes``
keeping ``backups`` old files, so the audit never fills the disk.

A disk that is full anyway (ENOSPC, EIO) never stops the agent: the file is written with plain
``write`` calls on an unbuffered descriptor, so a failed write leaves nothing behind to fail
again on close; the records of a failed flush are dropped and counted (``write_errors``,
``dropped``), the failure is logged once and then as a count every few minutes, and
:meth:`AuditLog.close` never raises.  A line cut short by a full disk, or by a run killed inside a
write (found when the file is opened), is ended before the next record, so every later line is
whole JSON again.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qosmanager._native import write_lines
from qosmanager.logfmt import RepeatLimiter

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

log = logging.getLogger(__name__)

FIELDS = ("ts", "strategy", "action", "target", "value", "old", "uid", "reason", "executed")

_ENCODER = json.JSONEncoder(separators=(", ", ": "), ensure_ascii=False)
_str = json.encoder.encode_basestring  # the C string escaper


def _float(v: float) -> str:
    return float.__repr__(v) if math.isfinite(v) else _ENCODER.encode(v)  # json's NaN, Infinity


# the encoder of each common value type (anything else: the json encoder); keys: their JSON text
_BY_TYPE: dict[type, Callable[[Any], str]] = {
    str: _str, type(None): lambda v: "null", bool: lambda v: "true" if v else "false", float: _float,
}
_KEYS = {k: _str(k) + ": " for k in (*FIELDS, "error")}


def _encode(rec: dict[str, Any]) -> str:
    """One JSON line, formatted directly (several times cheaper than json.dumps per record; the
    executor audits every write, so this is per-write cost of a batch)."""
    get = _BY_TYPE.get
    return "{" + ", ".join([(_KEYS.get(k) or _str(k) + ": ")
                            + (f(v) if (f := get(type(v))) is not None else _ENCODER.encode(v))
                            for k, v in rec.items()]) + "}\n"


def _encode_value(v: Any) -> str:
    """One value's JSON text, as :func:`_encode` writes it."""
    f = _BY_TYPE.get(type(v))
    return f(v) if f is not None else _ENCODER.encode(v)


class AuditLog:
    """Append-only JSON-lines audit with an in-memory tail of recent records."""

    CONDITION = "audit-log"  # the degraded condition a failing audit file raises

    def __init__(self, path: str | None = None, *, max_bytes: int = 16 << 20, backups: int = 4,
                 keep: int = 4096, clock: Callable[[], float] = time.time,
                 conditions: Conditions | None = None) -> None:
        """``path`` is opened (its directory created) now: an OSError here means it cannot be."""
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.clock = clock
        self.conditions = conditions
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.counts: dict[str, int] = {}
        self.write_errors = 0  # flushes (and rotations) that failed
        self.dropped = 0  # records lost to them
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self._size = 0
        self._fd = -1
        self._partial = False  # the last write stopped inside a line
        self._closed = False
        self._errors = RepeatLimiter(300.0, clock=time.monotonic)
        self._sinks: list[Callable[[dict[str, Any]], None]] = []
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._open()

    def _open(self) -> None:
        assert self.path
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            self._size = os.fstat(fd).st_size
        except OSError:
            self._size = 0
        self._fd = fd
        if self._size > 0:  # a run killed inside a write left a cut line: the next record starts a new one
            self._partial = self._last_byte() != b"\n"

    def _last_byte(self) -> bytes:
        assert self.path
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return b"\n"
        try:
            return os.pread(fd, 1, self._size - 1)
        except OSError:
            return b"\n"
        finally:
            os.close(fd)

    def add_sink(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Also hand every record to ``fn`` (events, metrics)."""
        self._sinks.append(fn)

    def record(self, *, strategy: str, action: str, target: str, reason: str, executed: bool,
               value: str | None = None, old: str | None = None, uid: str | None = None,
               error: str | None = None, ts: float | None = None, **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "ts": self.clock() if ts is None else ts,
            "strategy": strategy,
            "action": action,
            "target": target,
            "value": value,
            "old": old,
            "uid": uid,
            "reason": reason,
            "executed": executed,
        }
        if error is not None:
            rec["error"] = error
        rec.update(extra)
        with self._lock:
            self.recent.append(rec)
            key = f"{action}:{'ok' if executed else ('error' if error else 'skipped')}"
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.path and not self._closed:
                self._buf.append(_encode(rec))
        for sink in self._sinks:
            try:
                sink(rec)
            except Exception:  # a broken sink must not lose the audit
                log.exception("audit sink failed")
        return rec

    def writes(self, rows: list[tuple[Any, ...]]) -> None:
        """:meth:`record` of writes done (``executed``, no error), one per row of ``(strategy, target, value,
        old, uid, reason)``, in one call: the same records, lines and counts (a batch's audit).  Without
        sinks, only the records :attr:`recent` keeps are made as dicts."""
        if not rows:
            return
        clock = self.clock
        ts = [clock() for _ in rows]
        keep = len(rows) if self._sinks else min(len(rows), self.recent.maxlen or 0)
        recs = [{"ts": t, "strategy": s, "action": "write", "target": tg, "value": v, "old": o, "uid": u,
                 "reason": why, "executed": True} for t, (s, tg, v, o, u, why) in zip(ts[-keep:], rows[-keep:])]
        with self._lock:
            self.recent.extend(recs)
            self.counts["write:ok"] = self.counts.get("write:ok", 0) + len(rows)
            if self.path and not self._closed:
                self._buf.append(write_lines(ts, rows, _encode_value).decode())
        for rec in recs if self._sinks else ():
            for sink in self._sinks:
                try:
                    sink(rec)
                except Exception:  # a broken sink must not lose the audit
                    log.exception("audit sink failed")

    def flush(self) -> None:
        """Write the buffered records; a failure is counted and logged (rate-limited), never raised."""
        with self._lock:
            if not self._buf:
                return
            n = len(self._buf)
            if self._fd < 0:  # a rotation could not reopen the file: try again now
                try:
                    self._open()
                except OSError as e:
                    self._buf.clear()
                    self._failed("open", e, n)
                    return
            data = ("\n" if self._partial else "") + "".join(self._buf)
            self._buf.clear()
            try:
                self._write(data.encode())
            except OSError as e:
                self._failed("write", e, n)
                return
            self._recovered()
            if self._size >= self.max_bytes:
                try:
                    self._rotate()
                except OSError as e:
                    self._failed("rotate", e, 0)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                try:
                    k = os.write(self._fd, view[done:])
                except InterruptedError:
                    continue
                if k <= 0:  # cannot happen on a regular file; never spin on it
                    raise OSError(errno.EIO, "short write")
                done += k
        finally:
            self._size += done
            if done:  # a full disk may cut a line: end it before the next record
                self._partial = data[done - 1] != 0x0A

    def _failed(self, what: str, e: OSError, records: int) -> None:
        self.write_errors += 1
        self.dropped += records
        reason = f"{errno.errorcode.get(e.errno or 0, 'error')}: {e.strerror or e}"
        rep = self._errors.hit(what, e.errno)
        if rep is not None:
            if rep.first:
                log.error("cannot %s audit log %s: %s; %d record(s) dropped, the agent goes on", what,
                          self.path, reason, records)
            else:
                log.error("audit log %s: %s failed %s (%s); %d record(s) dropped in total", self.path, what,
                          rep.times(), reason, self.dropped)
        if self.conditions is not None:
            self.conditions.set(self.CONDITION, f"cannot {what} audit log {self.path}: {reason}; "
                                "records are dropped (counted), the agent goes on")

    def _recovered(self) -> None:
        rep = self._errors.clear("write")
        if rep is not None:
            log.warning("audit log %s writable again (after %d more failed writes)", self.path, rep.count)
        if self.conditions is not None and self.write_errors:
            self.conditions.clear(self.CONDITION)

    def _rotate(self) -> None:
        assert self.path and self._fd >= 0
        os.close(self._fd)
        self._fd = -1
        try:
            for i in range(self.backups - 1, 0, -1):
                src = f"{self.path}.{i}"
                if os.path.exists(src):
                    os.replace(src, f"{self.path}.{i + 1}")
            os.replace(self.path, f"{self.path}.1")
        finally:
            self._open()  # the same file again when a rename failed

    def reopen(self) -> None:
        """Flush to the file open now, then open ``path`` afresh (SIGHUP, after logrotate moved the
        file away: records go to the new file).  Never raises: a file that cannot be opened is tried
        again at the next flush, its records counted as dropped meanwhile, as for a failed rotation."""
        if not self.path or self._closed:
            return
        self.flush()
        with self._lock:
            if self._closed:
                return
            fd, self._fd = self._fd, -1
            self._partial = False
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as e:
                    log.error("cannot close audit log %s: %s", self.path, e.strerror or e)
            try:
                self._open()
            except OSError as e:
                self._failed("open", e, 0)

    def close(self) -> None:
        """Flush and close; never raises (the agent is stopping: nothing may turn that into a crash)."""
        if self._closed:
            return
        try:
            self.flush()
        except Exception:  # flush already handles OSError; anything else is a bug, not a reason to crash
            log.exception("audit log %s: flush on close failed", self.path)
        with self._lock:
            fd, self._fd = self._fd, -1
            self._closed = True
            self._buf.clear()
            if self.dropped:
                log.error("audit log %s: %d record(s) could not be written", self.path, self.dropped)
        if fd >= 0:
            try:
                os.close(fd)
            except OSError as e:
                log.error("cannot close audit log %s: %s", self.path, e.strerror or e)
