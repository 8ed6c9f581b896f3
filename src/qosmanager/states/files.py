"""The standalone source: Node, pods and NodeSLO from files (``--node-file``, ``--pods-file``,
``--node-slo-file``), re-read when they change.

A change is noticed with one ``stat`` per file per poll (mtime, size and inode), so an
idle node costs three syscalls per tick; SIGHUP (:meth:`FileSource.reread`) has every file read
again at the next poll, whatever its ``stat`` says.  A file that cannot be read or parsed (or is not
the kind of object it should hold) keeps the last good state; the reason is logged once
and stays in the ``state/<kind>-file`` degraded condition until the file is good again.  A
read that fails (EMFILE, EACCES, EIO) is tried again at the next poll, changed file or not.
Without ``--node-file`` the ``state/no-node`` condition says that nothing needing the node's
capacity runs.  Files are decoded within the document limits of :mod:`qosmanager.api.decode` (64 MiB, 100
levels; a byte-order mark is skipped; a file over 256 KiB must be strict JSON, YAML is not tried
on it); a pods file with one pod that cannot be read applies every other pod.

A pods file of :data:`BACKGROUND_BYTES` or more (some 2,000 pods) is decoded on a thread of its own,
beside the agent's ticks: at 100,000 pods the decode and the pod views take tens of seconds, and the
collector's passes and the strategies' ticks go on meanwhile with the pods last in force (none at
start: ``StateStore.pods_loading`` says the pods are on their way, and cpuSuppress decides the BE
limit from the node and kube QoS-dir counters until they are in force).  The thread decodes the file
and builds the pods' views (:meth:`StateStore.prepare_pods`) without touching the store; the first
poll after it is done puts them in force (:meth:`StateStore.commit_pods`) on the agent's thread, so a
tick never sees the pod map and its generation from two different lists.  The ``state/pods-loading``
condition names the file until then; a log line says when the decode starts and how long it took.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from qosmanager.api.decode import DOCUMENT_LIMITS, read_document_file
from qosmanager.api.pod import prune_pod_hook
from qosmanager.states.store import PODS_LOADING_CONDITION, PreparedPods, StateStore

log = logging.getLogger(__name__)


# a pods file this big (bytes) or bigger is decoded beside the ticks (a pruned pod takes some 550 bytes)
BACKGROUND_BYTES = 1 << 20
LOADING_CONDITION = PODS_LOADING_CONDITION
NO_NODE_CONDITION = "state/no-node"
NO_NODE_MESSAGE = ("no Node: standalone mode without --node-file, so nothing that needs the node's capacity "
                   "runs (cpuSuppress, cpuEvict, memoryEvict, the BE cgroup reconcile, the system config); "
                   "give the Node with --node-file")


def check_big_pods_file(path: str, background_bytes: int | None = None) -> bool:
    """``qosmanager run``'s start-up check of a pods file the agent decodes beside its ticks (``background_bytes``,
    default :data:`BACKGROUND_BYTES`, or more): readable, within the document limit and a JSON object at
    its start (a file that big must be strict JSON); what it holds is judged as it is decoded (at
    100,000 pods a decode at start held the agent back for tens of seconds).  False: a smaller file,
    to be decoded whole; ``OSError`` or ``ValueError`` naming the file."""
    size = os.stat(path).st_size
    if size < (BACKGROUND_BYTES if background_bytes is None else background_bytes):
        return False
    if size > DOCUMENT_LIMITS.max_bytes:
        raise ValueError(f"{path}: larger than the limit of {DOCUMENT_LIMITS.max_bytes >> 20} MiB")
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n").startswith(b"{"):
        raise ValueError(f"{path} is not a PodList: a pods file of {size >> 20} MiB or more must be a JSON object")
    return True


class WatchedFile:
    def __init__(self, path: str, kind: str, apply: Callable[[Any], object],
                 object_hook: Callable[[dict[str, Any]], Any] | None = None,
                 background_bytes: int | None = None, prepare: Callable[[Any], Any] | None = None) -> None:
        """``prepare`` turns the decoded document into what ``apply`` takes (None: the document itself; a
        ``ValueError`` refuses the file).  ``background_bytes``: a file of that size or bigger is decoded
        and prepared on a thread of its own, :meth:`poll` returning at once, and applied by the first
        poll after that thread is done, on the poll's thread: the thread that reads the store is the
        only one that writes it (None: always all at the poll)."""
        self.path = path
        self.background_bytes = background_bytes
        self._worker: threading.Thread | None = None
        self._ready: tuple[bool, Any] = (False, None)  # the worker's result: (usable, prepared)
        self._decode_seconds = 0.0
        self.loading_since: float | None = None  # monotonic start of the decode in flight
        self.loading_bytes = 0
        self.object_hook = object_hook
        self.kind = kind
        self.apply = apply
        self.prepare = prepare
        self._sig: tuple[int, int, int] | None = None
        self._unreadable = False  # self.error says the file could not be read (not: its content is bad)
        self.error = ""  # why the current file content is not in use ("" when it is)

    def reread(self) -> None:
        """Read the file at the next poll even if it looks unchanged (SIGHUP: an edit that kept the
        size and the modification time, or a file system that does not update them)."""
        self._sig = None

    @property
    def loading(self) -> bool:
        """A decode on its own thread is in flight (or done and not yet applied by a poll)."""
        return self._worker is not None

    def poll(self) -> bool:
        """Read the file when it changed; True when a new content was applied (a decode on its own
        thread: applied by the first poll after it finished)."""
        if self._worker is not None:
            if self._worker.is_alive():
                return False
            self._worker = None
            self.loading_since = None
            (usable, prepared), self._ready = self._ready, (False, None)
            applied = usable and self._apply(prepared)
            log.info("%s file %s %s (decoded in %.1f s beside the ticks)", self.kind, self.path,
                     "in force" if applied else "not applied", self._decode_seconds)
            return applied
        try:
            st = os.stat(self.path)
        except OSError as e:
            return self._cannot_read(e)
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self._sig:
            if self._unreadable:  # readable again, and the content in use is what it holds
                self._unreadable, self.error = False, ""
            return False
        self._sig = sig
        if self.background_bytes is not None and st.st_size >= self.background_bytes:
            self.loading_since, self.loading_bytes = time.monotonic(), st.st_size
            self._ready = (False, None)
            self._worker = threading.Thread(target=self._load_beside, name=f"decode-{self.kind}", daemon=True)
            self._worker.start()
            return False
        usable, prepared = self._decode()
        return usable and self._apply(prepared)

    def _load_beside(self) -> None:
        """The worker: decode and prepare; the result waits for the next poll."""
        t0 = time.monotonic()
        log.info("decoding the %s file %s (%.0f MiB) beside the ticks", self.kind, self.path,
                 self.loading_bytes / 2**20)
        try:
            self._ready = self._decode()
        except Exception as e:  # a bug in reading it: the last state stays, the next change is read again
            log.exception("%s file %s: decoding it failed", self.kind, self.path)
            self._unreadable, self.error = False, f"decoding {self.path} failed: {type(e).__name__}: {e}"
        self._decode_seconds = time.monotonic() - t0

    def _decode(self) -> tuple[bool, Any]:
        """Decode the file and prepare it (the file's signature is taken); (False, None) when it cannot
        be used, :attr:`error` saying why.  Changes nothing outside this object."""
        try:
            obj = read_document_file(self.path, object_hook=self.object_hook)  # bounded
        except OSError as e:
            # the read failed, not the content (EMFILE, EACCES, EIO): read it again next poll, even if
            # it does not change meanwhile (it was remembered as seen: the update was lost for good)
            self._sig = None
            return self._cannot_read(e), None
        except ValueError as e:
            log.error("cannot parse %s file %s: %s (keeping the last state)", self.kind, self.path, e)
            self._unreadable, self.error = False, f"cannot parse {self.path}: {e}"
            return False, None
        if self.prepare is None:
            return True, obj
        try:
            return True, self.prepare(obj)
        except ValueError as e:
            return self._refused(e), None

    def _apply(self, prepared: Any) -> bool:
        try:
            self.apply(prepared)
        except ValueError as e:
            return self._refused(e)
        self._unreadable = False
        self.error = ""
        return True

    def _refused(self, e: ValueError) -> bool:
        log.error("%s file %s refused: %s (keeping the last state)", self.kind, self.path, e)
        self._unreadable, self.error = False, f"{self.path} refused: {e}"
        return False

    def _cannot_read(self, e: OSError) -> bool:
        """A failed stat or read: said once per distinct error (again when it changes), kept in
        :attr:`error` until the file can be read again."""
        error = f"cannot read {self.path}: {e.strerror or e}"
        if error != self.error:
            log.error("cannot read %s file %s: %s (keeping the last state)", self.kind, self.path,
                      e.strerror or e)
        self._unreadable, self.error = True, error
        return False


class FileSource:
    """Feeds a :class:`StateStore` from standalone files."""

    def __init__(self, store: StateStore, *, pods_file: str | None = None, node_file: str | None = None,
                 node_slo_file: str | None = None, background_bytes: int | None = None) -> None:
        """``background_bytes``: a pods file that big or bigger is decoded on a thread of its own
        (:data:`BACKGROUND_BYTES` in the agent; None: always at the poll, as tests and tools want)."""
        self.store = store
        self.files: list[WatchedFile] = []
        if node_file:
            self.files.append(WatchedFile(node_file, "Node", store.set_node))
        else:  # it starts and runs, but what needs the node's capacity never does: say so
            store.conditions.set(NO_NODE_CONDITION, NO_NODE_MESSAGE)
            log.warning("%s", NO_NODE_MESSAGE)
        if pods_file:
            # pods pruned as they are decoded: a big node's list never stands whole in memory
            self.files.append(WatchedFile(pods_file, "pods", store.commit_pods, prune_pod_hook,
                                          background_bytes=background_bytes, prepare=self._prepare_pods))
        if node_slo_file:
            self.files.append(WatchedFile(node_slo_file, "NodeSLO", store.set_nodeslo))
        self.connected = True

    def _prepare_pods(self, obj: Any) -> PreparedPods:
        """A PodList's views (on the decode's thread for a big file; :meth:`StateStore.commit_pods` puts
        them in force at a poll): every pod that can be read; one that cannot is skipped by the store."""
        if isinstance(obj, dict) and isinstance(obj.get("items"), list):
            return self.store.prepare_pods(obj["items"])
        if isinstance(obj, list):
            return self.store.prepare_pods(obj)
        raise ValueError("not a PodList (no items list)")

    def _note_loading(self) -> None:
        """``StateStore.pods_loading`` and the ``state/pods-loading`` condition while a pods file is
        decoded beside the ticks."""
        loading = [f for f in self.files if f.loading]
        self.store.pods_loading = bool(loading)
        if loading:
            f = loading[0]
            self.store.conditions.set(LOADING_CONDITION, (
                f"decoding the pods file {f.path} ({f.loading_bytes / 2**20:.0f} MiB) beside the ticks; until "
                f"it is in force the agent works with the {len(self.store.pods)} pods it knows, and cpuSuppress "
                "decides the BE limit from the node and kube QoS-dir counters"))
        else:
            self.store.conditions.clear(LOADING_CONDITION)

    def reread(self) -> None:
        """Read every file again at the next poll, changed or not (``qosmanager run`` on SIGHUP)."""
        for f in self.files:
            f.reread()

    def poll(self, now: float | None = None) -> bool:
        """Re-read changed files; True when anything changed."""
        changed = False
        for f in self.files:
            changed |= f.poll()
        # an unchanged, readable file is still a fresh source; an unreadable or garbled one is not
        t = time.time() if now is None else now
        self._note_loading()
        for f in self.files:
            if f.loading:
                continue  # fresh or not: said when the decode is done
            kind = {"Node": "node", "pods": "pods", "NodeSLO": "nodeslo"}[f.kind]
            h = self.store.health[kind]
            key = f"state/{kind}-file"
            if f.error:
                h.last_error, h.last_error_ts = f.error, t
                self.store.conditions.set(key, f"{f.kind} file: {f.error}; the last good {f.kind} "
                                               "stays in force")
            elif f._sig is not None:
                h.last_sync = t
                h.last_error = ""
                self.store.conditions.clear(key)
        return changed
