"""What the agent knows about its node: the Node, the pods on it and the merged NodeSLO.

Sources (the standalone files, or the API server) push whole objects in; the store turns
them into the precomputed views of :mod:`qosmanager.api` *once per change* and keeps a
generation counter per kind, so consumers (discovery, strategies) notice a change with
one integer comparison per tick instead of re-reading anything.

Bad input loses nothing: a NodeSLO field with a bad value is dropped (that field only, as
koordlet does; the ``nodeslo`` degraded condition names it), a document that is not a NodeSLO
at all leaves the last good one in place and the reason in :attr:`StateStore.errors`; a pod
that cannot be understood is skipped with its reason while every other pod is kept.

No object can stop the agent: building a view never lets an exception out of the store.  A pod
that cannot be read (a bad uid, a bad quantity, or a bug in reading it) is skipped: one log line
names it when it first fails (and again only when the reason changes), every other pod is kept,
and ``errors["pods"]`` and the degraded condition ``state/pods`` list the skipped ones until they
are fixed or gone.  A pod view's warnings (an annotation that cannot be decoded, an odd label) are
logged in one line naming the pod when they first appear or change.  A Node that cannot be used
(no positive cpu capacity, or less than 1 MiB of memory) is refused: the last good Node stays in
force (condition ``state/node``); with none, nothing that needs the node runs and ``/healthz``
fails its state check saying why.
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
from qosmanager.api.pod import PodMeta, PrunedPod, pod_digest, pod_meta
from qosmanager.framework.conditions import Conditions

log = logging.getLogger(__name__)

NODESLO_CONDITION = "nodeslo"
# the pods are on their way (a big pods file decoded, the first pods list from the API server):
# StateStore.pods_loading, and this condition names what the agent waits for
PODS_LOADING_CONDITION = "state/pods-loading"


@dataclass
class SourceHealth:
    """Freshness of one kind of state, for /healthz and the metrics."""

    last_sync: float = 0.0
    last_error: str = ""
    last_error_ts: float = 0.0


@dataclass(frozen=True)
class PreparedPods:
    """A whole pod list's views (:meth:`StateStore.prepare_pods`), not yet in force."""

    pods: dict[str, PodMeta]
    bad: dict[str, tuple[str, str]]  # pod label -> (uid or "", why it was skipped)


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
    # a pods list is on its way (a big pods file decoded beside the ticks): no pods is not yet "none"
    pods_loading: bool = False
    # what the agent works around (a bad NodeSLO field, an unreadable counter, ...): /healthz and
    # /metrics list them; every part of the agent reports into this one set
    conditions: Conditions = field(default_factory=Conditions)
    health: dict[str, SourceHealth] = field(default_factory=lambda: {
        "node": SourceHealth(), "pods": SourceHealth(), "nodeslo": SourceHealth()})
    # called (agent thread) with each NodeSLO spec that differs from the last one reported
    on_nodeslo: list[Callable[[NodeSLOSpec], None]] = field(default_factory=list, repr=False)
    _nodeslo_reported: Any = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # pods skipped because they could not be read: pod label -> (uid or "", why); logged once each
    _bad_pods: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)

    # -- node ----------------------------------------------------------------
    def set_node(self, obj: Mapping[str, Any] | None, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        try:
            meta = None if obj is None else node_meta(obj)
        except Exception as e:  # a bad object (or a bug reading it) must not stop the agent
            kept = ("keeping the last good one" if self.node is not None else
                    "no Node is in force: nothing that needs the node's capacity runs")
            message = f"bad Node object, {kept}: {_reason(e)}"
            self._error("node", message, now)
            self.conditions.set("state/node", message)
            return False
        with self._lock:
            self.node = meta
            self.node_generation += 1
            self._ok("node", now)
        self.conditions.clear("state/node")
        if meta is not None and meta.warnings:
            log.warning("Node %s: %s", meta.name, "; ".join(meta.warnings))
        return True

    # -- pods ----------------------------------------------------------------
    def set_pods(self, objs: Sequence[Mapping[str, Any] | PrunedPod], now: float | None = None) -> bool:
        """Replace the pod set.  Pods whose object did not change keep their view (no re-parse);
        a pod that cannot be read is skipped (see the module docstring), never the whole set."""
        return self.commit_pods(self.prepare_pods(objs), now)

    def prepare_pods(self, objs: Sequence[Mapping[str, Any] | PrunedPod]) -> PreparedPods:
        """The views of a whole pod list, built without changing the store (another thread may build
        them: a big pods file's decode); :meth:`commit_pods` puts them in force on the agent's thread.
        Views of the pod set in force when it is called are reused where the pod did not change."""
        new: dict[str, PodMeta] = {}
        bad: dict[str, tuple[str, str]] = {}
        old = self.pods  # one reference: the map in force is never changed in place
        for i, obj in enumerate(objs):
            try:
                # compared as far as it is read (PrunedPod, pod_digest): another field's change is none
                prev = old.get(_pod_uid(obj))
                if prev is not None and prev.digest == pod_digest(obj):
                    meta = prev
                else:
                    meta = self._pod_view(obj, prev)
                if meta.uid in new:
                    raise ValueError(f"uid {meta.uid} is also the uid of pod {new[meta.uid].key}; "
                                     "kept the first")
            except Exception as e:  # one pod's input must never drop the others
                label = _pod_label(obj, i)
                bad[label] = (_pod_uid(obj), _reason(e, label))
                continue
            new[meta.uid] = meta
        return PreparedPods(new, bad)

    def commit_pods(self, prepared: PreparedPods, now: float | None = None) -> bool:
        """Put a pod list built by :meth:`prepare_pods` in force (the caller's thread is the one that
        reads the store: the map and its generation change together for every reader of the agent's
        thread); True when the pod set changed."""
        now = time.time() if now is None else now
        new = prepared.pods
        with self._lock:
            old = self.pods
            changed = new.keys() != old.keys() or any(new[u] is not old[u] for u in new)
            if changed:
                self.pods = new
                self.pods_generation += 1
            self._ok("pods", now)
            self._set_bad_pods(prepared.bad, now)
        return changed

    def upsert_pod(self, obj: Mapping[str, Any] | PrunedPod, now: float | None = None) -> bool:
        """Add or replace one pod (a watch event); True when the pod set changed.

        A pod that cannot be read is skipped like in :meth:`set_pods`: its previous view (if any)
        leaves the set, nothing is raised.
        """
        now = time.time() if now is None else now
        uid = _pod_uid(obj)
        with self._lock:
            prev = self.pods.get(uid) if uid else None
            bad = dict(self._bad_pods)
            label = _pod_label(obj)
            for key in [k for k, (u, _) in bad.items() if k == label or (uid and u == uid)]:
                del bad[key]
            try:
                meta = self._pod_view(obj, prev)
            except Exception as e:  # the watch goes on with every other pod
                bad[label] = (uid, _reason(e, label))
                changed = prev is not None
                if changed:
                    pods = dict(self.pods)
                    del pods[uid]
                    self.pods = pods
                    self.pods_generation += 1
                self._ok("pods", now)
                self._set_bad_pods(bad, now)
                return changed
            pods = dict(self.pods)
            pods[meta.uid] = meta
            self.pods = pods
            self.pods_generation += 1
            self._ok("pods", now)
            self._set_bad_pods(bad, now)
        return True

    def apply_pod_events(self, events: Mapping[str, Mapping[str, Any] | PrunedPod | None],
                         now: float | None = None) -> bool:
        """Watch events, uid -> the pod's latest object (None: deleted), applied with one copy of the
        pod map (a burst of events is one rebuild, and no source needs to keep every object to
        rebuild the whole set).  A pod that cannot be read leaves the set, as in :meth:`upsert_pod`.
        True when the pod set changed."""
        now = time.time() if now is None else now
        with self._lock:
            pods = dict(self.pods)
            bad = dict(self._bad_pods)
            changed = False
            for uid, obj in events.items():
                prev = pods.get(uid)
                for key in [k for k, (u, _) in bad.items() if u == uid or (obj is not None and k == _pod_label(obj))]:
                    del bad[key]
                if obj is None:
                    changed |= pods.pop(uid, None) is not None
                    continue
                if prev is not None and prev.digest == pod_digest(obj):
                    continue
                try:
                    meta = self._pod_view(obj, prev)
                    if meta.uid != uid:
                        raise ValueError(f"uid {meta.uid} arrived as {uid}")
                except Exception as e:  # the watch goes on with every other pod
                    label = _pod_label(obj)
                    bad[label] = (uid, _reason(e, label))
                    changed |= pods.pop(uid, None) is not None
                    continue
                pods[uid] = meta
                changed = True
            if changed:
                self.pods = pods
                self.pods_generation += 1
            self._ok("pods", now)
            self._set_bad_pods(bad, now)
        return changed

    def delete_pod(self, uid: str, now: float | None = None) -> None:
        with self._lock:
            if uid in self.pods:
                pods = dict(self.pods)
                del pods[uid]
                self.pods = pods
                self.pods_generation += 1
            self._ok("pods", time.time() if now is None else now)
            bad = {k: v for k, v in self._bad_pods.items() if v[0] != uid}
            self._set_bad_pods(bad, time.time() if now is None else now)

    @staticmethod
    def _pod_view(obj: Mapping[str, Any] | PrunedPod, prev: PodMeta | None) -> PodMeta:
        """Build a pod's view; its warnings are logged when they are new for this pod."""
        meta = pod_meta(obj)
        if meta.warnings and (prev is None or prev.warnings != meta.warnings):
            log.warning("pod %s: %s", _pod_label(obj), "; ".join(meta.warnings))
        return meta

    def _set_bad_pods(self, bad: dict[str, tuple[str, str]], now: float) -> None:
        """Log each newly skipped pod once and publish the list (errors, health, condition)."""
        for label, (_, why) in bad.items():
            if self._bad_pods.get(label, ("", ""))[1] != why:
                log.error("pod %s skipped: %s", label, why)
        self._bad_pods = bad
        if not bad:
            self.conditions.clear("state/pods")
            return
        reasons = [f"{label}: {why}" for label, (_, why) in bad.items()]
        more = f"; and {len(reasons) - 5} more" if len(reasons) > 5 else ""
        message = f"{len(reasons)} pod(s) skipped: " + "; ".join(reasons[:5]) + more
        self.errors["pods"] = message
        h = self.health["pods"]
        h.last_error, h.last_error_ts = message, now
        self.conditions.set("state/pods", message)

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


def _reason(e: BaseException, label: str = "") -> str:
    """A ValueError's own sentence (without the pod's name when the log line already says it);
    anything else (a bug) with its type, so it can be told apart."""
    if not isinstance(e, ValueError):
        return f"{type(e).__name__}: {e}"
    text = str(e)
    prefix = f"pod {label}: "
    return text[len(prefix):] if label and text.startswith(prefix) else text


def _meta_of(obj: Any) -> Mapping[str, Any]:
    if isinstance(obj, PrunedPod):
        obj = obj.object()  # a pod to name in a log line: rare
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _pod_uid(obj: Any) -> str:
    if isinstance(obj, PrunedPod):
        return obj.uid
    uid = _meta_of(obj).get("uid")
    return uid if isinstance(uid, str) else ""


def _pod_label(obj: Any, index: int | None = None) -> str:
    """How a log line names a pod that may not even be readable: namespace/name, else its uid,
    else its place in the list."""
    meta = _meta_of(obj)
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    if isinstance(name, str) and name and isinstance(namespace, str):
        return repr(f"{namespace}/{name}")[1:-1][:200]  # escaped: a name cannot forge a log line
    uid = _pod_uid(obj)
    if uid:
        return f"with uid {uid!r}"[:200]
    return "without a name or uid" if index is None else f"#{index} (without a name or uid)"
