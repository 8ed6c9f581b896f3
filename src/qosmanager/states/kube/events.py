"""Kubernetes Events (core/v1) for what the agent does to pods and to the node.

:class:`EventRecorder` never blocks the agent: :meth:`EventRecorder.record` puts the event on a
bounded queue (a full queue drops it and counts the drop) and a background thread posts it.
Like client-go's recorder it

* correlates: the same involved object, type, reason and message again within ``dedup_window``
  (10 minutes) PATCHes the existing Event's ``count`` and ``lastTimestamp`` instead of creating a
  new one (and creates a new one if that Event is gone);
* rate-limits per involved object with a token bucket (client-go's spam filter: a burst of 25,
  then one event per 5 minutes), so a pod refused every tick cannot flood the API server.

What is recorded (wired by the agent):

* every eviction decision of the coordinator on the pod (:func:`eviction_event`):
  ``EvictPodSuccess`` (evicted through the API), ``EvictPodFail`` (the API failed or refused,
  e.g. 429 from a PodDisruptionBudget), ``EvictPodRefused`` (the agent refused to evict it for
  safety: LSE/LSR, or LS without the opt-in label); with the strategy, the koordlet feature and
  the numbers the coordinator gave;
* cpuSuppress writes that change the BE limit on the Node (:class:`BELimitEvents`), reason
  ``AdjustBEByNodeCPUUsage``, at most one per minute per kind of change (quota, cpuset); changes
  within the minute are folded into the next Event, "from <first old> to <latest new>";
* a NodeSLO with fields the agent dropped (:class:`NodeSLOEvents`): one Warning on the Node per
  NodeSLO change, reason ``InvalidNodeSLOFields``, naming every dropped field and why;
* a file another writer keeps changing back (:class:`WriteConflictEvents`): a Warning on the Node,
  reason ``WriteConflict``, naming the file, the two values and the strategy; conflicts of one resource
  that start within a minute are folded into one Event ("... and 41 more files"), so a fight over every
  pod's quota cannot use up the Node's event budget.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qosmanager.api.nodeslo import NodeSLOSpec
from qosmanager.api.pod import PodMeta
from qosmanager.eviction.types import EvictDecision
from qosmanager.executor.executor import WriteConflict, WriteResult
from qosmanager.states.kube.client import KubeClient, KubeError

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
EVICT_SUCCESS, EVICT_FAIL, EVICT_REFUSED = "EvictPodSuccess", "EvictPodFail", "EvictPodRefused"
ADJUST_BE = "AdjustBEByNodeCPUUsage"
INVALID_NODESLO = "InvalidNodeSLOFields"
WRITE_CONFLICT = "WriteConflict"
MAX_MESSAGE = 1024
CHANNEL = "events"  # the recorder's own connection


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass(frozen=True)
class ObjectRef:
    """The ``involvedObject`` of an Event."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out

    @property
    def event_namespace(self) -> str:
        return self.namespace or "default"  # events of cluster-scoped objects go to "default" (client-go)


def pod_ref(pod: PodMeta) -> ObjectRef:
    return ObjectRef("Pod", pod.name, pod.namespace, pod.uid, "v1", pod.resource_version)


@dataclass
class EventStats:
    queued: int = 0
    posted: int = 0
    patched: int = 0
    dropped: int = 0  # the queue was full
    rate_limited: int = 0
    failed: int = 0


@dataclass(frozen=True)
class _Item:
    ref: ObjectRef
    type: str
    reason: str
    message: str
    action: str
    ts: float


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: float
    last: float


@dataclass
class _Bucket:
    tokens: float
    at: float


class EventRecorder:
    """Posts Events from a background thread (see the module docstring)."""

    def __init__(self, client: KubeClient, node_name: str, component: str = "qosmanager", *,
                 clock: Callable[[], float] = time.time, queue_size: int = 1024, burst: int = 25,
                 refill_seconds: float = 300.0, dedup_window: float = 600.0, cache_size: int = 4096) -> None:
        self.client = client
        self.node_name = node_name
        self.component = component
        self.clock = clock
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.dedup_window = dedup_window
        self.cache_size = cache_size
        self.stats = EventStats()
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=queue_size)
        self._seen: OrderedDict[tuple[Any, ...], _Seen] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._periodic: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._seq = 0

    # ------------------------------------------------------------------ the agent's side
    def record(self, ref: ObjectRef, type_: str, reason: str, message: str, action: str = "") -> bool:
        """Queue an Event; never blocks.  False when it was dropped (queue full)."""
        item = _Item(ref, type_, reason, message[:MAX_MESSAGE], action, self.clock())
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.stats.dropped += 1
            return False
        self.stats.queued += 1
        return True

    def on_eviction(self, decision: EvictDecision, strategy: str) -> None:
        """The coordinator's ``on_decision`` callback."""
        ev = eviction_event(decision, strategy)
        if ev is not None:
            self.record(pod_ref(decision.pod), *ev, action="Evict")

    def add_periodic(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the recorder's thread about once a second (deferred events)."""
        self._periodic.append(fn)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kube-events", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Send what is queued (within ``timeout``), then stop."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        thread.join(timeout)

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until the queue is empty (tests); True when it is."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        next_periodic = time.monotonic() + 1.0
        while True:
            try:
                item = self._queue.get(timeout=max(0.05, next_periodic - time.monotonic()))
            except queue.Empty:
                pass
            else:
                try:
                    if item is None:
                        return
                    self._send(item)
                except Exception:  # an odd event must not end the thread
                    log.exception("event recorder failed")
                finally:
                    self._queue.task_done()
            if time.monotonic() >= next_periodic:
                next_periodic = time.monotonic() + 1.0
                for fn in self._periodic:
                    try:
                        fn()
                    except Exception:
                        log.exception("periodic event source failed")

    # ------------------------------------------------------------------ sending
    def _allowed(self, ref: ObjectRef, now: float) -> bool:
        key = (ref.kind, ref.namespace, ref.name, ref.uid)
        b = self._buckets.get(key)
        if b is None:
            b = _Bucket(float(self.burst), now)
        else:
            self._buckets.move_to_end(key)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) / self.refill_seconds)
            b.at = now
        self._buckets[key] = b
        while len(self._buckets) > self.cache_size:
            self._buckets.popitem(last=False)
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True

    def _send(self, item: _Item) -> None:
        if not self._allowed(item.ref, item.ts):
            self.stats.rate_limited += 1
            return
        key = (item.ref, item.type, item.reason, item.message)
        seen = self._seen.get(key)
        try:
            if seen is not None and item.ts - seen.last < self.dedup_window:
                seen.count += 1
                seen.last = item.ts
                self._seen.move_to_end(key)
                try:
                    self.client.patch(f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                                      {"count": seen.count, "lastTimestamp": rfc3339(item.ts),
                                       "message": item.message}, channel=CHANNEL)
                    self.stats.patched += 1
                    return
                except KubeError as e:
                    if not e.not_found:
                        raise
                    # the Event expired meanwhile: create a new one
            self._post(item, key)
        except KubeError as e:
            self.stats.failed += 1
            log.debug("cannot record event %s on %s/%s: %s", item.reason, item.ref.kind, item.ref.name, e)

    def _post(self, item: _Item, key: tuple[Any, ...]) -> None:
        self._seq += 1
        name = f"{item.ref.name}.{time.time_ns() + self._seq:x}"
        ns = item.ref.event_namespace
        ts = rfc3339(item.ts)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": item.ref.as_dict(),
            "reason": item.reason,
            "message": item.message,
            "type": item.type,
            "source": {"component": self.component, "host": self.node_name},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.node_name,
        }
        if item.action:
            body["action"] = item.action
        self.client.post(f"/api/v1/namespaces/{ns}/events", body, channel=CHANNEL)
        self.stats.posted += 1
        self._seen[key] = _Seen(name, ns, 1, item.ts, item.ts)
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)


def eviction_event(d: EvictDecision, strategy: str) -> tuple[str, str, str] | None:
    """``(type, reason, message)`` of the Event for one coordinator decision, or None for no Event.

    Pending pods (already being evicted), pods skipped because they left the node or wait for a
    retry, and decisions that evicted nothing (``--evict-mode none``, ``--dry-run``) get none.
    """
    base = f"evict Pod:{d.pod.key}, reason: trigger by koordlet feature {d.feature}, strategy: {strategy}, " \
           f"message: {d.reason}"
    if d.action == "evicted":
        return (WARNING, EVICT_SUCCESS, base) if d.executed else None
    if d.action == "failed":
        return WARNING, EVICT_FAIL, f"{base}, error: {d.error or 'unknown'}"
    if d.action == "skipped" and d.reason.startswith("refused:"):
        return NORMAL, EVICT_REFUSED, f"not evicting Pod:{d.pod.key} for koordlet feature {d.feature} " \
                                      f"(strategy {strategy}): {d.reason}"
    return None


@dataclass
class _Change:
    old: str
    new: str
    reason: str
    count: int = 1


@dataclass
class _KindState:
    last_emit: float = float("-inf")
    pending: _Change | None = None


@dataclass
class BELimitEvents:
    """cpuSuppress's BE-limit changes as Node Events (see the module docstring).

    ``on_write`` is the executor's ``on_write`` callback (agent thread); ``flush`` also runs on the
    recorder thread once a second, so the last change of a busy minute is reported when it is due.
    """

    recorder: EventRecorder
    node_ref: Callable[[], ObjectRef]
    be_dir: str  # the BE QoS dir, relative (where cpuSuppress writes the BE limit)
    interval: float = 60.0
    clock: Callable[[], float] = time.time
    strategy: str = "cpuSuppress"
    kinds: dict[str, str] = field(default_factory=lambda: {"cpu.cfs_quota_us": "quota",
                                                           "cpuset.cpus": "cpuset"})
    _state: dict[str, _KindState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_write(self, result: WriteResult) -> None:
        w = result.write
        kind = self.kinds.get(w.resource)
        if kind is None or w.strategy != self.strategy or w.cgroup.strip("/") != self.be_dir.strip("/"):
            return
        new = result.value if result.value is not None else w.value
        with self._lock:
            st = self._state.setdefault(kind, _KindState())
            if st.pending is None:
                st.pending = _Change(result.old if result.old is not None else "?", new, w.reason)
            else:
                st.pending.new, st.pending.reason = new, w.reason
                st.pending.count += 1
        self.flush()

    def flush(self) -> None:
        now = self.clock()
        out: list[tuple[str, _Change]] = []
        with self._lock:
            for kind, st in self._state.items():
                if st.pending is not None and now - st.last_emit >= self.interval:
                    if st.pending.old != st.pending.new:
                        out.append((kind, st.pending))
                        st.last_emit = now
                    st.pending = None
        for kind, ch in out:
            detail = ch.reason.removeprefix(f"{ADJUST_BE}: ")
            folded = f" ({ch.count} changes since the last event)" if ch.count > 1 else ""
            self.recorder.record(self.node_ref(), NORMAL, ADJUST_BE,
                                 f"BE cpu {kind} changed from {ch.old} to {ch.new}{folded}: {detail}",
                                 action="AdjustBE")


@dataclass
class NodeSLOEvents:
    """A NodeSLO with dropped fields as a Warning Event on the Node.

    ``on_nodeslo`` is the state store's ``on_nodeslo`` callback, which runs once per NodeSLO change
    (not on every re-read), so every change that still has bad fields is one Event; the recorder
    folds an identical repeat into the existing Event's count.
    """

    recorder: EventRecorder
    node_ref: Callable[[], ObjectRef]

    def on_nodeslo(self, spec: NodeSLOSpec) -> None:
        summary = spec.invalid_summary()
        if not summary:
            return
        version = f" (resourceVersion {spec.resource_version})" if spec.resource_version else ""
        self.recorder.record(self.node_ref(), WARNING, INVALID_NODESLO, f"NodeSLO{version}: {summary}",
                             action="ValidateNodeSLO")


@dataclass
class WriteConflictEvents:
    """Write conflicts with another writer as Warning Events on the Node (see the module docstring).

    ``on_conflict`` is the executor's ``on_conflict`` callback (agent thread); ``flush`` also runs on
    the recorder thread once a second.  Only starts are reported (the degraded condition says when a
    conflict is over); per resource, the first conflict is sent at once and later ones within
    ``interval`` are folded into the next Event.
    """

    recorder: EventRecorder
    node_ref: Callable[[], ObjectRef]
    interval: float = 60.0
    clock: Callable[[], float] = time.time
    _pending: dict[str, list[WriteConflict]] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_conflict(self, c: WriteConflict) -> None:
        if not c.active:
            return
        with self._lock:
            self._pending.setdefault(c.resource, []).append(c)
        self.flush()

    def flush(self) -> None:
        now = self.clock()
        out: list[list[WriteConflict]] = []
        with self._lock:
            for resource, items in list(self._pending.items()):
                if items and now - self._last.get(resource, float("-inf")) >= self.interval:
                    out.append(items)
                    self._last[resource] = now
                    del self._pending[resource]
        for items in out:
            c = items[0]
            more = f" (and {len(items) - 1} more files of {c.resource})" if len(items) > 1 else ""
            self.recorder.record(
                self.node_ref(), WARNING, WRITE_CONFLICT,
                f"{c.target}{more}: another writer changed it back {c.times} times in a row ({c.strategy} "
                f"writes {c.ours}, the file held {c.theirs}); no longer rewritten at every check, retried "
                f"with backoff. Turn off the other agent's feature for this knob (deploy/README.md, "
                f"Living beside koordlet)", action="WriteFile")
