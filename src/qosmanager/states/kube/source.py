"""State from the API server: the pods of this node, the Node, and the NodeSLO named after it.

Each of the three is a *reflector* on its own thread, as client-go's informers do it: list, then
watch from the list's resourceVersion; ADDED/MODIFIED/DELETED change the set, BOOKMARK moves the
resourceVersion on; a dropped stream is watched again from the last resourceVersion after an
exponential backoff with jitter (or the server's ``Retry-After`` when longer, up to the backoff's
cap); a 410 Gone (the resourceVersion was compacted away) relists and
replaces the whole set, which also notices objects deleted during the gap.

The reflector threads never touch the :class:`~qosmanager.states.store.StateStore`: they leave
what they received in a small pending buffer (the latest object per pod, or a whole new list whose
pods' views the reflector's thread builds, :meth:`StateStore.prepare_pods`, reading the store only),
and :meth:`KubeSource.poll` -- called by the agent at the start of every collect tick, on the
agent's thread -- applies it.  So a burst of 1,000 pod events rebuilds the pod map once, the
store is only written by the thread that reads it, and an idle tick costs three lock
acquisitions.  While the API server cannot be reached nothing is pending and the store keeps
the last known state: the agent goes on enforcing it, and :attr:`KubeSource.connected` and the
store's health say so.

A NodeSLO that does not exist (an empty list, or 404 because the CRD is not installed) means
koordlet's defaults (``set_nodeslo(None)``), never a stall.  The agent starts once the Node is known
and the pods list too, or :data:`PODS_GRACE` seconds after the Node: until the first pods list is in
force (at 100,000 pods its transfer, decode and views take tens of seconds) ``StateStore.pods_loading``
and the ``state/pods-loading`` condition say the pods are on their way, and cpuSuppress decides the BE
limit from the node and kube QoS-dir counters, as with a big pods file in standalone mode.  A Node that
disappears keeps the last known Node (the kubelet will register it again; the capacity the strategies
need does not vanish with the object).  While the API server has no Node of that name (a wrong
``--node-name``, or the Node deleted), the degraded
condition ``state/node-missing`` names it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from qosmanager.api.pod import PrunedPod, prune_pod_hook
from qosmanager.states.kube.client import KubeClient, KubeError
from qosmanager.states.store import PODS_LOADING_CONDITION, PreparedPods, StateStore

log = logging.getLogger(__name__)

PODS, NODE, NODESLO = "pods", "node", "nodeslo"
NODE_MISSING_CONDITION = "state/node-missing"  # the API server has no Node of --node-name
NODESLO_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
PODS_GRACE = 10.0  # seconds the agent's start waits for the pods list once the Node is known

Obj = dict[str, Any]
Pod = Mapping[str, Any] | PrunedPod


def _meta(obj: Mapping[str, Any] | PrunedPod) -> Mapping[str, Any]:
    if isinstance(obj, PrunedPod):
        obj = obj.object()
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


class Backoff:
    """Exponential backoff with jitter: ``base x 2^n`` capped at ``cap``, times [1, 1 + jitter)."""

    def __init__(self, base: float = 0.8, cap: float = 30.0, jitter: float = 0.5,
                 rng: random.Random | None = None) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self.rng = rng or random.Random()
        self.failures = 0

    def next(self) -> float:
        delay = min(self.cap, self.base * (2.0 ** min(self.failures, 30)))
        self.failures += 1
        return delay * (1.0 + self.jitter * self.rng.random())

    def reset(self) -> None:
        self.failures = 0


@dataclass(frozen=True)
class ReflectorHealth:
    """A read-only snapshot of one reflector, for /healthz and the metrics."""

    resource: str
    connected: bool  # the last list or watch reached the API server
    synced: bool  # a full list has been received at least once
    last_sync: float  # last time the reflector knew it was in sync (list, event, bookmark, live watch)
    watch_restarts: int  # watches re-opened after a dropped stream or an error
    relists: int  # full relists after 410 Gone
    errors: int
    last_error: str
    last_error_ts: float
    resource_version: str


# ----------------------------------------------------------------------------------------------
# pending buffers (written by a reflector thread, applied by the agent thread)
# ----------------------------------------------------------------------------------------------
class _PodBuffer:
    """The pods received and not yet applied: a whole list (a list or relist, its views built on the
    reflector's thread by ``prepare``) and the watch events after it, the latest object per pod."""

    def __init__(self, prepare: Callable[[list[Pod]], PreparedPods]) -> None:
        self._lock = threading.Lock()
        self.prepare = prepare
        self._replace: PreparedPods | None = None
        # uid -> the pod (a PrunedPod: its pruned JSON text), None = deleted; after _replace if both
        self._events: dict[str, Pod | None] = {}
        self.synced = False

    @staticmethod
    def _uid(obj: Mapping[str, Any] | PrunedPod) -> str:
        if isinstance(obj, PrunedPod):
            return obj.uid
        uid = _meta(obj).get("uid")
        return uid if isinstance(uid, str) else ""

    def replace(self, items: list[Any]) -> None:
        """A whole list (the reflector's thread): its pods' views are built here, not on the agent's
        thread (at 100,000 pods they take tens of seconds); the agent's poll puts them in force."""
        snapshot: dict[str, Pod] = {}
        for obj in items:
            uid = self._uid(obj)
            if uid:
                snapshot[uid] = obj if isinstance(obj, PrunedPod) else PrunedPod.of(obj)
            else:
                log.error("pod %s has no metadata.uid; ignored", _meta(obj).get("name"))
        prepared = self.prepare(list(snapshot.values()))
        with self._lock:
            self._replace, self._events = prepared, {}

    def event(self, type_: str, obj: Obj) -> None:
        uid = self._uid(obj)
        if not uid:
            log.error("pod event %s for %s without metadata.uid; ignored", type_, _meta(obj).get("name"))
            return
        pod = PrunedPod.of(obj)  # only what the pod's view reads is held until it is applied
        with self._lock:
            self._events[uid] = None if type_ == "DELETED" else pod

    def apply(self, store: StateStore, now: float) -> bool:
        with self._lock:
            replace, events = self._replace, self._events
            if replace is None and not events:
                return False
            self._replace, self._events = None, {}
        changed = False
        if replace is not None:
            self.synced = True
            changed = store.commit_pods(replace, now)
        if events:  # one map rebuild per batch, from the events alone: no copy of every pod object is kept
            changed = store.apply_pod_events(events, now) or changed
        return changed


class _SingleBuffer:
    """The latest state of one named object: ``(present, object)``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._pending: tuple[bool, Obj | None] | None = None
        self.synced = False

    def replace(self, items: list[Obj]) -> None:
        obj = next((o for o in items if _meta(o).get("name") == self.name), None)
        with self._lock:
            self._pending = (obj is not None, obj)

    def event(self, type_: str, obj: Obj) -> None:
        if _meta(obj).get("name") != self.name:
            return
        with self._lock:
            self._pending = (False, None) if type_ == "DELETED" else (True, obj)

    def take(self) -> tuple[bool, Obj | None] | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending


def _node_view(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the agent reads from a Node; heartbeats and conditions change nothing it uses."""
    meta, status = _meta(obj), obj.get("status") or {}
    return (meta.get("name"), meta.get("labels"), meta.get("annotations"),
            status.get("capacity") if isinstance(status, Mapping) else None,
            status.get("allocatable") if isinstance(status, Mapping) else None)


class _NodeBuffer(_SingleBuffer):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._view: tuple[Any, ...] | None = None
        self._absent_logged = False

    def apply(self, store: StateStore, now: float) -> bool:
        pending = self.take()
        if pending is None:
            return False
        present, obj = pending
        if not present or obj is None:
            kept = ("keeping the last known Node" if store.node is not None else
                    "nothing runs until it appears")
            message = (f"no Node named {self.name!r} in the API server (is --node-name or $NODE_NAME "
                       f"this node's name?); {kept}")
            store.conditions.set(NODE_MISSING_CONDITION, message)
            if not self._absent_logged:
                log.warning("%s", message)
                self._absent_logged = True
            return False
        self._absent_logged = False
        store.conditions.clear(NODE_MISSING_CONDITION)
        view = _node_view(obj)
        if view == self._view and store.node is not None:
            return False
        if store.set_node(obj, now):
            self._view = view
            self.synced = True
            return True
        return False


class _NodeSLOBuffer(_SingleBuffer):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._applied: tuple[bool, Any] | None = None

    def apply(self, store: StateStore, now: float) -> bool:
        pending = self.take()
        if pending is None:
            return False
        present, obj = pending
        key = (present, obj.get("spec") if obj is not None else None)
        self.synced = True
        if key == self._applied:
            return False  # koordlet too ignores updates whose spec is unchanged
        if not present:
            log.info("no NodeSLO named %s: using the defaults", self.name)
        self._applied = key
        return store.set_nodeslo(obj if present else None, now)


# ----------------------------------------------------------------------------------------------
# reflector
# ----------------------------------------------------------------------------------------------
class Reflector:
    """List-then-watch of one collection on a background thread (see the module docstring)."""

    def __init__(self, resource: str, client: KubeClient, path: str, params: Mapping[str, str],
                 sink: _PodBuffer | _SingleBuffer, *, clock: Callable[[], float], stop: threading.Event,
                 watch_timeout: tuple[float, float], backoff: Backoff, absent_ok: bool = False,
                 absent_retry: float = 60.0, object_hook: Callable[[Obj], Any] | None = None) -> None:
        self.resource = resource
        self.object_hook = object_hook  # shrinks each listed object as it is decoded
        self.client = client
        self.path = path
        self.params = dict(params)
        self.sink = sink
        self.clock = clock
        self.stop = stop
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.absent_ok = absent_ok  # 404 on the list means "no such objects" (a CRD not installed)
        self.absent_retry = absent_retry
        self.rv = ""
        self.connected = False
        self.synced = False
        self.last_sync = 0.0
        self.watch_restarts = 0
        self.relists = 0
        self.errors = 0
        self.last_error = ""
        self.last_error_ts = 0.0
        self.thread: threading.Thread | None = None
        self._starting = threading.Lock()  # start() against a stop's join() on another thread
        self.on_relist: list[Callable[[], None]] = []  # called (on this thread) when a 410 forces a relist
        self._relist = threading.Event()  # asked for (SIGHUP): list afresh, then watch from there
        self.requested_relists = 0
        self._lists = 0
        self._absent_logged = False
        # a stop or a relist asked for while no request is connected is not lost: the next one is refused
        client.cancel_when(self.channel, lambda: self.stop.is_set() or self._relist.is_set())

    @property
    def channel(self) -> str:
        return f"watch-{self.resource}"

    def start(self) -> None:
        """Start the thread, unless the source is stopped already.  ``thread`` is set only once it
        has started: a stop() on another thread joined a thread made but not yet started (RuntimeError)."""
        with self._starting:
            if self.stop.is_set():
                return
            thread = threading.Thread(target=self.run, name=f"kube-{self.resource}", daemon=True)
            thread.start()
            self.thread = thread

    def join(self, timeout: float) -> None:
        """Wait for the thread, if it was started (a start running now is waited for first)."""
        with self._starting:
            thread = self.thread
        if thread is not None:
            thread.join(timeout)

    def request_relist(self) -> None:
        """List again as soon as possible (another thread: the agent's on SIGHUP).  A watch blocked on
        the stream is woken; that is no error, no watch restart and no lost connection."""
        self._relist.set()
        self.client.interrupt(self.channel)

    def _relist_asked(self) -> bool:
        """Whether a relist was asked for (the request is taken: the caller lists next)."""
        if not self._relist.is_set():
            return False
        self._relist.clear()
        self.requested_relists += 1
        log.info("kube %s: listing again as asked (SIGHUP)", self.resource)
        return True

    def health(self) -> ReflectorHealth:
        return ReflectorHealth(self.resource, self.connected, self.synced, self.last_sync,
                               self.watch_restarts, self.relists, self.errors, self.last_error,
                               self.last_error_ts, self.rv)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if not self._list():
                    self.stop.wait(self.absent_retry * (1.0 + 0.5 * self.backoff.rng.random()))
                    continue
            except KubeError as e:
                if self.stop.is_set():
                    return  # stopped mid-list: no error to report
                if self._relist_asked():
                    continue  # the interruption was the request itself: list again at once
                self._failed("list", e)
                self.stop.wait(self._retry_delay(e))
                continue
            except Exception as e:  # never let the thread die: the agent would silently go stale
                log.exception("kube %s: list failed unexpectedly", self.resource)
                self._failed("list", KubeError(0, f"{type(e).__name__}: {e}"))
                self.stop.wait(self.backoff.next())
                continue
            self._watch_until_gone()

    # ------------------------------------------------------------------
    def _list(self) -> bool:
        """List and hand the set to the sink; False when the resource does not exist (look again later)."""
        first = self._lists == 0
        try:
            # the first list may come from the API server's watch cache; a relist after 410 must not
            items, rv = self.client.list(self.path, self.params, channel=self.channel,
                                         resource_version="0" if first else None, object_hook=self.object_hook)
        except KubeError as e:
            if not (e.not_found and self.absent_ok):
                raise
            if not self._absent_logged:
                log.warning("kube %s: %s is not served by the API server (%s); using the defaults and "
                            "looking again later", self.resource, self.path, e.message)
                self._absent_logged = True
            self.sink.replace([])
            self._ok()
            self.synced = True
            return False
        self._absent_logged = False
        self._lists += 1
        self.sink.replace(items)
        self.rv = rv
        self._ok()
        self.synced = True
        self.backoff.reset()
        log.debug("kube %s: listed %d at resourceVersion %s", self.resource, len(items), rv)
        return True

    def _watch_until_gone(self) -> None:
        """Watch again and again from the last resourceVersion; return on 410 Gone (relist) or stop.

        The backoff starts afresh after a list and after a stream that lasted (a second or more):
        a server or proxy that cuts every stream at once is asked again ever more slowly.
        """
        while not self.stop.is_set():
            if self._relist_asked():
                return
            lo, hi = self.watch_timeout
            timeout = self.backoff.rng.uniform(lo, hi) if hi > lo else lo
            started = time.monotonic()
            try:
                for type_, obj in self.client.watch(self.path, self.params, resource_version=self.rv,
                                                    timeout=timeout, channel=self.channel, on_open=self._ok):
                    self._on_event(type_, obj)
                if time.monotonic() - started < min(timeout, 1.0):
                    # ended at once (a proxy cutting streams?): watch again, but not in a hot loop
                    self.stop.wait(self.backoff.next())
                else:
                    self.backoff.reset()  # the server ended the stream on time: watch again at once
            except KubeError as e:
                if self.stop.is_set() or self._relist_asked():
                    return
                if e.gone:
                    self.relists += 1
                    log.info("kube %s: resourceVersion %s is gone (%s); relisting", self.resource, self.rv,
                             e.message)
                    for hook in self.on_relist:
                        hook()
                    return
                self.watch_restarts += 1
                self._failed("watch", e)
                if time.monotonic() - started >= 1.0:
                    self.backoff.reset()  # it was a live stream: the first retry comes quickly
                self.stop.wait(self._retry_delay(e))
            except Exception as e:  # a bug must not end the thread
                log.exception("kube %s: watch failed unexpectedly", self.resource)
                self.watch_restarts += 1
                self._failed("watch", KubeError(0, f"{type(e).__name__}: {e}"))
                self.stop.wait(self.backoff.next())

    def _retry_delay(self, e: KubeError) -> float:
        """The backoff's next delay, or the server's ``Retry-After`` (429, 503) when that is longer,
        bounded by the backoff's cap: a storm of 429s is asked again no sooner than the server wants,
        and never later than the cap."""
        delay = self.backoff.next()
        if e.retry_after > 0:
            delay = max(delay, min(e.retry_after, self.backoff.cap))
        return delay

    def _on_event(self, type_: str, obj: Obj) -> None:
        rv = _meta(obj).get("resourceVersion")
        if type_ in ("ADDED", "MODIFIED", "DELETED"):
            self.sink.event(type_, obj)
        elif type_ != "BOOKMARK":
            log.debug("kube %s: ignoring watch event %s", self.resource, type_)
        if isinstance(rv, str) and rv:
            self.rv = rv
        self._ok()

    def _ok(self) -> None:
        if not self.connected and self.errors:
            log.warning("kube %s: connected to the API server again", self.resource)
        self.connected = True
        self.last_sync = self.clock()

    def _failed(self, what: str, e: KubeError) -> None:
        self.errors += 1
        self.last_error = f"{what}: {e}"
        self.last_error_ts = self.clock()
        unreachable = e.status == 0 or e.status >= 500 or e.status == 429
        if self.connected and unreachable:
            log.warning("kube %s: lost the API server (%s); keeping the last known state", self.resource, e)
        elif not unreachable:
            log.error("kube %s: %s failed: %s", self.resource, what, e)
        if unreachable or e.status in (401, 403):
            self.connected = False


# ----------------------------------------------------------------------------------------------
# the source
# ----------------------------------------------------------------------------------------------
class KubeSource:
    """Feeds a :class:`StateStore` from the API server (see the module docstring).

    Read-only health API (for the exporter): :attr:`connected`, :meth:`health` (one
    :class:`ReflectorHealth` per resource ``pods``/``node``/``nodeslo``), and the per-resource
    maps :attr:`watch_restarts`, :attr:`relists`, :attr:`last_sync`, plus :attr:`last_error`.
    """

    def __init__(self, store: StateStore, client: KubeClient, node_name: str, *,
                 clock: Callable[[], float] = time.time, watch_timeout: tuple[float, float] = (300.0, 600.0),
                 backoff_base: float = 0.8, backoff_max: float = 30.0, absent_retry: float = 60.0,
                 seed: int | None = None) -> None:
        if not node_name:
            raise ValueError("the Kubernetes source needs the node name (--node-name or $NODE_NAME)")
        self.store = store
        self.client = client
        self.node_name = node_name
        self.clock = clock
        self._stop = threading.Event()
        rng = random.Random(seed)
        self.pods = _PodBuffer(store.prepare_pods)
        self._pods_announced = False  # the first list's arrival logged
        self.node = _NodeBuffer(node_name)
        self.nodeslo = _NodeSLOBuffer(node_name)

        def reflector(resource: str, path: str, selector: str, sink: _PodBuffer | _SingleBuffer,
                      absent_ok: bool = False, object_hook: Callable[[Obj], Any] | None = None) -> Reflector:
            return Reflector(resource, client, path, {"fieldSelector": selector}, sink, clock=clock,
                             stop=self._stop, watch_timeout=watch_timeout,
                             backoff=Backoff(backoff_base, backoff_max, rng=random.Random(rng.random())),
                             absent_ok=absent_ok, absent_retry=absent_retry, object_hook=object_hook)

        self.reflectors: dict[str, Reflector] = {
            PODS: reflector(PODS, "/api/v1/pods", f"spec.nodeName={node_name}", self.pods,
                            object_hook=prune_pod_hook),
            NODE: reflector(NODE, "/api/v1/nodes", f"metadata.name={node_name}", self.node),
            NODESLO: reflector(NODESLO, NODESLO_PATH, f"metadata.name={node_name}", self.nodeslo,
                               absent_ok=True),
        }
        self._started = False
        self._was_connected = True
        self.pods_grace = PODS_GRACE  # the agent's start waits this long for the pods once the Node is in

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for r in self.reflectors.values():
            r.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        for r in self.reflectors.values():
            self.client.interrupt(r.channel)
        deadline = time.monotonic() + timeout
        for r in self.reflectors.values():
            r.join(max(0.0, deadline - time.monotonic()))

    def relist(self) -> None:
        """List the pods, the Node and the NodeSLO afresh now, then watch on from there (SIGHUP: an
        operator who doubts a watch missed a change); the state is applied at the next :meth:`poll`."""
        for r in self.reflectors.values():
            r.request_relist()

    # ------------------------------------------------------------------ the agent's side
    def poll(self, now: float | None = None) -> bool:
        """Apply what the reflectors received since the last call; True when the state changed."""
        now = self.clock() if now is None else now
        changed = False
        for kind, buffer in ((NODE, self.node), (PODS, self.pods), (NODESLO, self.nodeslo)):
            try:
                changed |= buffer.apply(self.store, now)
            except Exception:  # the store skips bad objects itself; this is the last guard of the loop
                log.exception("kube %s: applying the received state failed", kind)
        for kind, r in self.reflectors.items():
            h = self.store.health[kind]
            if r.connected and r.synced:
                h.last_sync = now  # a live watch is a fresh source even when nothing changes
            elif r.last_error_ts > h.last_error_ts:
                h.last_error, h.last_error_ts = r.last_error, r.last_error_ts
        self._note_loading()
        return changed

    def _note_loading(self) -> None:
        """Until the first pods list is in force: ``StateStore.pods_loading`` and ``state/pods-loading``
        (the agent runs from the Node on; at 100,000 pods the list and its views take tens of seconds)."""
        loading = self.store.pods_loading = not self.pods.synced
        if not loading and not self._pods_announced:
            self._pods_announced = True
            log.info("pods in force: %d pods, the first list of node %s from the API server", len(self.store.pods),
                     self.node_name)
        if loading:
            self.store.conditions.set(PODS_LOADING_CONDITION, (
                f"listing the pods of node {self.node_name} from the API server; until they are in force the "
                "agent works with no pods, and cpuSuppress decides the BE limit from the node and kube QoS-dir "
                "counters"))
        else:
            self.store.conditions.clear(PODS_LOADING_CONDITION)

    def synced(self, pods: bool = True) -> bool:
        """The Node (and with ``pods`` the pods) have been received (the NodeSLO is optional)."""
        return (self.pods.synced or not pods) and self.store.node is not None

    def wait_synced(self, timeout: float | None = None, stop: threading.Event | None = None, *,
                    pods: bool | float = True) -> bool:
        """Start the reflectors if needed and apply their state until the Node and the pods are known;
        ``pods`` False: the Node alone; a number: the pods at most that many seconds once the Node is
        known (a small node's list is in within moments, a big one's is not waited for)."""
        self.start()
        t0 = time.monotonic()
        next_note = t0 + 10.0
        node_at: float | None = None
        while True:
            self.poll()
            if self.synced(pods is not False):
                return True
            if self.store.node is not None and not isinstance(pods, bool):
                node_at = time.monotonic() if node_at is None else node_at
                if time.monotonic() - node_at >= pods:
                    return True
            now = time.monotonic()
            if (timeout is not None and now - t0 >= timeout) or (stop is not None and stop.is_set()):
                return False
            if now >= next_note:
                have = ((PODS, self.pods.synced or not pods), (NODE, self.store.node is not None))
                missing = [k for k, ok in have if not ok]
                errors = "; ".join(r.last_error for r in self.reflectors.values() if r.last_error)
                log.warning("still waiting for %s of node %s from the API server%s", " and ".join(missing),
                            self.node_name, f" ({errors})" if errors else "")
                next_note = now + 30.0
            (stop or self._stop).wait(0.02)

    # ------------------------------------------------------------------ health (read-only)
    @property
    def connected(self) -> bool:
        return all(r.connected for r in self.reflectors.values())

    def health(self) -> dict[str, ReflectorHealth]:
        return {k: r.health() for k, r in self.reflectors.items()}

    @property
    def watch_restarts(self) -> dict[str, int]:
        return {k: r.watch_restarts for k, r in self.reflectors.items()}

    @property
    def relists(self) -> dict[str, int]:
        return {k: r.relists for k, r in self.reflectors.items()}

    @property
    def last_sync(self) -> dict[str, float]:
        return {k: r.last_sync for k, r in self.reflectors.items()}

    @property
    def last_error(self) -> str:
        latest = max(self.reflectors.values(), key=lambda r: r.last_error_ts)
        return latest.last_error
