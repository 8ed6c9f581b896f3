"""A loopback fake of the Kubernetes API server, speaking the real wire protocol.

A test double, kept with the tests (the agent's package ships none): tests and benchmarks run the
agent's real Kubernetes client against it, and two independent clients check its answers --
``kubectl`` and the official ``kubernetes`` Python client, whose typed models refuse objects a real
server would not send (tests/test_kube_official_client.py).  Two parts:

* :class:`FakeCluster` -- the state: objects by resource, one global resourceVersion counter,
  the change history watches are served from, the eviction policy per pod and a record of every
  eviction request.  Tests change the cluster directly (:meth:`FakeCluster.put`,
  :meth:`FakeCluster.remove`) or through HTTP; both produce watch events.
* :class:`FakeAPIServer` -- a ``ThreadingHTTPServer`` on 127.0.0.1 (HTTP, or HTTPS with a
  certificate made by :func:`make_self_signed_cert`) serving the cluster.

What it speaks:

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>`` (legacy,
  non-aggregated discovery, which kubectl falls back to; ``/api/v1`` lists ``pods/eviction`` with
  the Eviction group and version the cluster serves, as :attr:`FakeCluster.eviction_versions` says,
  and not at all when it serves none); a minimal ``/openapi/v3`` saying the
  server validates fields itself (``kubectl apply`` needs that or a full schema); ``/openapi/v2``
  answers 404, so kubectl computes apply patches from its built-in types;
* ``pods`` (with ``pods/eviction`` and ``pods/status``), ``nodes`` (``nodes/status``), ``events``,
  ``poddisruptionbudgets`` (policy/v1) and ``nodeslos`` (slo.koordinator.sh/v1alpha1,
  cluster-scoped): get, list (``fieldSelector``, ``labelSelector``, ``limit``/``continue``), create,
  update (409 on a stale resourceVersion), patch (merge, strategic-merge, JSON patch and
  server-side apply), delete;
* ``watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines from the requested
  resourceVersion, objects moving in or out of a field selector turned into ADDED/DELETED as the
  real server does, ``BOOKMARK`` events with ``allowWatchBookmarks=true``, and the end of the
  stream after ``timeoutSeconds``;
* 410 Gone for a resourceVersion older than the retained history (:meth:`FakeCluster.compact`
  drops it all; ``history_limit`` bounds it), as an ``ERROR`` event in the stream (what a real
  server sends) or, with ``gone_as_status``, as a 410 response;
* ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``, answered from
  :attr:`FakeCluster.denied` (the group is not listed in discovery);
* Status objects for every error; bearer-token authentication when ``tokens`` is set;
* server-set metadata on every write: uid, resourceVersion, creationTimestamp, ``generation``
  (pods, PodDisruptionBudgets and NodeSLOs: 1 on create, +1 when anything but metadata and status
  changes) and ``managedFields`` (one FieldsV1 entry per field manager, operation and subresource:
  the request's ``fieldManager`` or its User-Agent up to the first ``/``); lists of built-in kinds
  carry no kind on their items, custom resources' lists (NodeSLOs) do.

Liberties a real server does not take, on purpose: a client-supplied ``metadata.uid`` is kept on
create (so a pod's uid can match its cgroup dirs on a :class:`~qosmanager.sim.fakehost.FakeHost`),
deletion is immediate (no grace period, no kubelet), and strategic-merge patches merge lists of
objects by their ``name`` (the merge key of containers, volumes and env) and replace other lists;
a manager's managedFields entry lists the fields of its last write only (the real server merges
them with what it owned before).

Fault injection: :meth:`FakeAPIServer.drop_connections` (every open connection is cut, watches
included), :meth:`FakeAPIServer.outage` (the port refuses connections until
:meth:`FakeAPIServer.recover`), ``delay`` (seconds before every answer) and
:meth:`FakeAPIServer.fail_next` (the next N matching requests answer an error code).
"""

from __future__ import annotations

import argparse
import base64
import bisect
import contextlib
import copy
import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from qosmanager.sim.objects import managed_field

Obj = dict[str, Any]

SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-qosmanager-fake", "gitCommit": "0" * 40,
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
                  "compiler": "gc", "platform": "linux/amd64"}
ALL_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
MAX_BODY = 16 << 20


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES = (
    ResourceType("", "v1", "pods", "Pod", True, ("po",), ("eviction", "status")),
    ResourceType("", "v1", "nodes", "Node", False, ("no",), ("status",)),
    ResourceType("", "v1", "events", "Event", True, ("ev",)),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",)),
    ResourceType("slo.koordinator.sh", "v1alpha1", "nodeslos", "NodeSLO", False),
)
_BY_KIND = {r.kind: r for r in RESOURCES}
# resources whose metadata.generation the real server keeps (pods since 1.33; nodes and events have none)
CUSTOM = frozenset({"nodeslos"})  # served from a CustomResourceDefinition
GENERATION = frozenset({"pods", "poddisruptionbudgets", "nodeslos"})
# metadata the server sets, never a manager's field
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "name",
                "namespace", "deletionTimestamp", "selfLink")


class ApiError(Exception):
    """An error answer: HTTP code, Status reason and message (and optional details / Retry-After)."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})
        self.retry_after = retry_after

    def status(self) -> Obj:
        out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def status_success(code: int = 200, details: Mapping[str, Any] | None = None) -> Obj:
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        out["details"] = dict(details)
    return out


def _not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.plural} "{name}" not found',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Writer:
    """Who writes and how, for the object's ``managedFields``: the field manager (the request's
    ``fieldManager`` or its User-Agent up to the first ``/``, as the real server defaults it), the
    operation (``Update``, or ``Apply`` for server-side apply) and the subresource (``status``)."""

    manager: str = "fakecluster"
    operation: str = "Update"
    subresource: str = ""


def _owned_fields(rt: ResourceType, written: Any) -> Obj:
    """The part of a written body a manager owns: everything but the server's metadata."""
    if not isinstance(written, dict):
        return {}
    out = {k: v for k, v in written.items() if k not in ("kind", "apiVersion", "metadata")}
    meta = written.get("metadata")
    if isinstance(meta, dict):
        mine = {k: v for k, v in meta.items() if k not in _SERVER_META}
        if mine:
            out["metadata"] = mine
    return out


def _track(rt: ResourceType, new: Obj, old: Obj | None, written: Any, writer: Writer) -> None:
    """Server-set metadata on a write: ``generation`` (1, then +1 when anything but metadata and
    status changes) and the writer's ``managedFields`` entry (replacing its previous one)."""
    meta = new["metadata"]
    old_meta = (old or {}).get("metadata") or {}
    if rt.plural in GENERATION:
        gen = old_meta.get("generation") or 1
        if old is not None and {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")}:
            gen += 1
        meta["generation"] = gen
    sent = meta.get("managedFields")
    if old is not None and sent is not None and sent != old_meta.get("managedFields"):
        return  # a client that writes managedFields itself gets what it wrote, as on a real server
    if old is None and sent:
        return
    fields = _owned_fields(rt, written)
    if writer.subresource == "status":
        fields = {"status": fields.get("status")} if fields.get("status") is not None else {}
    entries = [e for e in (old_meta.get("managedFields") or []) if isinstance(e, dict) and (
        e.get("manager"), e.get("operation"), e.get("subresource", "")) != (
        writer.manager, writer.operation, writer.subresource)]
    if fields:
        entries.append(managed_field(writer.manager, rt.api_version, _now_rfc3339(), fields,
                                     operation=writer.operation, subresource=writer.subresource))
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


# ----------------------------------------------------------------------------------------------
# selectors and patches
# ----------------------------------------------------------------------------------------------
def _field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str) -> list[tuple[str, str, str]]:
    """``a=b,c!=d`` -> [(path, op, value)]; ``ApiError(400)`` on anything else."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        out.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return out


def parse_label_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Equality, inequality, existence and set-based (``in``/``notin``) requirements."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for part in filter(None, (p.strip() for p in re.split(r",(?![^(]*\))", text))):
        m = re.fullmatch(r"([\w./\-]+)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            out.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"([\w./\-]+)\s*(==|!=|=)\s*([\w./\-]*)", part)
        if m:
            out.append((m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
            continue
        m = re.fullmatch(r"(!?)([\w./\-]+)", part)
        if m:
            out.append((m.group(2), "!exists" if m.group(1) else "exists", ()))
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return out


@dataclass(frozen=True)
class Selector:
    namespace: str | None = None
    fields: tuple[tuple[str, str, str], ...] = ()
    labels: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        for path, op, value in self.fields:
            if (_field_value(obj, path) == value) != (op == "="):
                return False
        labels = meta.get("labels") or {}
        for key, op, values in self.labels:
            present = key in labels
            if (op == "exists" and not present) or (op == "!exists" and present):
                return False
            if op in ("=", "in") and labels.get(key) not in values:
                return False
            if op in ("!=", "notin") and present and labels.get(key) in values:
                return False
        return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic-merge patch, simplified: lists of objects merge by ``name``, other lists replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys, $deleteFromPrimitiveList/...
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and isinstance(out.get(k), list) and v and all(
                isinstance(e, dict) and "name" in e for e in v):
            merged = {e.get("name"): e for e in out[k] if isinstance(e, dict)}
            order = [e.get("name") for e in out[k] if isinstance(e, dict)]
            for e in v:
                name = e["name"]
                if e.get("$patch") == "delete":
                    merged.pop(name, None)
                    continue
                if name not in merged:
                    order.append(name)
                merged[name] = strategic_merge_patch(merged.get(name), e)
            out[k] = [merged[n] for n in order if n in merged]
        else:
            new = strategic_merge_patch(out.get(k), v)
            if new is None:
                out.pop(k, None)
            else:
                out[k] = new
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test, copy, move)."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)

    def walk(parts: list[str]) -> tuple[Any, str]:
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    def get(parts: list[str]) -> Any:
        cur = doc
        for p in parts:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur

    def remove(parts: list[str]) -> Any:
        parent, last = walk(parts)
        return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)

    def add(parts: list[str], value: Any) -> None:
        nonlocal doc
        if not parts:
            doc = value
            return
        parent, last = walk(parts)
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), value)
        else:
            parent[last] = value

    try:
        for op in ops:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "add":
                add(parts, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(parts)
            elif kind == "replace":
                remove(parts)
                add(parts, copy.deepcopy(op["value"]))
            elif kind == "test":
                if get(parts) != op["value"]:
                    raise ApiError(422, "Invalid", f"test operation failed at {op['path']}")
            elif kind in ("copy", "move"):
                src = _pointer(op["from"])
                value = remove(src) if kind == "move" else copy.deepcopy(get(src))
                add(parts, value)
            else:
                raise ApiError(400, "BadRequest", f"unknown JSON patch operation {kind!r}")
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ApiError(422, "Invalid", f"JSON patch cannot be applied: {e!r}") from None
    return doc


# ----------------------------------------------------------------------------------------------
# the cluster
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    rv: int
    plural: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None


@dataclass
class EvictionRequest:
    namespace: str
    name: str
    uid_precondition: str | None
    code: int
    body: Obj
    ts: float = field(default_factory=time.time)


class FakeCluster:
    """Objects, resourceVersions, history and eviction policy; every method is thread-safe.

    Stored objects are never mutated (every change stores a new dict), so readers serialise
    them without copying.
    """

    def __init__(self, *, history_limit: int = 10_000) -> None:
        self.cond = threading.Condition()
        self.rv = 1
        self.history_limit = history_limit
        self.objects: dict[str, dict[tuple[str, str], Obj]] = {r.plural: {} for r in RESOURCES}
        self._history: list[Change] = []
        self._history_rvs: list[int] = []
        self.compacted_rv = 0  # a watch from an older resourceVersion gets 410 Gone
        self.eviction_policy: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
        self.evictions: list[EvictionRequest] = []
        self.evict_deletes = True  # a granted eviction deletes the pod (no kubelet to do it)
        # the Eviction versions pods/eviction accepts: both from Kubernetes 1.22, policy/v1beta1 alone
        # before (a policy/v1 body is then a 400, worded as the real server words it); empty: the
        # subresource is not served at all (404 without a pod named, as from a proxy that lacks it)
        self.eviction_versions: tuple[str, ...] = ("policy/v1", "policy/v1beta1")
        # SelfSubjectAccessReviews: what the caller may not do, as (verb, group, resource, subresource,
        # namespace) with "*" matching anything (the review answers allowed: false); with
        # ``access_reviews_forbidden`` the review itself is refused (403), as for an account whose
        # RBAC does not grant creating them
        self.denied: set[tuple[str, str, str, str, str]] = set()
        self.access_reviews_forbidden = False
        self.access_reviews: list[Obj] = []  # every review's spec.resourceAttributes

    # ------------------------------------------------------------------ storage
    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _record(self, plural: str, type_: str, obj: Obj, old: Obj | None) -> None:
        ch = Change(self.rv, plural, type_, obj, old)
        self._history.append(ch)
        self._history_rvs.append(ch.rv)
        if len(self._history) > self.history_limit:
            drop = len(self._history) - self.history_limit
            self.compacted_rv = self._history[drop - 1].rv
            del self._history[:drop]
            del self._history_rvs[:drop]
        self.cond.notify_all()

    @staticmethod
    def resource(kind_or_plural: str) -> ResourceType:
        for r in RESOURCES:
            if kind_or_plural in (r.kind, r.plural):
                return r
        raise KeyError(f"the fake API server has no resource {kind_or_plural!r}")

    def create(self, rt: ResourceType, obj: Obj, namespace: str | None = None, *,
               writer: Writer = Writer()) -> Obj:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        written = obj
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "Invalid", f"{rt.kind}: metadata.name: Required value: name is required")
        ns = self._namespace(rt, meta, namespace)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        with self.cond:
            store = self.objects[rt.plural]
            if (ns, name) in store:
                raise ApiError(409, "AlreadyExists", f'{rt.plural} "{name}" already exists',
                               {"name": name, "group": rt.group, "kind": rt.plural})
            meta.setdefault("uid", str(uuid.uuid4()))  # fake liberty: a supplied uid is kept
            meta["resourceVersion"] = str(self._bump())
            meta.setdefault("creationTimestamp", _now_rfc3339())
            _track(rt, obj, None, written, writer)
            if rt.plural == "events":
                obj.setdefault("count", 1)
            store[(ns, name)] = obj
            self._record(rt.plural, "ADDED", obj, None)
            return obj

    @staticmethod
    def _namespace(rt: ResourceType, meta: dict[str, Any], namespace: str | None) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        ns = namespace or meta.get("namespace") or "default"
        if meta.get("namespace") not in (None, "", ns):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                              "namespace sent on the request")
        meta["namespace"] = ns
        return str(ns)

    def get(self, rt: ResourceType, name: str, namespace: str = "") -> Obj:
        with self.cond:
            obj = self.objects[rt.plural].get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise _not_found(rt, name)
        return obj

    def update(self, rt: ResourceType, name: str, obj: Obj, namespace: str = "", *, only_status: bool = False,
               writer: Writer = Writer()) -> Obj:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        ns = namespace if rt.namespaced else ""
        with self.cond:
            old = self.objects[rt.plural].get((ns, name))
            if old is None:
                raise _not_found(rt, name)
            sent_rv = (obj.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.plural} "{name}": the '
                                                "object has been modified; please apply your changes to the "
                                                "latest version and try again",
                               {"name": name, "group": rt.group, "kind": rt.plural})
            if only_status:
                new = copy.deepcopy(old)
                new["status"] = copy.deepcopy(obj.get("status"))
            else:
                new = copy.deepcopy(obj)
            return self._replace(rt, ns, name, old, new, obj, writer)

    def _replace(self, rt: ResourceType, ns: str, name: str, old: Obj, new: Obj, written: Any = None,
                 writer: Writer = Writer()) -> Obj:
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict) or meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        for key in ("uid", "creationTimestamp", "name"):
            meta[key] = old["metadata"].get(key, name if key == "name" else None)
        if "managedFields" not in meta and "managedFields" in old["metadata"]:
            meta["managedFields"] = old["metadata"]["managedFields"]
        meta.pop("generation", None)
        if "generation" in old["metadata"]:
            meta["generation"] = old["metadata"]["generation"]
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        new_cmp = {k: v for k, v in new.items() if k != "metadata"}
        old_cmp = {k: v for k, v in old.items() if k != "metadata"}
        meta_cmp = {k: v for k, v in meta.items() if k != "resourceVersion"}
        old_meta = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
        if new_cmp == old_cmp and meta_cmp == old_meta:
            return old  # a no-op update keeps the resourceVersion, as the real server does
        _track(rt, new, old, new if written is None else written, writer)
        meta["resourceVersion"] = str(self._bump())
        self.objects[rt.plural][(ns, name)] = new
        self._record(rt.plural, "MODIFIED", new, old)
        return new

    def patch(self, rt: ResourceType, name: str, content_type: str, body: bytes, namespace: str = "", *,
              only_status: bool = False, writer: Writer = Writer()) -> Obj:
        ct = content_type.split(";")[0].strip()
        ns = namespace if rt.namespaced else ""
        try:
            if ct == "application/apply-patch+yaml":
                patch = yaml.safe_load(body)
            else:
                patch = json.loads(body or b"null")
        except (ValueError, yaml.YAMLError) as e:
            raise ApiError(400, "BadRequest", f"cannot decode the patch: {e}") from None
        with self.cond:
            old = self.objects[rt.plural].get((ns, name))
            if old is None:
                if ct == "application/apply-patch+yaml":  # server-side apply creates
                    return self.create(rt, patch, namespace, writer=writer)
                raise _not_found(rt, name)
            if only_status and isinstance(patch, dict):
                patch = {"status": patch.get("status")}
            if ct == "application/merge-patch+json" or ct == "application/apply-patch+yaml":
                new = merge_patch(old, patch)
            elif ct == "application/strategic-merge-patch+json":
                new = strategic_merge_patch(old, patch)
            elif ct == "application/json-patch+json":
                new = json_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format ({ct!r}) - accepted media "
                               "types include: application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml, application/strategic-merge-patch+json")
            if not isinstance(new, dict):
                raise ApiError(422, "Invalid", "the patched object is not an object")
            meta = patch.get("metadata") if isinstance(patch, dict) else None
            sent_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.plural} "{name}": the '
                                                "object has been modified")
            written = new if ct == "application/json-patch+json" else patch
            return self._replace(rt, ns, name, old, new, written, writer)

    def delete(self, rt: ResourceType, name: str, namespace: str = "", uid: str | None = None) -> Obj:
        ns = namespace if rt.namespaced else ""
        with self.cond:
            old = self.objects[rt.plural].get((ns, name))
            if old is None:
                raise _not_found(rt, name)
            if uid and old["metadata"].get("uid") != uid:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, UID in "
                                                f"object meta: {old['metadata'].get('uid')}")
            del self.objects[rt.plural][(ns, name)]
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._bump())
            self._record(rt.plural, "DELETED", gone, old)
            return gone

    def select(self, rt: ResourceType, selector: Selector) -> tuple[list[Obj], int]:
        with self.cond:
            items = [o for o in self.objects[rt.plural].values() if selector.matches(o)]
            items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            return items, self.rv

    # ------------------------------------------------------------------ test helpers
    def put(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace an object (its ``kind`` names the resource); watches see ADDED or MODIFIED."""
        rt = self.resource(str(obj.get("kind")))
        meta = obj.get("metadata") or {}
        ns = (meta.get("namespace") or "default") if rt.namespaced else ""
        with self.cond:
            old = self.objects[rt.plural].get((ns, str(meta.get("name"))))
            if old is None:
                return self.create(rt, dict(obj), ns or None)
            new = copy.deepcopy(dict(obj))
            new.setdefault("metadata", {}).pop("resourceVersion", None)
            return self._replace(rt, ns, str(meta.get("name")), old, new)

    def remove(self, kind: str, name: str, namespace: str = "default") -> Obj:
        rt = self.resource(kind)
        return self.delete(rt, name, namespace if rt.namespaced else "")

    def items(self, kind: str) -> list[Obj]:
        rt = self.resource(kind)
        return self.select(rt, Selector())[0]

    def compact(self) -> None:
        """Forget the whole history: every watch from an older resourceVersion gets 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self._history.clear()
            self._history_rvs.clear()

    def set_eviction_policy(self, namespace: str, name: str, *codes: int,
                            retry_after: int | None = None) -> None:
        """Answers to eviction requests for one pod, in order; the last one repeats (default: 201)."""
        for c in codes:
            if c not in (201, 404, 429, 500):
                raise ValueError(f"eviction answer must be 201, 404, 429 or 500, got {c}")
        with self.cond:
            self.eviction_policy[(namespace, name)] = [(c, retry_after) for c in codes] or [(201, None)]

    # ------------------------------------------------------------------ watches and evictions
    def changes_after(self, rv: int, plural: str) -> tuple[list[Change], int]:
        """Changes of ``plural`` after ``rv`` (caller holds ``cond``); raises 410 when compacted away."""
        if rv < self.compacted_rv:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted_rv + 1})")
        i = bisect.bisect_right(self._history_rvs, rv)
        return [c for c in self._history[i:] if c.plural == plural], self.rv

    def evict(self, namespace: str, name: str, body: Obj) -> Obj:
        pods = _BY_KIND["Pod"]
        # as the real server decodes a create: a body without kind/apiVersion is taken as the expected kind
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be a policy Eviction")
        pre = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        with self.cond:
            if not self.eviction_versions:
                self.evictions.append(EvictionRequest(namespace, name, pre, 404, copy.deepcopy(body)))
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            version = body.get("apiVersion", self.eviction_versions[0])
            if version not in self.eviction_versions:
                self.evictions.append(EvictionRequest(namespace, name, pre, 400, copy.deepcopy(body)))
                v = str(version).rpartition("/")[2]
                raise ApiError(400, "BadRequest", f'Eviction in version "{v}" cannot be handled as a '
                                                  f'Eviction: no kind "Eviction" is registered for version '
                                                  f'"{version}" in scheme '
                                                  '"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"')
            queue = self.eviction_policy.get((namespace, name))
            code, retry_after = queue[0] if queue else (201, None)
            if queue and len(queue) > 1:
                queue.pop(0)
            pod = self.objects["pods"].get((namespace, name))
            if pod is None:
                code = 404
            elif pre and pod["metadata"].get("uid") != pre:
                code = 409
            self.evictions.append(EvictionRequest(namespace, name, pre, code, copy.deepcopy(body)))
            if code == 404:
                raise _not_found(pods, name)
            if code == 409:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {pre}, UID in "
                                                f"object meta: {pod['metadata'].get('uid') if pod else ''}")
            if code == 429:
                cause = f"The disruption budget {name}-pdb needs 1 healthy pods and has 1 currently"
                details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
                if retry_after:
                    details["retryAfterSeconds"] = retry_after
                raise ApiError(429, "TooManyRequests",
                               "Cannot evict pod as it would violate the pod's disruption budget.", details,
                               retry_after)
            if code == 500:
                raise ApiError(500, "InternalError", "Internal error occurred: eviction failed (injected)")
            if self.evict_deletes:
                self.delete(pods, name, namespace)
        return status_success(201)

    def access_review(self, body: Obj) -> Obj:
        """A SelfSubjectAccessReview answered from :attr:`denied` (everything else is allowed)."""
        if self.access_reviews_forbidden:
            raise ApiError(403, "Forbidden", 'selfsubjectaccessreviews.authorization.k8s.io is forbidden: '
                                             'User "system:serviceaccount:qosmanager:qosmanager" cannot '
                                             'create resource "selfsubjectaccessreviews" in API group '
                                             '"authorization.k8s.io" at the cluster scope')
        if body.get("kind", "SelfSubjectAccessReview") != "SelfSubjectAccessReview":
            raise ApiError(400, "BadRequest", "the body must be a SelfSubjectAccessReview")
        attrs = (body.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attrs, dict):
            raise ApiError(422, "Invalid", "spec.resourceAttributes: Required value")
        names = ("verb", "group", "resource", "subresource", "namespace")
        key = tuple(str(attrs.get(k) or "") for k in names)
        with self.cond:
            self.access_reviews.append(copy.deepcopy(attrs))
            denied = any(all(d in ("*", k) for d, k in zip(rule, key, strict=True)) for rule in self.denied)
        status: Obj = {"allowed": not denied}
        if denied:
            status["reason"] = "no RBAC policy matched"  # what the RBAC authorizer says
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": copy.deepcopy(body.get("spec")),
                "status": status}


# ----------------------------------------------------------------------------------------------
# discovery
# ----------------------------------------------------------------------------------------------
def _api_resource(r: ResourceType, sub: str = "", eviction_versions: tuple[str, ...] = ("policy/v1",)) -> Obj:
    if sub == "eviction":
        # the entry names the Eviction's group and version, the preferred one the server takes:
        # policy/v1 from Kubernetes 1.22, policy/v1beta1 before
        gv = "policy/v1" if "policy/v1" in eviction_versions else eviction_versions[0]
        group, _, version = gv.rpartition("/")
        return {"name": f"{r.plural}/eviction", "singularName": "", "namespaced": r.namespaced,
                "group": group, "version": version, "kind": "Eviction", "verbs": ["create"]}
    if sub:
        return {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                "verbs": ["get", "patch", "update"]}
    out: Obj = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                "verbs": ALL_VERBS}
    if r.short_names:
        out["shortNames"] = list(r.short_names)
    if r.plural == "pods":
        out["categories"] = ["all"]
    return out


def resource_list(group: str, version: str,
                  eviction_versions: tuple[str, ...] = ("policy/v1",)) -> Obj | None:
    """The APIResourceList of ``group/version``; ``pods/eviction`` as a cluster serving
    ``eviction_versions`` lists it (not at all when it serves none)."""
    rs = [r for r in RESOURCES if r.group == group and r.version == version]
    if not rs:
        return None
    gv = f"{group}/{version}" if group else version
    resources = []
    for r in rs:
        resources.append(_api_resource(r))
        resources.extend(_api_resource(r, s, eviction_versions) for s in r.subresources
                         if s != "eviction" or eviction_versions)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def openapi_v3_index() -> Obj:
    gvs = sorted({(r.group, r.version) for r in RESOURCES})
    paths = {}
    for g, v in gvs:
        key = f"apis/{g}/{v}" if g else f"api/{v}"
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={SERVER_VERSION['gitVersion']}"}
    return {"paths": paths}


def openapi_v3_document(group: str, version: str) -> Obj | None:
    """Just enough OpenAPI v3 for kubectl: every object path's PATCH names its kind and accepts
    ``fieldValidation``, so kubectl leaves validation to the server (which here accepts anything) and
    computes apply patches from its built-in types (no strategic-merge schema is declared)."""
    rs = [r for r in RESOURCES if r.group == group and r.version == version]
    if not rs:
        return None
    paths: Obj = {}
    for r in rs:
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        ns = "/namespaces/{namespace}" if r.namespaced else ""
        gvk = {"group": group, "version": version, "kind": r.kind}
        params = [{"name": "fieldValidation", "in": "query",
                   "schema": {"type": "string", "uniqueItems": True}}]
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": {
            "description": "OK"}}}
        paths[f"{base}{ns}/{r.plural}/{{name}}"] = {
            "get": {**op, "x-kubernetes-action": "get"}, "put": {**op, "x-kubernetes-action": "put"},
            "patch": {**op, "x-kubernetes-action": "patch"}}
        paths[f"{base}{ns}/{r.plural}"] = {"post": {**op, "x-kubernetes-action": "post"},
                                            "get": {**op, "x-kubernetes-action": "list"}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


def group_list() -> Obj:
    groups: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, vs) for g, vs in groups.items()]}


def _group(name: str, versions: list[str]) -> Obj:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": vs, "preferredVersion": vs[0]}


# ----------------------------------------------------------------------------------------------
# HTTP
# ----------------------------------------------------------------------------------------------
@dataclass
class _Fault:
    method: str
    path_re: re.Pattern[str]
    code: int
    count: int
    retry_after: int | None = None
    query_re: re.Pattern[str] | None = None


@dataclass
class RequestRecord:
    method: str
    path: str
    query: str
    code: int  # 0 while the request is being served (a watch streaming)
    user_agent: str
    authorization: str
    content_type: str


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        with self.server.owner.lock:
            self.server.owner.connections.add(self.connection)
            self.server.owner.accepted += 1

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.owner.lock:
                self.server.owner.connections.discard(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        owner = self.server.owner
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        rec = RequestRecord(method, url.path, url.query, 0, self.headers.get("User-Agent", ""),
                            self.headers.get("Authorization", ""), self.headers.get("Content-Type", ""))
        owner.log_request_record(rec)  # logged on arrival: a watch is seen while it streams
        body = self._body()
        code = 500
        try:
            if owner.delay > 0:
                time.sleep(owner.delay)
            owner.check_auth(self.headers.get("Authorization", ""))
            owner.check_fault(method, url.path, url.query)
            code = self._route(method, url.path, query, body)
        except ApiError as e:
            code = e.code
            headers = {"Retry-After": str(e.retry_after)} if e.retry_after else {}
            self._send(e.code, e.status(), headers)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            rec.code = code

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "request entity too large")
        return self.rfile.read(n) if n > 0 else b""

    def _send(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, body: bytes) -> Obj:
        try:
            obj = json.loads(body or b"null")
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"cannot decode the body: {e}") from None
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        return obj

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> int:
        owner = self.server.owner
        parts = [p for p in path.split("/") if p]
        if method == "GET":
            static = self._discovery(parts)
            if static is not None:
                self._send(200, static)
                return 200
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
            self._send(201, owner.cluster.access_review(self._json(body)))
            return 201
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        rt = next((r for r in RESOURCES if (r.group, r.version) == (group, version) and rest and
                   r.plural == rest[0]), None)
        if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        cluster = owner.cluster
        ns = namespace or ""
        if not name:
            if method == "GET":
                selector = Selector(namespace, tuple(parse_field_selector(query.get("fieldSelector", ""))),
                                    tuple(parse_label_selector(query.get("labelSelector", ""))))
                if query.get("watch") in ("true", "1"):
                    self._watch(rt, selector, query)
                    return 200
                return self._list(rt, selector, query)
            if method == "POST":
                self._send(201, cluster.create(rt, self._json(body), namespace, writer=self._writer(query)))
                return 201
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "only POST creates an eviction")
            self._send(201, cluster.evict(ns, name, self._json(body)))
            return 201
        only_status = sub == "status"
        writer = self._writer(query, content_type=self.headers.get("Content-Type", ""), subresource=sub)
        if method == "GET":
            self._send(200, cluster.get(rt, name, ns))
        elif method == "PUT":
            self._send(200, cluster.update(rt, name, self._json(body), ns, only_status=only_status,
                                           writer=writer))
        elif method == "PATCH":
            self._send(200, cluster.patch(rt, name, self.headers.get("Content-Type", ""), body, ns,
                                          only_status=only_status, writer=writer))
        elif method == "DELETE":
            opts = json.loads(body) if body.strip() else {}
            uid = ((opts.get("preconditions") or {}).get("uid")) if isinstance(opts, dict) else None
            self._send(200, cluster.delete(rt, name, ns, uid))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")
        return 200

    def _writer(self, query: dict[str, str], *, content_type: str = "", subresource: str = "") -> Writer:
        manager = query.get("fieldManager") or self.headers.get("User-Agent", "").split("/")[0].strip()
        apply = content_type.split(";")[0].strip() == "application/apply-patch+yaml"
        return Writer(manager or "unknown", "Apply" if apply else "Update", subresource)

    def _discovery(self, parts: list[str]) -> Obj | None:
        owner = self.server.owner
        if parts == ["version"]:
            return SERVER_VERSION
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return {"status": "ok"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{owner.host}:{owner.port}"}]}
        if parts == ["apis"]:
            return group_list()
        if parts[:2] == ["openapi", "v3"]:
            if len(parts) == 2:
                return openapi_v3_index()
            doc = None
            if len(parts) == 4 and parts[2] == "api":
                doc = openapi_v3_document("", parts[3])
            elif len(parts) == 5 and parts[2] == "apis":
                doc = openapi_v3_document(parts[3], parts[4])
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return doc
        if len(parts) == 2 and parts[0] == "api":
            out = resource_list("", parts[1], owner.cluster.eviction_versions)
            if out is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return out
        if len(parts) == 2 and parts[0] == "apis":
            versions = sorted({r.version for r in RESOURCES if r.group == parts[1]})
            if not versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _group(parts[1], versions)
        if len(parts) == 3 and parts[0] == "apis":
            out = resource_list(parts[1], parts[2])
            if out is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return out
        return None

    def _list(self, rt: ResourceType, selector: Selector, query: dict[str, str]) -> int:
        items, rv = self.server.owner.cluster.select(rt, selector)
        meta: Obj = {"resourceVersion": str(rv)}
        limit = int(query.get("limit") or 0)
        start = 0
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"]))
                start, rv = int(token["start"]), int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "BadRequest", "invalid continue token") from None
            if rv < self.server.owner.cluster.compacted_rv:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                               "consistent list result. You can start a new list without the "
                                               "continue parameter.")
            meta["resourceVersion"] = str(rv)
        if limit > 0 and start + limit < len(items):
            token = json.dumps({"start": start + limit, "rv": rv}).encode()
            meta["continue"] = base64.urlsafe_b64encode(token).decode()
            meta["remainingItemCount"] = len(items) - start - limit
            items = items[start:start + limit]
        else:
            items = items[start:]
        # lists of built-in kinds carry no kind/apiVersion on their items; custom resources' lists do
        if rt.plural not in CUSTOM:
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        out = {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}
        self._send(200, out)
        return 200

    # ------------------------------------------------------------------ watch
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, type_: str, obj: Obj) -> None:
        self._chunk(json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n")

    def _watch(self, rt: ResourceType, selector: Selector, query: dict[str, str]) -> None:
        owner = self.server.owner
        cluster = owner.cluster
        timeout = float(query.get("timeoutSeconds") or owner.max_watch_seconds)
        timeout = min(timeout, owner.max_watch_seconds)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_text = query.get("resourceVersion", "")
        initial: list[Obj] = []
        try:
            rv = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv_text!r}") from None
        gone: ApiError | None = None
        with cluster.cond:
            if rv is None:
                initial, rv = cluster.select(rt, selector)
            elif rv < cluster.compacted_rv:
                gone = ApiError(410, "Expired",
                                f"too old resource version: {rv} ({cluster.compacted_rv + 1})")
        if gone is not None and owner.gone_as_status:
            raise gone
        generation = owner.drop_generation
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        if gone is not None:
            self._event("ERROR", gone.status())
            self._chunk(b"")
            return
        for obj in initial:
            self._event("ADDED", obj)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + owner.bookmark_interval
        while True:
            with cluster.cond:
                try:
                    changes, current = cluster.changes_after(rv, rt.plural)
                    if not changes:
                        wait = min(deadline, next_bookmark) - time.monotonic()
                        if wait > 0 and generation == owner.drop_generation and not owner.stopping:
                            cluster.cond.wait(min(wait, 0.5))
                        changes, current = cluster.changes_after(rv, rt.plural)
                except ApiError as e:
                    changes, current, gone = [], rv, e
            if generation != owner.drop_generation or owner.stopping:
                self.close_connection = True
                return  # cut without the terminating chunk: the client sees a broken stream
            if gone is not None:
                self._event("ERROR", gone.status())
                break
            for change in changes:
                out = self._translate(change, selector)
                if out is not None:
                    self._event(out, change.obj)
            rv = current
            now = time.monotonic()
            if bookmarks and (now >= next_bookmark or now >= deadline):
                self._event("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                                         "metadata": {"resourceVersion": str(rv)}})
                next_bookmark = now + owner.bookmark_interval
            if now >= deadline:
                break
        self._chunk(b"")

    @staticmethod
    def _translate(ch: Change, selector: Selector) -> str | None:
        new_match = selector.matches(ch.obj)
        if ch.type == "ADDED":
            return "ADDED" if new_match else None
        if ch.type == "DELETED":
            return "DELETED" if new_match else None
        old_match = ch.old is not None and selector.matches(ch.old)
        if old_match and new_match:
            return "MODIFIED"
        if new_match:
            return "ADDED"
        if old_match:
            return "DELETED"
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: FakeAPIServer
    tls_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        # the TLS handshake runs on the connection's own thread, never on the accepting one
        if self.tls_context is not None:
            request = self.tls_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that goes away mid-request is normal here (fault injection)


class FakeAPIServer:
    """Serves a :class:`FakeCluster` on 127.0.0.1 (see the module docstring)."""

    def __init__(self, cluster: FakeCluster | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 tls: tuple[str, str] | None = None, client_ca: str | None = None,
                 tokens: Iterable[str] | None = None, bookmark_interval: float = 60.0,
                 max_watch_seconds: float = 1800.0, gone_as_status: bool = False) -> None:
        self.cluster = cluster or FakeCluster()
        self.host = host
        self.port = port
        self.tls = tls
        self.client_ca = client_ca
        self.tokens: set[str] | None = set(tokens) if tokens is not None else None
        self.bookmark_interval = bookmark_interval
        self.max_watch_seconds = max_watch_seconds
        self.gone_as_status = gone_as_status
        self.delay = 0.0
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self.accepted = 0  # connections accepted (keep-alive reuse shows as fewer connections than requests)
        self.drop_generation = 0
        self.stopping = False
        self.requests: deque[RequestRecord] = deque(maxlen=10_000)
        self._faults: list[_Fault] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self) -> FakeAPIServer:
        server = _Server((self.host, self.port), _Handler, bind_and_activate=False)
        server.owner = self
        server.server_bind()
        server.server_activate()
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            if self.client_ca:
                ctx.load_verify_locations(self.client_ca)
                ctx.verify_mode = ssl.CERT_REQUIRED
            server.tls_context = ctx
        self.port = server.server_address[1]
        self.stopping = False
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fakeapi:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAPIServer:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults
    def drop_connections(self) -> None:
        """Cut every open connection (watch streams included) as a crashed server or proxy would."""
        with self.lock:
            conns = list(self.connections)
            self.drop_generation += 1
        with self.cluster.cond:
            self.cluster.cond.notify_all()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def outage(self) -> None:
        """Stop listening (new connections are refused) and cut the open ones, until :meth:`recover`."""
        self.stop()

    def recover(self) -> None:
        """Listen again on the same port."""
        if self._server is None:
            self.start()

    def fail_next(self, method: str, path_pattern: str, code: int, count: int = 1, *,
                  retry_after: int | None = None, query: str | None = None) -> None:
        """The next ``count`` requests of ``method`` whose path matches the regex (and whose query
        string matches ``query``, when given: ``"watch="`` for watches only) answer ``code``, with a
        ``Retry-After`` header and ``details.retryAfterSeconds`` when ``retry_after`` is set."""
        with self.lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_pattern), code, count, retry_after,
                                       re.compile(query) if query is not None else None))

    def check_fault(self, method: str, path: str, query: str = "") -> None:
        with self.lock:
            for f in self._faults:
                if (f.count > 0 and f.method in (method, "*") and f.path_re.search(path)
                        and (f.query_re is None or f.query_re.search(query))):
                    f.count -= 1
                    reason = "InternalError" if f.code >= 500 else "TooManyRequests" if f.code == 429 else "BadRequest"
                    details = {"retryAfterSeconds": f.retry_after} if f.retry_after else None
                    raise ApiError(f.code, reason, f"injected failure {f.code}", details, retry_after=f.retry_after)

    def check_auth(self, authorization: str) -> None:
        if self.tokens is None:
            return
        token = authorization[7:] if authorization.startswith("Bearer ") else ""
        if token not in self.tokens:
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def log_request_record(self, rec: RequestRecord) -> None:
        self.requests.append(rec)

    def requests_to(self, method: str, pattern: str) -> list[RequestRecord]:
        rx = re.compile(pattern)
        return [r for r in list(self.requests) if r.method == method and rx.search(r.path)]

    # ------------------------------------------------------------------ clients
    def kubeconfig(self, path: str, *, token: str | None = None, token_file: str | None = None,
                   ca_file: str | None = None, insecure: bool = False, namespace: str = "default",
                   client_cert: tuple[str, str] | None = None) -> str:
        """Write a kubeconfig for this server (for the agent's client and for kubectl)."""
        cluster: Obj = {"server": self.url}
        if self.tls:
            if insecure:
                cluster["insecure-skip-tls-verify"] = True
            else:
                cluster["certificate-authority"] = ca_file or self.tls[0]
        user: Obj = {}
        if token:
            user["token"] = token
        if token_file:
            user["tokenFile"] = token_file
        if client_cert:
            user["client-certificate"], user["client-key"] = client_cert
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": cluster}],
               "users": [{"name": "fake", "user": user}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                         "namespace": namespace}}],
               "preferences": {}}
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        return path


def make_self_signed_cert(directory: str, host: str = "127.0.0.1") -> tuple[str, str]:
    """A certificate and key for ``host`` (an IP SAN and ``localhost``), made with the openssl CLI.

    Raises ``RuntimeError`` with the reason when openssl is missing or fails.
    """
    os.makedirs(directory, exist_ok=True)
    cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=qosmanager-fake-apiserver",
           "-addext", f"subjectAltName=IP:{host},DNS:localhost"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"cannot run openssl to make a test certificate: {e}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"openssl failed to make a test certificate: {proc.stderr.strip()}")
    return cert, key


def load_documents(text: str) -> Iterator[Obj]:
    """Objects of a YAML/JSON stream; ``List`` kinds are flattened."""
    for doc in yaml.safe_load_all(text):
        if not isinstance(doc, dict):
            continue
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            yield from (i for i in doc["items"] if isinstance(i, dict))
        else:
            yield doc


def main(argv: list[str] | None = None) -> int:
    """``python tests/fakeapi.py``: serve a fake cluster for demos and measurements."""
    p = argparse.ArgumentParser(prog="python tests/fakeapi.py", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tls-dir", default=None, help="serve HTTPS with a certificate made here")
    p.add_argument("--load", action="append", default=[], help="YAML/JSON objects to create (repeatable)")
    p.add_argument("--kubeconfig", default=None, help="write a kubeconfig for this server here")
    args = p.parse_args(argv)
    cluster = FakeCluster()
    for path in args.load:
        with open(path, encoding="utf-8") as f:
            for obj in load_documents(f.read()):
                cluster.put(obj)
    tls = make_self_signed_cert(args.tls_dir) if args.tls_dir else None
    server = FakeAPIServer(cluster, port=args.port, tls=tls).start()
    if args.kubeconfig:
        server.kubeconfig(args.kubeconfig)
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
