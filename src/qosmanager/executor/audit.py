"""The audit trail: one JSON object per line for every write and eviction decision.

Format (pinned by interfaces.md)::

    {"ts": 1700000000.5, "strategy": "cpuSuppress", "action": "write",
     "target": "cpu/kubepods/besteffort/cpu.cfs_quota_us", "value": "120000", "old": "-1",
     "uid": null, "reason": "...", "executed": true}

``action`` is ``write``, ``evict``, ``mkdir`` (a directory made, e.g. a resctrl group: ``value``
its mode), ``kill`` (kill mode: the verified pids, in ``value``, recorded and flushed before the
first signal; the ``evict`` record after it carries the outcome) or ``error`` (a strategy raised).
``executed`` is false under ``--dry-run``, ``--evict-mode none``, or when the write or
eviction failed; then an ``error`` field says why.  Records are buffered and flushed
once per batch (not one syscall per record); the file rotates at ``max_bytes``
keeping ``backups`` old files, so the audit never fills the disk.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

log = logging.getLogger(__name__)

FIELDS = ("ts", "strategy", "action", "target", "value", "old", "uid", "reason", "executed")

_ENCODER = json.JSONEncoder(separators=(", ", ": "), ensure_ascii=False)
_str = json.encoder.encode_basestring  # the C string escaper


def _val(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _str(v)
    return _ENCODER.encode(v)


def _encode(rec: dict[str, Any]) -> str:
    """One JSON line, formatted directly (several times cheaper than json.dumps per record)."""
    return "{" + ", ".join(_str(k) + ": " + _val(v) for k, v in rec.items()) + "}\n"


class AuditLog:
    """Append-only JSON-lines audit with an in-memory tail of recent records."""

    def __init__(self, path: str | None = None, *, max_bytes: int = 16 << 20, backups: int = 4,
                 keep: int = 4096, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.clock = clock
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.counts: dict[str, int] = {}
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self._size = 0
        self._fh: TextIO | None = None
        self._sinks: list[Callable[[dict[str, Any]], None]] = []
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._open()

    def _open(self) -> None:
        assert self.path
        fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - long-lived handle
        self._fh = fh
        self._size = fh.tell()

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
            if self._fh is not None:
                self._buf.append(_encode(rec))
        for sink in self._sinks:
            try:
                sink(rec)
            except Exception:  # a broken sink must not lose the audit
                log.exception("audit sink failed")
        return rec

    def flush(self) -> None:
        with self._lock:
            if self._fh is None or not self._buf:
                return
            data = "".join(self._buf)
            self._buf.clear()
            try:
                self._fh.write(data)
                self._fh.flush()
            except OSError as e:
                log.error("cannot write audit log %s: %s", self.path, e)
                return
            self._size += len(data.encode())
            if self._size >= self.max_bytes:
                self._rotate()

    def _rotate(self) -> None:
        assert self.path and self._fh is not None
        self._fh.close()
        for i in range(self.backups - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._open()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
