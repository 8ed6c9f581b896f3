"""Degraded conditions: what the agent works around, named so an operator can see it.

The agent keeps protecting the node through many faults (a NodeSLO with a bad field, a node CPU
counter it cannot read, a kube QoS cgroup that never appeared, a state file that fails).  Each such
fault is a *condition*: a stable key (``"nodeslo"``, ``"cpuSuppress/node-cpu"``,
``"collector/qos-cgroups"``, ...) and a sentence saying what is wrong and what the agent does about
it.  Whoever notices the fault :meth:`~Conditions.set`\\ s it and clears it when it is gone; the
``/healthz`` body lists every active condition (status ``degraded``, still 200: the node is
protected) and ``/metrics`` exports ``qosmanager_degraded{condition}``.

:meth:`Conditions.set` answers whether the condition is new or its sentence changed, so a caller
logs a standing fault once, not every tick.  All methods are safe to call from any thread.

A *note* (:meth:`Conditions.note`) is informational: something the agent does differently on this host
and is right to (no PSI on the kernel, so the memory levels wake by their counters alone).  ``/healthz``
lists notes under ``info``; they do not make the agent degraded and are not in ``qosmanager_degraded``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    message: str
    since: float  # wall time the condition (with this message) was first set


class Conditions:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._active: dict[str, Condition] = {}
        self._notes: dict[str, Condition] = {}

    def set(self, key: str, message: str) -> bool:
        """Raise (or restate) ``key``; True when it is new or its message changed."""
        with self._lock:
            old = self._active.get(key)
            if old is not None and old.message == message:
                return False
            self._active[key] = Condition(key, message, self._clock())
            return True

    def clear(self, key: str) -> bool:
        """Drop ``key``; True when it was active."""
        with self._lock:
            return self._active.pop(key, None) is not None

    def clear_prefix(self, prefix: str) -> None:
        """Drop every key starting with ``prefix`` (a source that re-reports all its faults at once)."""
        with self._lock:
            for key in [k for k in self._active if k.startswith(prefix)]:
                del self._active[key]

    def get(self, key: str) -> Condition | None:
        with self._lock:
            return self._active.get(key)

    def snapshot(self) -> dict[str, Condition]:
        with self._lock:
            return dict(self._active)

    def note(self, key: str, message: str) -> bool:
        """Raise (or restate) the informational note ``key``; True when it is new or its message changed."""
        with self._lock:
            old = self._notes.get(key)
            if old is not None and old.message == message:
                return False
            self._notes[key] = Condition(key, message, self._clock())
            return True

    def clear_note(self, key: str) -> bool:
        with self._lock:
            return self._notes.pop(key, None) is not None

    def notes(self) -> dict[str, Condition]:
        with self._lock:
            return dict(self._notes)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._active)

    def __len__(self) -> int:
        with self._lock:
            return len(self._active)
