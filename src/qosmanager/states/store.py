"""What the agent knows about its node: the Node, the pods on it and the merged NodeSLO.

Sources (the standalone files, or the API server) push whole objects in; the store turns
them into the precomputed views of :mod:`qosmanager.api` *once per change* and keeps a
generation counter per kind, so consumers (discovery, strategies) notice a change with
one integer comparison per tick instead of re-reading anything.

Bad input loses nothing: a NodeSLO field with a bad value is dropped (that field only, as
koordlet does; the ``nodeslo`` degraded condition names it), a document that is not a NodeSLO
at all leaves the last good one in place and the reason in :attr:`StateStore.errors`; a pod
that cannot be understood is skipped with its reason while every other pod is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qosmanager.api.node import NodeMeta, node_meta
from qosmanager.api.nodeslo import NodeSLOSpec, parse_nodeslo
from qosmanager.api.pod import PodMeta, pod_meta
from qosmanager.framework.conditions import Conditions

log = logging.getLogger(__name__)

NODESLO_CONDITION = "nodeslo"


@dataclass
class SourceHealth:
    """Freshness of one kind of state, for /healthz and the metrics."""

    last_sync: float = 0.0
    last_error: str = ""
    last_error_ts: float = 0.0


@dataclass
class StateStore:
    node: NodeMeta | None = None
    pods: dict[str, PodMeta] = field(default_factory=dict)
    nodeslo: NodeSLOSpec = field(default_factory=lambda: parse_nodeslo(None))
    nodeslo_present: bool = False
    node_generation: int = 0
    pods_generation: int = 0
    nodeslo_generation: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    # what the agent works around (a bad NodeSLO field, an unreadable counter, ...): /healthz and
    # /metrics list them; every part of the agent reports into this one set
    conditions: Conditions = field(default_factory=Conditions)
    health: dict[str, SourceHealth] = field(default_factory=lambda: {
        "node": SourceHealth(), "pods": SourceHealth(), "nodeslo": SourceHealth()})
    # called (agent thread) with each NodeSLO spec that differs from the last one reported
    on_nodeslo: list[Callable[[NodeSLOSpec], None]] = field(default_factory=list, repr=False)
    _nodeslo_reported: Any = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # -- node ----------------------------------------------------------------
    def set_node(self, obj: Mapping[str, Any] | None, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        try:
            meta = None if obj is None else node_meta(obj)
        except (ValueError, TypeError, KeyError) as e:
            self._error("node", f"bad Node object, keeping the last good one: {e}", now)
            return False
        with self._lock:
            self.node = meta
            self.node_generation += 1
            self._ok("node", now)
        return True

    # -- pods ----------------------------------------------------------------
    def set_pods(self, objs: Sequence[Mapping[str, Any]], now: float | None = None) -> bool:
        """Replace the pod set.  Pods whose object did not change keep their view (no re-parse)."""
        now = time.time() if now is None else now
        new: dict[str, PodMeta] = {}
        problems: list[str] = []
        old = self.pods
        for obj in objs:
            try:
                uid = obj["metadata"]["uid"]
                prev = old.get(uid)
                if prev is not None and prev.raw == obj:
                    new[uid] = prev
                    continue
                meta = pod_meta(obj)
            except (ValueError, TypeError, KeyError) as e:
                problems.append(str(e))
                continue
            new[meta.uid] = meta
        with self._lock:
            changed = new.keys() != old.keys() or any(new[u] is not old[u] for u in new)
            if changed:
                self.pods = new
                self.pods_generation += 1
            self._ok("pods", now)
        if problems:
            self._error("pods", f"{len(problems)} pod(s) skipped: " + "; ".join(problems[:5]), now)
        return changed

    def upsert_pod(self, obj: Mapping[str, Any], now: float | None = None) -> None:
        meta = pod_meta(obj)
        with self._lock:
            pods = dict(self.pods)
            pods[meta.uid] = meta
            self.pods = pods
            self.pods_generation += 1
            self._ok("pods", time.time() if now is None else now)

    def delete_pod(self, uid: str, now: float | None = None) -> None:
        with self._lock:
            if uid in self.pods:
                pods = dict(self.pods)
                del pods[uid]
                self.pods = pods
                self.pods_generation += 1
            self._ok("pods", time.time() if now is None else now)

    # -- NodeSLO -------------------------------------------------------------
    def set_nodeslo(self, obj: Mapping[str, Any] | None, now: float | None = None) -> bool:
        """Merge and validate a NodeSLO and put it in force.

        A field with a bad value is dropped (that field only): the ``nodeslo`` condition names every
        dropped field, and each problem is logged once per NodeSLO change, not on every re-read.  A
        document that is not a NodeSLO at all keeps the last good spec, says why and returns False.
        """
        now = time.time() if now is None else now
        try:
            spec = parse_nodeslo(obj)
        except ValueError as e:
            self._error("nodeslo", f"bad NodeSLO, keeping the last good one: {e}", now)
            kept = "the last good one stays in force" if self.nodeslo_present else "koordlet's defaults stay"
            standing = self.nodeslo.invalid_summary()
            self.conditions.set(NODESLO_CONDITION, f"NodeSLO refused ({e}); {kept}"
                                + (f"; in it, {standing}" if standing else ""))
            return False
        with self._lock:
            self.nodeslo = spec
            self.nodeslo_present = obj is not None
            self.nodeslo_generation += 1
            self._ok("nodeslo", now)
        summary = spec.invalid_summary()
        if summary:
            self.conditions.set(NODESLO_CONDITION, summary)
        else:
            self.conditions.clear(NODESLO_CONDITION)
        self._report_nodeslo(spec)
        return True

    def _report_nodeslo(self, spec: NodeSLOSpec) -> None:
        """Log the problems of a NodeSLO and tell ``on_nodeslo``, once per distinct NodeSLO."""
        key = (spec.invalid_fields, spec.warnings, spec.merged)
        if key == self._nodeslo_reported:
            return  # the same NodeSLO again (a file touched, a re-list): already said
        self._nodeslo_reported = key
        for w in spec.warnings:
            log.warning("NodeSLO: %s", w)
        for path, why in spec.invalid_fields:
            log.warning("NodeSLO: %s dropped: %s", path, why)
        for fn in self.on_nodeslo:
            try:
                fn(spec)
            except Exception:  # a listener must not cost the NodeSLO
                log.exception("NodeSLO listener failed")

    # -- bookkeeping ---------------------------------------------------------
    def _error(self, kind: str, message: str, now: float) -> None:
        if self.errors.get(kind) != message:
            log.error("%s", message)
        self.errors[kind] = message
        h = self.health[kind]
        h.last_error, h.last_error_ts = message, now

    def _ok(self, kind: str, now: float) -> None:
        self.health[kind].last_sync = now
        self.errors.pop(kind, None)
