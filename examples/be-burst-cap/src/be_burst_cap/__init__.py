"""BEBurstCap: no CPU burst for BestEffort pods while latency-sensitive pods are being throttled.

CFS burst (``cpu.cfs_burst_us`` on cgroup v1, ``cpu.max.burst`` on v2) lets a cgroup run above its
quota for a while on time it saved earlier.  On a BestEffort pod that is CPU taken exactly when the
latency-sensitive (LS) pods beside it may need it.  This strategy watches how throttled the LS
containers are (the highest ``container_throttled_ratio`` among them) and

* at or above :attr:`BEBurstCap.cap_at` caps the burst of every BE pod and container at
  :attr:`BEBurstCap.cap_us` (0: no burst at all);
* once the ratio is below :attr:`BEBurstCap.release_at` (hysteresis: no flapping at the threshold)
  restores what each file held before it first changed it (the executor kept the original);
* restores as well when the Node carries the annotation ``be-burst-cap.example.com/enabled: "false"``
  (switched off per node without a restart);
* holds its decision while no LS container has a throttling sample (it does not guess).

It is a plugin of the qosmanager agent (entry point ``BEBurstCap`` in the group
``qosmanager.strategies``), written against the strategy API 1.0 (:mod:`qosmanager.plugin`) only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from qosmanager.plugin import (
    CONTAINER,
    QOS_BE,
    Context,
    FeatureGates,
    KubeQoS,
    Need,
    PodMeta,
    QoSConfig,
    Request,
    Restore,
    Strategy,
)

__version__ = "0.1.0"
__all__ = ["ANNOTATION_ENABLED", "BEBurstCap", "RESOURCE"]

RESOURCE = "cpu.cfs_burst_us"  # the agent's name for it; the executor writes cpu.max.burst on cgroup v2
ANNOTATION_ENABLED = "be-burst-cap.example.com/enabled"


def is_be(pod: PodMeta) -> bool:
    return pod.qos == QOS_BE or pod.kube_qos == KubeQoS.BESTEFFORT.value


class BEBurstCap(Strategy):
    name = "beBurstCap"
    gates: ClassVar[tuple[str, ...]] = ("BEBurstCap",)
    interval_key = "reconcile"  # runs every --reconcile-interval-seconds
    api = "1.0"

    cap_at: ClassVar[float] = 0.10  # LS throttled ratio (throttled periods / periods) that caps BE burst
    release_at: ClassVar[float] = 0.05  # ... and the ratio below which the caps are lifted again
    cap_us: ClassVar[int] = 0  # the burst BE pods keep while capped

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self.capped: set[str] = set()  # the cgroup dirs this strategy capped (and will restore)
        self.last_ratio: float | None = None

    # -------------------------------------------------------------------------------- the contract
    def needs(self, ctx: Context) -> Sequence[Need]:
        """The throttling of the LS containers, every collector tick (built again only when the pods change)."""
        return self.kept_needs(ctx, lambda: [Need("container_throttled_ratio", CONTAINER,
                                                  keys=frozenset(self._ls_containers(ctx)))])

    def tick(self, ctx: Context) -> list[Request]:
        node = ctx.node
        if node is not None and node.annotations.get(ANNOTATION_ENABLED, "").lower() == "false":
            return self._release(ctx, f"switched off by the Node annotation {ANNOTATION_ENABLED}")
        ratios = ctx.container_metrics("container_throttled_ratio")
        ls = [ratios[c] for c in self._ls_containers(ctx) if c in ratios]
        if not ls:
            return []  # no LS throttling sample: hold what is in force
        ratio = self.last_ratio = max(ls)
        if ratio >= self.cap_at or (self.capped and ratio >= self.release_at):
            return self._cap(ctx, f"LS containers throttled up to {ratio:.0%} (caps at {self.cap_at:.0%}, "
                                  f"lifted below {self.release_at:.0%}): BE burst capped at {self.cap_us} us")
        return self._release(ctx, f"LS throttling down to {ratio:.0%} (below {self.release_at:.0%}): "
                                  "BE burst restored")

    # -------------------------------------------------------------------------------- helpers
    def _ls_containers(self, ctx: Context) -> list[str]:
        return [c.container_id for p in ctx.pods.values() if not is_be(p) for c in p.containers if c.container_id]

    def _be_dirs(self, ctx: Context) -> list[tuple[PodMeta, str]]:
        out = []
        for pod in ctx.pods.values():
            if not is_be(pod):
                continue
            out.append((pod, ctx.pod_dir(pod)))
            for c in pod.containers:
                d = ctx.container_dir(pod, c)
                if d is not None:
                    out.append((pod, d))
        return out

    def _cap(self, ctx: Context, reason: str) -> list[Request]:
        writes: list[Request] = []
        for pod, d in self._be_dirs(ctx):
            writes.append(self.write(RESOURCE, d, self.cap_us, reason, uid=pod.uid))
            self.capped.add(d)
        return writes

    def _release(self, ctx: Context, reason: str) -> list[Request]:
        restores: list[Request] = [Restore(self.name, RESOURCE, d, reason=reason) for d in sorted(self.capped)]
        self.capped.clear()
        return restores
