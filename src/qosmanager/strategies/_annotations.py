"""What a strategy does with a pod whose annotation for its feature cannot be decoded.

koordlet falls back to the node's config for such a pod, which resets whatever the pod's own
annotation had set (its 2048-IOPS throttle back to unlimited, its memory protection to the class
values).  Here (a koordlet fix) the strategy leaves that pod's files as they are, and says so once
per pod change: an audit record ``action: "skip"`` naming the pod, the annotation and why.  The
store has already logged the pod's warning when its view was built.
"""

from __future__ import annotations

from collections.abc import Mapping

from qosmanager.api.pod import INVALID_ANNOTATION_NOTE, PodMeta
from qosmanager.framework.context import Context


class InvalidAnnotations:
    """Audits, once per pod and annotation text, that a strategy skips a pod's feature."""

    def __init__(self, strategy: str, annotation: str, what: str) -> None:
        self.strategy = strategy
        self.annotation = annotation
        self.what = what  # "blkio files", ...: what is left as it is
        self._seen: dict[str, str | None] = {}  # uid -> the annotation text audited

    def skip(self, ctx: Context, pod: PodMeta) -> None:
        text = pod.annotations.get(self.annotation)
        if pod.uid in self._seen and self._seen[pod.uid] == text:
            return
        self._seen[pod.uid] = text
        prefix = f"annotation {self.annotation}: "
        why = next((w[len(prefix):].removesuffix(INVALID_ANNOTATION_NOTE) for w in pod.warnings
                    if w.startswith(prefix)), "cannot be decoded")
        ctx.audit_skip(self.strategy, pod.key, f"annotation {self.annotation} of pod {pod.key}: {why}; its "
                       f"{self.what} are left as they are", uid=pod.uid)

    def forget_gone(self, pods: Mapping[str, PodMeta]) -> None:
        """Drop what is remembered of pods that left (and of pods whose annotation is fine again)."""
        for uid in [u for u in self._seen if u not in pods or not _invalid_now(pods[u], self.annotation)]:
            del self._seen[uid]


def _invalid_now(pod: PodMeta, annotation: str) -> bool:
    prefix = f"annotation {annotation}: "
    return any(w.startswith(prefix) for w in pod.warnings)


__all__ = ["InvalidAnnotations"]
