"""resctrlReconcile: L3 cache ways and memory bandwidth per QoS class with Intel RDT / AMD PQoS
(koordlet-qos §4.6, koordlet-infra §2.9).

Three resctrl control groups, ``LSR``, ``LS`` and ``BE``, get

* an **L3 mask** covering ``[catRangeStartPercent, catRangeEndPercent)`` of the cache ways
  (``mask = (1 << ceil(ways*end/100)) - (1 << ceil(ways*start/100))``), on every L3 cache id, and
* an **MB value** from ``mbaPercent``: Intel takes percent in steps of 10 (rounded up), AMD
  absolute 1/8 GBps units (``int(160 * pct / 100)``, 2048 = unlimited at 100 %),

from their class's ``resctrlQOS``; and every thread of a pod whose class has ``resctrlQOS.enable``
is moved into its class's group (LSE and LSR pods -> ``LSR``, LS -> ``LS``, BE -> ``BE``) by writing
its id to the group's ``tasks`` file.  Pods carrying ``node.koordinator.sh/resctrl`` are left to the
runtime hooks.

Support is decided once: the CPU must have both ``cat_l3`` and ``mba``.  resctrl must be mounted
(``info/L3/cbm_mask`` present); this agent does not mount it (koordlet does), it logs once and waits.
The three groups are created when missing, through the executor (audited as ``mkdir``; under
``--dry-run`` only decided, and the writes into them are decided against empty files).

**Switching it off.**  A class whose ``resctrlQOS.enable`` is false carries koordlet's None values
after the NodeSLO merge (the whole cache, 100 % bandwidth), so its group's schemata is written back to
"no restriction", as koordlet does.  Threads already in a group stay there (an unrestricted group is
equivalent to the root group); new threads are no longer moved.

**One schemata write per group.**  The L3 and MB lines of a group are sent as one write keyed by the
group.  koordlet keyed both halves with one cache key, so its cache never hit (infra §1.1); separate
writes per line would also work against the kernel, but both lines of one file would then be rendered
from the same read and the second would put back the first one's old line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import numpy as np

from qosmanager.api.nodeslo import ResourceQOSStrategy
from qosmanager.api.pod import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR, PodMeta
from qosmanager.executor.executor import MakeDir, Write
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.host import resctrl
from qosmanager.host.sysfs import NodeCPUInfo

log = logging.getLogger(__name__)

SCHEMATA, TASKS, CGROUP_TASKS = "resctrl.schemata", "resctrl.tasks", "tasks"
GROUP_LSR, GROUP_LS, GROUP_BE = resctrl.GROUPS
# pod QoS (with default) -> resctrl group; SYSTEM and anything else have none
GROUP_OF_QOS: Mapping[str, str] = {QOS_LSE: GROUP_LSR, QOS_LSR: GROUP_LSR, QOS_LS: GROUP_LS, QOS_BE: GROUP_BE}
# resctrl group -> the class config that sets it
CLASS_OF_GROUP: Mapping[str, str] = {GROUP_LSR: "lsr_class", GROUP_LS: "ls_class", GROUP_BE: "be_class"}


def ensure_resctrl_groups(ctx: Context, strategy: str, groups: tuple[str, ...] = resctrl.GROUPS) -> list[str]:
    """Make the missing control groups through the executor (a ``mkdir`` in the resctrl filesystem,
    audited, only decided under ``--dry-run``); returns the groups that exist or, in a dry run, would.

    A group the kernel refuses (e.g. no free CLOSID) is left out: its files are not written this tick,
    and the executor audits the failure once, not every tick.
    """
    ready = []
    for group in groups:
        rel = os.path.relpath(resctrl.group_dir(ctx.layout.roots, group), ctx.layout.roots.sys)
        status = ctx.mkdir(MakeDir(strategy, "sys", rel, reason=f"the resctrl control group of the {group} "
                                   "class (its schemata and tasks are written next)"))
        if status == "created":
            log.info("resctrlReconcile: created resctrl group %s", group)
        if status != "failed":
            ready.append(group)
    return ready


def schemata_lines(cfg_start: int | None, cfg_end: int | None, mba_percent: int | None, cbm: int,
                   cache_ids: list[int], vendor: str) -> tuple[str, list[str]]:
    """The ``L3:`` and ``MB:`` lines of one group (either may be absent), and why a part was skipped."""
    text, problems = "", []
    if cfg_start is not None and cfg_end is not None:
        try:
            mask = resctrl.cat_l3_mask(cbm, cfg_start, cfg_end)
        except ValueError as e:
            problems.append(str(e))
        else:
            text += resctrl.format_l3(dict.fromkeys(cache_ids, mask))
    if mba_percent is not None and 1 <= mba_percent <= 100:
        text += resctrl.format_mb(dict.fromkeys(cache_ids, resctrl.mba_value(mba_percent, vendor)))
    return text, problems


def thread_ids(contents: Sequence[str | None], tokens: Sequence[list[str]] | None = None) -> np.ndarray:
    """The thread ids of tasks files, concatenated, as int64 (``tokens``: the contents already split).
    A line that is not a number is skipped (the slow path, never taken on kernel files)."""
    toks = tokens if tokens is not None else [c.split() if c else [] for c in contents]
    try:
        return np.array([t for ts in toks for t in ts], dtype=np.int64)
    except (ValueError, OverflowError):
        # keep the per-file counts the caller relies on: an odd token becomes -1 (callers drop ids <= 0)
        return np.array([int(t) if t.isascii() and t.isdigit() and len(t) < 19 else -1
                         for ts in toks for t in ts], dtype=np.int64)


def pod_group(pod: PodMeta, strategy: ResourceQOSStrategy) -> str | None:
    """The group a pod's threads belong to, or None when they are not to be moved."""
    if pod.resctrl_managed or not pod.active:
        return None
    group = GROUP_OF_QOS.get(pod.qos)
    if group is None:
        return None
    cfg = getattr(strategy, CLASS_OF_GROUP[group])
    if cfg is None or cfg.resctrl_qos is None or cfg.resctrl_qos.enable is not True:
        return None
    return group


@register
class ResctrlReconcile(Strategy):
    """L3 CAT and MBA per QoS class, and pod threads into their class's group (see the module docstring)."""

    name = "resctrlReconcile"
    gates = ("RdtResctrl",)
    interval_key = "reconcile"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self._supported: bool | None = None  # decided once, like koordlet's IsSupportResctrl
        self._cache_ids: list[int] | None = None  # from the root schemata, for the process lifetime
        self._members_key: tuple[object, ...] | None = None
        self._members: list[tuple[str, str, str]] = []  # (group, cgroup dir, pod uid)
        self._member_groups = np.empty(0, np.int64)  # index into resctrl.GROUPS, per member
        self._member_dirs: list[str] = []  # the members' cgroup dirs, the same list every tick
        # the last tasks decision and what it was made from: (members, ready groups, the groups' tasks
        # files, the members' tasks files) -> its writes; the same files give the same writes
        self._last_tasks: tuple[object, tuple[str, ...], list[str | None], list[str | None], list[Write]] | None = None
        self._warned: set[str] = set()

    def tick(self, ctx: Context) -> list[Write]:
        strategy = ctx.nodeslo.resource_qos_strategy if ctx.nodeslo_present else None
        if strategy is None or not self._is_supported(ctx):
            return []
        roots = ctx.layout.roots
        cbm = resctrl.read_cbm_mask(roots)
        if cbm is None:
            self._warn("mount", "resctrlReconcile: %s is missing: resctrl is not mounted (this agent does "
                       "not mount it); nothing to do until it is", resctrl.cbm_mask_path(roots))
            return []
        ready = ensure_resctrl_groups(ctx, self.name)
        if len(ready) < len(resctrl.GROUPS):
            missing = ", ".join(g for g in resctrl.GROUPS if g not in ready)
            self._warn(f"mkdir:{missing}", "resctrlReconcile: cannot create the resctrl groups %s (see the "
                       "audit); their schemata and tasks are left alone", missing)
        return self._policy(ctx, strategy, cbm, ready) + self._tasks(ctx, strategy, ready)

    # -- support -------------------------------------------------------------------------------
    def _is_supported(self, ctx: Context) -> bool:
        if self._supported is None:
            info = ctx.cpu_info
            if info is None:
                return False
            self._supported = resctrl.supports_resctrl(info)
            if not self._supported:
                log.info("resctrlReconcile: the CPU lacks cat_l3 or mba; resctrl QoS is not supported here")
        return self._supported

    # -- policy (schemata) ---------------------------------------------------------------------
    def _policy(self, ctx: Context, strategy: ResourceQOSStrategy, mounted_cbm: int,
                ready: Sequence[str]) -> list[Write]:
        """``reconcileRDTResctrlPolicy``: each group's L3 mask and MB value."""
        info = ctx.cpu_info
        if info is None:
            return []
        cbm = self._cbm(info, mounted_cbm)
        if cbm is None or not info.cpus_by_l3:
            return []
        cache_ids = self._l3_cache_ids(ctx, len(info.cpus_by_l3))
        if not cache_ids:
            return []
        writes = []
        for group in ready:
            cfg = getattr(strategy, CLASS_OF_GROUP[group])
            if cfg is None:
                # koordlet fix: a nil class config makes koordlet panic (§6b item 5); we skip the group
                self._warn(f"class:{group}", "resctrlReconcile: no resourceQOSStrategy config for group %s",
                           group)
                continue
            rq = cfg.resctrl_qos
            if rq is None:
                continue
            text, problems = schemata_lines(rq.cat_range_start_percent, rq.cat_range_end_percent,
                                            rq.mba_percent, cbm, cache_ids, info.vendor)
            for p in problems:
                self._warn(f"l3:{group}:{p}", "resctrlReconcile: group %s: %s; its L3 mask is left alone",
                           group, p)
            if text:
                writes.append(self.write(SCHEMATA, group, text, f"resctrlQOS of the {group} class: cat "
                                         f"{rq.cat_range_start_percent}-{rq.cat_range_end_percent}%, "
                                         f"mba {rq.mba_percent}%"))
        return writes

    def _cbm(self, info: NodeCPUInfo, mounted_cbm: int) -> int | None:
        """The L3 capacity bitmask: the node CPU info's (koordlet's source), else what resctrl shows now."""
        if not info.cbm_mask:
            return mounted_cbm
        try:
            return int(info.cbm_mask, 16)
        except ValueError:
            self._warn(f"cbm:{info.cbm_mask}", "resctrlReconcile: invalid L3 cbm mask %r", info.cbm_mask)
            return None

    def _l3_cache_ids(self, ctx: Context, l3_count: int) -> list[int]:
        """L3 cache ids from the root schemata (read once per process, as koordlet)."""
        if self._cache_ids is None:
            text = ctx.read(SCHEMATA, "")
            if text is None:
                self._warn("root-schemata", "resctrlReconcile: the root resctrl schemata cannot be read")
                return []
            try:
                ids = sorted(resctrl.parse_schemata(text)["L3"])
            except ValueError as e:
                self._warn("root-schemata", "resctrlReconcile: %s", e)
                return []
            if len(ids) != l3_count:
                self._warn("root-schemata", "resctrlReconcile: the root schemata lists %d L3 caches, the CPU "
                           "topology %d; not touching the schemata", len(ids), l3_count)
                return []
            self._cache_ids = ids
        return self._cache_ids

    # -- tasks ---------------------------------------------------------------------------------
    def _tasks(self, ctx: Context, strategy: ResourceQOSStrategy, ready: Sequence[str]) -> list[Write]:
        """``reconcileResctrlGroups``: threads of the pods' containers (sandbox included) that are not in
        their class's group yet, one write per thread id, ascending per group.  The ids of every tasks
        file are compared in one numpy pass (thousands of threads on a dense node)."""
        members = self._group_members(ctx, strategy)
        if not members:
            return []
        groups = ctx.read_many(TASKS, list(resctrl.GROUPS))
        contents = ctx.read_many(CGROUP_TASKS, self._member_dirs)  # None: container gone or not yet
        last, key = self._last_tasks, tuple(ready)
        if last is not None and last[0] is members and last[1] == key and last[2] == groups and last[3] == contents:
            return list(last[4])  # every file reads as at the last tick: its decision again
        writes = self._new_tasks(members, ready, groups, contents)
        self._last_tasks = (members, key, groups, contents, writes)
        return list(writes)

    def _new_tasks(self, members: list[tuple[str, str, str]], ready: Sequence[str], groups: list[str | None],
                   contents: list[str | None]) -> list[Write]:
        """The writes of the threads in ``contents`` (the members' tasks files) that ``groups`` (the
        groups' tasks files) do not list yet."""
        have = {g: thread_ids([c]) for g, c in zip(resctrl.GROUPS, groups)}
        tokens = [c.split() if c else [] for c in contents]
        tids = thread_ids(contents, tokens)
        owner = np.repeat(np.arange(len(members)), np.fromiter(map(len, tokens), np.int64, len(tokens)))
        group_of_tid = self._member_groups[owner]
        writes = []
        for gi, group in enumerate(resctrl.GROUPS):
            if group not in ready:
                continue
            sel = (group_of_tid == gi) & (tids > 0)
            new = ~np.isin(tids[sel], have[group])
            ids, first = np.unique(tids[sel][new], return_index=True)  # ascending; first pod wins a shared id
            for tid, m in zip(ids.tolist(), owner[sel][new][first].tolist()):
                # entry: one file, one write per thread (the executor keeps one write per key)
                writes.append(self.write(TASKS, group, tid, f"thread of a {group} pod into its resctrl group",
                                         uid=members[m][2], entry=str(tid), compare=False, cacheable=False))
        return writes

    def _group_members(self, ctx: Context, strategy: ResourceQOSStrategy) -> list[tuple[str, str, str]]:
        """(group, container cgroup dir, pod uid) of every container (and sandbox) whose threads belong to a
        group; rebuilt when the pods or the NodeSLO change."""
        key = (ctx.pods_generation, ctx.nodeslo)
        if key == self._members_key:
            return self._members
        wanted = [(pod, group) for pod in ctx.pods.values()
                  if (group := pod_group(pod, strategy)) is not None]
        members: list[tuple[str, str, str]] = []
        if wanted:
            # one walk of the pods tree finds every container dir, sandboxes included (the pod list names only
            # the app containers)
            children: dict[str, list[str]] = {}
            for d in ctx.cgroup_dirs("cpu", ctx.layout.kubepods_dir(), 3):
                parent, _, _ = d.rpartition("/")
                children.setdefault(parent, []).append(d)
            for pod, group in wanted:
                try:
                    pod_dir = ctx.pod_dir(pod)
                except ValueError as e:
                    self._warn(f"pod:{pod.uid}", "resctrlReconcile: pod %s skipped: %s", pod.key, e)
                    continue
                members.extend((group, d, pod.uid) for d in children.get(pod_dir, ()))
        self._members_key, self._members = key, members
        self._member_dirs = [d for _, d, _ in members]
        self._member_groups = np.fromiter((resctrl.GROUPS.index(g) for g, _, _ in members), np.int64,
                                          len(members))
        return members

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


__all__ = ["GROUP_OF_QOS", "ResctrlReconcile", "ensure_resctrl_groups", "pod_group", "schemata_lines"]
