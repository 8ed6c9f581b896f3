"""Protection in force: whether the BE limits the agent decided are what the files hold.

Decides which writes are *protection*: the BE QoS dir's CFS quota (``cpu.cfs_quota_us``, v2
``cpu.max``) and its cpuset, what BE suppression stands on.  After each batch, each protection write
is in force (written, unchanged, answered from the write cache, or lost to another strategy's
stricter value) or not: refused by the kernel (``failed``, with its errno), refused as ``invalid``, or
held back in a conflict backoff (another writer keeps changing it back).  Not in force raises the
degraded condition ``executor/not-in-force/<strategy>/<resource>`` naming the file, the decided value
and why (so ``/healthz`` never says "ok" while BE runs unlimited); in force again clears it.
:meth:`InForce.counts` (files not in force by strategy and resource) is exported as
``qosmanager_decided_not_in_force``.

cpuSuppress writes them uncached, so they are read at every tick: another writer's reset (the kubelet's
systemd driver sets the BE slice's quota back to unlimited about once a minute) is undone within a
tick, and counts as no fight as long as this agent's value sticks in between.  They also get a short
conflict backoff (:data:`BACKOFF`, see :mod:`.conflicts`): BE must not stay at
another writer's value for minutes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from qosmanager.executor.types import Write, WriteResult
from qosmanager.host.cgroups import CgroupLayout, KubeQoS

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

CONDITION = "executor/not-in-force/"
PROTECTED = frozenset({"cpu.cfs_quota_us", "cpuset.cpus"})
# a conflict on a protection knob is retried after 1, 2, then every 4 seconds (not force_seconds doubling)
BACKOFF = (1.0, 2.0, 4.0)

IN_FORCE = frozenset({"written", "unchanged", "cached", "lost"})
NOT_IN_FORCE = frozenset({"failed", "invalid", "conflict"})


class InForce:
    def __init__(self, layout: CgroupLayout, conditions: Conditions | None) -> None:
        self.layout = layout
        self.conditions = conditions
        # (strategy, resource) -> target -> why it is not in force
        self.missing: dict[tuple[str, str], dict[str, str]] = {}

    def be_dir(self) -> str:
        """The BE QoS dir, whose protection files these are."""
        return self.layout.qos_dir(KubeQoS.BESTEFFORT)

    def protection(self, w: Write) -> bool:
        return w.resource in PROTECTED and w.cgroup == self.be_dir()

    def settle(self, results: Iterable[WriteResult], be_dir: str) -> None:
        """Note which protection writes of a batch are in force, and say so in the conditions."""
        changed: set[tuple[str, str]] = set()
        for r in results:
            w = r.write
            if w.cgroup != be_dir or w.resource not in PROTECTED:
                continue
            if r.status not in IN_FORCE and r.status not in NOT_IN_FORCE:
                continue
            sk = (w.strategy, w.resource)
            files = self.missing.get(sk)
            if r.status in IN_FORCE:
                if files is not None and files.pop(r.target, None) is not None:
                    changed.add(sk)
                continue
            why = _why(r)
            if files is None:
                files = self.missing[sk] = {}
            if files.get(r.target) != why:
                files[r.target] = why
                changed.add(sk)
        for sk in changed:
            self._condition(sk)

    def _condition(self, sk: tuple[str, str]) -> None:
        files = self.missing.get(sk)
        key = f"{CONDITION}{sk[0]}/{sk[1]}"
        if not files:
            self.missing.pop(sk, None)
            if self.conditions is not None:
                self.conditions.clear(key)
            return
        if self.conditions is not None:
            target, why = sorted(files.items())[0]
            more = f" (and {len(files) - 1} more files)" if len(files) > 1 else ""
            self.conditions.set(key, f"{sk[0]}: {target} {why}{more}; BE is not limited as decided")

    def counts(self) -> dict[tuple[str, str], int]:
        """Files whose decided protection is not in force, by (strategy, resource) (safe from another
        thread: one copy, made without running Python code)."""
        return {sk: len(files) for sk, files in list(self.missing.items()) if files}

    def release(self, strategy: str) -> None:
        for sk in [sk for sk in self.missing if sk[0] == strategy]:
            self.missing[sk].clear()
            self._condition(sk)


def _why(r: WriteResult) -> str:
    value = r.value if r.value is not None else r.write.value
    if r.status == "conflict":
        return (f"= {value} is held back: another writer keeps changing it back (the file holds {r.old}); "
                "retried within seconds")
    if r.status == "invalid":
        return f"= {r.write.value} was refused: {r.error}"
    return f"= {value} was refused by the kernel: {r.error or 'failed'}"
