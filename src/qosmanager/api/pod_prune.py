"""Pruning: a Pod object cut down to what its view reads, and its digest.

**Only what is read is kept.** :func:`prune_pod` cuts a Pod object down to the fields the view
reads (under 1 KB of a pod's usual 5 KB: no ``managedFields``, volumes, env, conditions), and the
sources prune every pod as it arrives (:func:`prune_pod_hook` while a list is decoded).  Two
objects that prune alike give the same view, so a view keeps only a 64-bit digest of its pruned
object (:attr:`~qosmanager.api.pod.PodMeta.digest`, :func:`pod_digest`) to tell a changed pod from an unchanged one:
a 10,000-pod node holds no API object at all once its views are built.

The view (:mod:`qosmanager.api.pod`) builds from pruned objects; import the names from there.

Map of the file:

* :func:`prune_pod` keeps the fields :func:`~qosmanager.api.pod.pod_meta` reads (under 1 KB of a
  pod's usual 5 KB), :func:`pruned_text` is its canonical JSON;
* :class:`PrunedPod`: a pod as that text, how a decoded pod list waits for its views;
* :func:`pod_digest` tells a changed pod from an unchanged one; :func:`prune_pod_hook` prunes each
  pod as a list is decoded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------------------------
# Pruning: what the view reads, and nothing else

_KEEP_SECTIONS: dict[str, tuple[str, ...]] = {
    "metadata": ("uid", "name", "namespace", "labels", "annotations", "resourceVersion"),
    "spec": ("containers", "initContainers", "overhead", "priority"),
    "status": ("phase", "qosClass", "containerStatuses", "initContainerStatuses"),
}
_KEEP_ITEMS: dict[str, tuple[str, ...]] = {
    "containers": ("name", "resources", "restartPolicy"),
    "initContainers": ("name", "resources", "restartPolicy"),
    "containerStatuses": ("name", "containerID", "state"),
    "initContainerStatuses": ("name", "containerID", "state"),
}


def _pick(obj: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: obj[k] for k in keys if k in obj}


def prune_pod(obj: Any) -> Any:
    """``obj`` cut down to the fields :func:`pod_meta` reads; anything that is not shaped like a
    Pod there (a section that is not an object, a container list that is not a list) is kept as
    it is, so the view reports the same error for it.  Idempotent."""
    if not isinstance(obj, Mapping):
        return obj
    out: dict[str, Any] = {}
    for section, keys in _KEEP_SECTIONS.items():
        if section not in obj:
            continue
        part = obj[section]
        if not isinstance(part, Mapping):
            out[section] = part
            continue
        picked = _pick(part, keys)
        for key, value in picked.items():
            item_keys = _KEEP_ITEMS.get(key)
            if item_keys is not None and isinstance(value, list):
                picked[key] = [_pick(v, item_keys) if isinstance(v, Mapping) else v for v in value]
        out[section] = picked
    return out


def pruned_text(obj: Any) -> str:
    """The canonical JSON of the pruned object (sorted keys, no spaces; a YAML date or other non-JSON
    value by its ``repr``)."""
    return json.dumps(prune_pod(obj), sort_keys=True, separators=(",", ":"), default=repr)


@dataclass(frozen=True, slots=True)
class PrunedPod:
    """A pod as the canonical JSON text of its pruned object: one string where the decoded object
    is some fifty dicts, lists and strings (under 1 KB instead of about 4 KB), which is how a list of
    10,000 pods waits between decoding and the views.  Only a pod whose digest changed is decoded
    again (:meth:`object`)."""

    uid: str  # metadata.uid when it is a string, else ""
    text: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PrunedPod:
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return cls(uid if isinstance(uid, str) else "", pruned_text(obj))

    @property
    def digest(self) -> int:
        return hash(self.text)

    def object(self) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.text)
        return obj


def pod_digest(obj: Any) -> int:
    """64 bits that differ when the fields a view reads differ: the process's string hash (SipHash)
    of :func:`pruned_text`.  Stable within a process, which is all a view needs (``hashlib`` would
    load OpenSSL, 3.5 MiB, for nothing)."""
    return obj.digest if isinstance(obj, PrunedPod) else hash(pruned_text(obj))


def prune_pod_hook(obj: dict[str, Any]) -> Any:
    """A ``json`` ``object_hook``: every object that looks like a Pod (``metadata`` beside ``spec`` or
    ``status``, kind Pod or none) becomes a :class:`PrunedPod` as soon as it is decoded, so decoding
    a pod list never holds more than one whole pod, and the list holds one string per pod."""
    if "metadata" in obj and ("spec" in obj or "status" in obj) and obj.get("kind", "Pod") == "Pod":
        return PrunedPod.of(obj)
    return obj
