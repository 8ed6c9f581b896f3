"""cpuSuppress's v1 step for BE pods' own quotas: lower the children before the BE dir.

**BE pods' own quotas (cgroup v1).**  On a koordinator node BE pods and containers carry CFS quotas
of their own: koordlet's batch-resource hook writes them from ``kubernetes.io/batch-cpu`` limits
(150000 for 1.5 cores).  cgroup v1 refuses a parent quota below a child's (EINVAL), so a BE QoS dir
quota under one such pod's would never be written and BE would stay unlimited.  Before the BE dir's
quota falls below a pod's or container's, that child is lowered to the new BE quota (the executor
writes falling limits children first); when the budget rises the children get their own quota back
(rising limits go parents first), as far as the budget allows, and all of it when cfsQuota
suppression is recovered.  A child's own quota is the value its owner wrote: what the strategy found
there before lowering it, or a value found later that the strategy did not write (the owner
re-wrote it).  A child found at exactly the BE dir's quota and below the quota the batch-resource
rule gives its pod's ``batch-cpu`` limit is taken as lowered by an earlier run of the agent: its own
quota is the rule's (an agent restart gives children their own quotas back).  Quotas are compared
at the standard 100 ms period, the one koordlet and the kubelet write.  A stopping agent writes
nothing (BE stays suppressed between two agents), so lowered children stay at the BE quota: v1
refuses them more while it is in force.  The next agent gives them back as its budget allows;
``qosmanager restore`` (uninstall) writes the BE dir's original first, then theirs.  cgroup v2 allows a parent
``cpu.max`` below its children's (the lower one applies): it needs no step.  The cpuset policy's
v1 step is :mod:`qosmanager.strategies._cpu_suppress_cpusets`.

**Before the pods are known** (a big pods file decoded beside the ticks, ``StateStore.pods_loading``)
no child is read before the BE dir's first quota: v1 refuses that write (EINVAL) when a child is above
it, and only then (``refused``, set by the strategy's ``after_apply``) are the children read and lowered
first, at the next tick.  Their own quotas are then what is found; one found at exactly the BE dir's
quota is decided by the batch-cpu rule once the pods are known (``_unsure``).

**A big node** (100,000 pods: as many BE children): every child is read at once only when the BE dir
goes from unlimited to a limit, after v1 refused the BE dir's quota and when children found at an earlier
run's BE quota are decided.  Under a limited BE dir v1 keeps every child at or below it, so the children
are learnt :data:`SCAN_PER_TICK` a tick (a pod with its containers) until each was read once, and a fall
reads the children last seen above the new quota, the dirs new since and that tick's share of the unread;
an unread child above it makes v1 refuse the BE quota (EINVAL), and every child is read at the next tick,
as for a child's owner's re-write the strategy did not see.  The batch-cpu rule's quotas are worked out
only when a child is found at the BE dir's quota.

Map of the file: :class:`BEChildQuotas` (the children's own quotas, the ones lowered, the lock
the fast path shares) with ``fit()``, which reads the children a budget change can touch and
returns their writes, and the batch-resource rule's quotas (``_rule_quotas_of``); small helpers
shared with :mod:`qosmanager.strategies.cpu_suppress`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from qosmanager.api.pod import BATCH_CPU, KUBE_QOS_BESTEFFORT, PodMeta
from qosmanager.executor.executor import Request, Write
from qosmanager.framework.context import Context
from qosmanager.host.resources import milli_cpu_to_quota

UNLIMITED = -1
QUOTA = "cpu.cfs_quota_us"
CONTAINER_DEPTH = 2  # below the BE QoS dir: 1 pods, 2 containers (sandboxes included)
# BE children read a tick, under a limited BE dir, until each was read once (100,000 pods: some 12 ticks)
SCAN_PER_TICK = 8192


class BEChildQuotas:
    """cgroup v1, cfsQuota: BE pods' and containers' own quotas (dir -> quota, -1 unlimited) and
    the quotas cpuSuppress lowered some of them to.  ``write``: the strategy's write builder;
    ``reason``: the reason's prefix."""

    def __init__(self, write: Callable[..., Write], reason: str) -> None:
        self.write = write
        self.reason = reason
        self.own: dict[str, int] = {}
        self.lowered: dict[str, int] = {}
        self.lock = threading.Lock()  # the fast path lowers children from its own thread
        self._scanned = False  # every BE child read once (a restart finds lowered ones)
        # children found at the BE dir's quota while the pods were not known yet (a big pods file on its
        # way): dir -> the quota seen; decided at the first full read with the pods (the batch-cpu rule)
        self._unsure: dict[str, int] = {}
        # the BE dir's quota was refused (v1: a child above it) while the children were not read
        self.refused = False
        self._rule_quotas: tuple[int, dict[str, int]] | None = None
        # the BE children not read yet (a walk, its dirs not in ``own`` then, how many of them were read)
        self._unread: tuple[list[str], list[str], int] | None = None

    def fit(self, ctx: Context, be_dir: str, be_now: int | None, budget: int) -> list[Request]:
        """Under :attr:`lock` (the fast path writes the same maps): see :meth:`_fit`."""
        with self.lock:
            return self._fit(ctx, be_dir, be_now, budget)

    def fall_candidates(self, walk: list[str], quota: int) -> list[str]:
        """The BE children (``walk``: every one, parents first) that can be above ``quota``, for the fast
        path's fall (under :attr:`lock`): those never read and those last seen above it; every one after
        v1 refused the BE dir's quota (a child's owner re-wrote it above, unseen)."""
        if self.refused:
            return walk
        own, lowered = self.own, self.lowered
        return [d for d in walk if d not in own or lowered.get(d, own[d]) > quota]

    def _fit(self, ctx: Context, be_dir: str, be_now: int | None, budget: int) -> list[Request]:
        """cgroup v1: the BE pods' and containers' quotas under the BE dir's next quota ``budget``
        (-1 unlimited), each at its own quota where the budget allows (see the module docstring).
        ``be_now``: the BE dir's quota as read this tick (None: not read).  Whatever writes the BE
        dir's quota sends these writes in the same executor batch (the executor orders them).

        Every BE child is read at once when the BE dir goes from unlimited to a limit and after v1
        refused the BE dir's quota.  Under a limited BE dir (v1 keeps every child at or below it) the
        children not read yet are read :data:`SCAN_PER_TICK` a tick until each was read once; when a
        limited budget falls only the children last seen above the new quota, the dirs new since and
        that tick's share of the unread are read, when it rises only the children lowered earlier, and
        when it stays none (a dense node pays no per-pod read per tick: at 100,000 pods a read of every
        child made a falling tick 7 to 11 s, and the first one after the pods came held the agent for as
        long).  A child above a falling budget that was not read makes v1 refuse the BE dir's quota, and
        every child is read at the next tick."""
        if ctx.cgroup_version != 1:
            return []  # v2 takes a parent cpu.max below its children's
        own, lowered = self.own, self.lowered
        falling = be_now is None or be_now < 0 or 0 <= budget < be_now
        provisional = not ctx.pods  # the pods on their way: the batch-cpu rule's quotas not known yet
        if provisional and not self._scanned and not self.refused:
            # a big pods file decoded beside the ticks (at 100,000 pods its thread turns every one of the
            # read's many GIL hand-overs into a wait, some 50 s in all): the BE quota goes first; a child
            # above it makes v1 refuse it (EINVAL, counted by after_apply), and then they are read
            return []
        limited = be_now is not None and be_now >= 0
        unsure = bool(self._unsure and not provisional)
        # every child now: from unlimited any child may be above the first limit; a refused BE quota (a
        # child above it, maybe one never read); children at an earlier run's BE quota, decided with the pods
        full = budget >= 0 and (not limited or self.refused or unsure)
        if full:  # every BE pod and container
            dirs = ctx.cgroup_dirs("cpu", be_dir, CONTAINER_DEPTH)[1:]
            self._scanned, self.refused, self._unread = True, False, None
            if not dirs:
                own.clear()
                lowered.clear()
                self._unsure.clear()
                return []
        elif budget >= 0 and (falling or not self._scanned):
            # under a limited BE dir: the children last seen above a falling budget, the dirs never read
            # (this tick's share of them; a child above the budget among the rest makes v1 refuse the BE
            # quota: every child is read at the next tick), and on a rise the children lowered earlier
            walk = ctx.cgroup_dirs("cpu", be_dir, CONTAINER_DEPTH)[1:]
            if falling:
                wanted = {d for d, v in own.items() if lowered.get(d, v) > budget}
            else:
                wanted = set(lowered) if budget != be_now else set()
            wanted.update(self._unread_share(walk, be_dir))
            if not wanted:
                return []
            dirs = _with_parents(wanted, be_dir)
        else:
            # the BE dir's quota stays or rises, and v1 keeps every child at or below a limited
            # parent: only the children lowered earlier (and their parents) can change
            if not lowered or budget == be_now:
                return []  # a steady budget: a child's owner's re-write is found when it next rises
            dirs = _with_parents(set(lowered), be_dir)
        values = ctx.read_many(QUOTA, dirs)
        rules: list[dict[str, int]] = []  # the batch-cpu rule's quotas, worked out only where needed

        def rule(d: str) -> int:
            if not rules:
                rules.append(self._rule_quotas_of(ctx))
            return rules[0].get(d, UNLIMITED)

        if full and unsure:
            for d, at in self._unsure.items():  # at the BE quota of an earlier run: the rule's, if higher
                if own.get(d) == at and _limit(rule(d)) > at:
                    # held at ``at`` by that run (or lower by this one since): given back as the budget allows
                    own[d], lowered[d] = rule(d), lowered.get(d, at)
            self._unsure.clear()
        ceiling: dict[str, float] = {be_dir: _limit(budget)}  # the quota each dir is held to from above
        writes: list[Request] = []
        seen: set[str] = set()
        for d, text in zip(dirs, values):
            cur = _int_or_none(text)
            parent = d.rpartition("/")[0]
            above = ceiling.get(parent, _limit(budget))
            if cur is None:
                ceiling[d] = above
                if not full:  # gone
                    own.pop(d, None)
                    lowered.pop(d, None)
                continue
            seen.add(d)
            mine = own.get(d)
            if mine is None or lowered.get(d) != cur:
                # first sight, or a value this strategy did not write: its owner's
                if mine is None and not provisional and cur >= 0 and cur == be_now and _limit(rule(d)) > cur:
                    mine = rule(d)  # lowered by an earlier run of the agent: the batch-cpu rule's quota
                else:
                    mine = cur
                    if provisional and cur >= 0 and cur == be_now:
                        self._unsure[d] = cur
                own[d] = mine
                lowered.pop(d, None)
            # an unlimited child inherits the limit above it (v1 takes it): only a quota above is lowered
            want = mine if mine < 0 or mine <= above else int(above)
            if want == mine:
                lowered.pop(d, None)
            else:
                lowered[d] = want
            if want != cur:
                if want == mine:
                    why = f"{self.reason}: give back its own quota {mine} (BE quota {budget})"
                else:
                    why = (f"{self.reason}: quota {want} under the BE quota {budget} (its own {mine}; cgroup v1 "
                           "refuses a parent quota below a child's)")
                writes.append(self.write(QUOTA, d, want, why, cacheable=False))
            ceiling[d] = above if want < 0 else want
        if full:
            for gone in [d for d in own if d not in seen]:
                del own[gone]
                lowered.pop(gone, None)
                self._unsure.pop(gone, None)
        return writes

    def _unread_share(self, walk: list[str], be_dir: str) -> list[str]:
        """This tick's share of the BE children never read (at most :data:`SCAN_PER_TICK`, and the rest of
        the last pod's dirs), in the walk's order; the children count as scanned once none is left."""
        if self._scanned:
            return [d for d in walk if d not in self.own]  # new since every child was read
        if self._unread is None or self._unread[0] is not walk:
            self._unread = (walk, [d for d in walk if d not in self.own], 0)
        _, todo, start = self._unread
        end = min(start + SCAN_PER_TICK, len(todo))
        if end < len(todo):
            pod = be_dir + "/" + todo[end - 1][len(be_dir) + 1:].partition("/")[0] + "/"
            while end < len(todo) and todo[end].startswith(pod):
                end += 1  # a pod's containers with it: never a pod lowered without reading them
        if end >= len(todo):
            self._scanned, self._unread = True, None
        else:
            self._unread = (walk, todo, end)
        return todo[start:end]

    def _rule_quotas_of(self, ctx: Context) -> dict[str, int]:
        """The quotas koordlet's batch-resource rule gives BE-labelled pods and their containers
        (``MilliCPUToQuota`` of the ``batch-cpu`` limits; -1 unlimited), by dir; kept until the pods change."""
        cached = self._rule_quotas
        if cached is not None and cached[0] == ctx.pods_generation:
            return cached[1]
        out: dict[str, int] = {}
        for pod in ctx.pods.values():
            if pod.kube_qos != KUBE_QOS_BESTEFFORT or not pod.is_be():
                continue
            d = _pod_dir(ctx, pod)
            if d is None:
                continue
            out[d] = milli_cpu_to_quota(pod.batch_cpu_limit)
            for c in pod.containers:
                cd = ctx.container_dir(pod, c)
                if cd is not None:
                    out[cd] = milli_cpu_to_quota(c.limits.get(BATCH_CPU, -1))
        self._rule_quotas = (ctx.pods_generation, out)
        return out


def _with_parents(wanted: set[str], be_dir: str) -> list[str]:
    """``wanted`` and their parents below ``be_dir``, parents first."""
    out = set(wanted)
    for d in wanted:
        parent = d.rpartition("/")[0]
        while parent and parent != be_dir and parent.startswith(be_dir):
            out.add(parent)
            parent = parent.rpartition("/")[0]
    return sorted(out, key=lambda d: (d.count("/"), d))


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _limit(quota: int) -> float:
    """A quota as a comparable limit: unlimited (negative) is infinite."""
    return math.inf if quota < 0 else quota


def _pod_dir(ctx: Context, pod: PodMeta) -> str | None:
    try:
        return ctx.pod_dir(pod)
    except ValueError:
        return None
