"""blkioReconcile: block-IO throttling and weights per disk (koordlet-qos §4.8).

Three kinds of target, each with a list of blocks (a block names a disk: ``device``, ``volumegroup`` or
``podvolume``, and carries its ``ioCfg``):

* the **BE class** -- ``beClass.blkioQOS`` on the BE QoS dir;
* the **cgroup root** -- ``cgroupRoot.blkioQOS``: the disk's iocost QoS and cost model (``blkio.cost.qos``,
  ``blkio.cost.model``; cgroup v1, Anolis kernels);
* **pods** -- the pod annotation ``koordinator.sh/blkioQOS`` on the pod's dir (Running pods with a
  koordinator QoS label only).

A disk that appears in a target's files but in none of its blocks is reset ("removed"); a target that is
switched off (``enable: false``) has no blocks, so every disk it configured is reset: this is koordlet's
own restore path.  One thing koordlet does not do: when a pod's annotation is removed, the disks this
strategy configured for it are reset too.  A pod whose annotation cannot be decoded is left as it is
(koordlet skips it too), audited once per pod change (``action: "skip"``).

**Files.**  cgroup v1 as koordlet: per disk ``blkio.throttle.{read,write}_{iops,bps}_device`` ("MAJ:MIN N",
0 = unlimited) and ``blkio.cost.weight`` ("MAJ:MIN percent", 100 by default).  koordlet has nothing on
cgroup v2; this strategy writes ``io.max`` ("MAJ:MIN rbps=.. wbps=.. riops=.. wiops=..", 0 or unset ->
``max``) and ``io.weight`` ("MAJ:MIN W") there, with the weight mapped linearly from
``ioWeightPercent`` 1..100 onto the kernel's 1..10000: ``W = 1 + (percent - 1) * 9999 // 99``
(1 -> 1, 50 -> 4950, 100 -> 10000).  A reset on v2 writes ``max`` everywhere in ``io.max`` and
``MAJ:MIN default`` in ``io.weight``.  The cgroup-root knobs have v2 twins (``io.cost.qos`` and
``io.cost.model`` at the root) that the registry does not know yet: on v2 the root is skipped.

A file is used where it exists in the kubepods dir (the root dir for the iocost files), checked once, as
koordlet checks its Anolis blkio files.

**Refused entries.**  The kernel can refuse one entry of a file it has: a per-disk ``io.weight`` needs the
iocost controller enabled on that disk (``io.cost.qos``), else the write fails with EOPNOTSUPP.  Such a
refusal is remembered per file and disk: the executor reports it once, and the same value is not sent to
the same entry again until the wanted value changes or ``REFUSED_RETRY_SECONDS`` have passed (iocost may
have been enabled meanwhile); the rest of the target's entries are written as usual.

**Disk numbers** come from sysfs (:mod:`qosmanager.host.blockdev`, koordlet used lsblk): a ``device`` is a
whole disk or a partition of one (throttling applies to the whole disk), a ``volumegroup`` is the first
disk of the VG, a ``podvolume`` is the disk under the pod's CSI volume mount.  A block whose disk cannot be
found leaves that whole target untouched for the tick (koordlet's rule), with one log line.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from qosmanager.api.nodeslo import (
    BLOCK_DEVICE,
    BLOCK_POD_VOLUME,
    BLOCK_VOLUME_GROUP,
    BlkIOQOSCfg,
    BlockCfg,
    IOCfg,
    ResourceQOSStrategy,
)
from qosmanager.api.pod import ANNOTATION_BLKIO_QOS, KUBE_QOS_BESTEFFORT, PHASE_RUNNING, QOS_NONE, PodMeta
from qosmanager.executor.executor import Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.host import blockdev
from qosmanager.strategies._annotations import InvalidAnnotations

log = logging.getLogger(__name__)

# koordlet's defaults: 0 = unlimited IOPS/BPS, weight 100 %, latency target 3000 µs at the 95th percentile
DEFAULT_IOPS_BPS = 0
DEFAULT_WEIGHT_PERCENT = 100
DEFAULT_LATENCY_US = 3000
DEFAULT_LATENCY_PERCENT = 95

READ_IOPS, READ_BPS = "blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device"
WRITE_IOPS, WRITE_BPS = "blkio.throttle.write_iops_device", "blkio.throttle.write_bps_device"
COST_WEIGHT, COST_QOS, COST_MODEL = "blkio.cost.weight", "blkio.cost.qos", "blkio.cost.model"
IO_MAX, IO_WEIGHT = "io.max", "io.weight"
V1_DEVICE_FILES = (READ_IOPS, READ_BPS, WRITE_IOPS, WRITE_BPS, COST_WEIGHT)
V2_DEVICE_FILES = (IO_MAX, IO_WEIGHT)
ROOT_FILES = (COST_QOS, COST_MODEL)

_DEVNO_AT_START = re.compile(r"(\d+:\d+)\s")

Change = tuple[str, str, str]  # (resource, disk number, value)

REFUSED_RETRY_SECONDS = 600.0  # an entry the kernel refused as unsupported is offered again after this
_UNSUPPORTED = errno.errorcode[errno.EOPNOTSUPP] + ":"  # how the executor names the errno in a result


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------
def io_weight(percent: int) -> int:
    """cgroup v2 io.weight for ``ioWeightPercent``: 1..100 mapped linearly onto 1..10000."""
    percent = max(1, min(100, percent))
    return 1 + (percent - 1) * 9999 // 99


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def device_updates(io: IOCfg, dn: str, version: int) -> list[Change]:
    """``getBlkIOUpdater``: a disk's throttles and weight (v1 in koordlet's order; v2 io.max, io.weight)."""
    if version == 1:
        return [
            (READ_IOPS, dn, f"{dn} {_or(io.read_iops, DEFAULT_IOPS_BPS)}"),
            (READ_BPS, dn, f"{dn} {_or(io.read_bps, DEFAULT_IOPS_BPS)}"),
            (WRITE_IOPS, dn, f"{dn} {_or(io.write_iops, DEFAULT_IOPS_BPS)}"),
            (WRITE_BPS, dn, f"{dn} {_or(io.write_bps, DEFAULT_IOPS_BPS)}"),
            (COST_WEIGHT, dn, f"{dn} {_or(io.io_weight_percent, DEFAULT_WEIGHT_PERCENT)}"),
        ]

    def limit(v: int | None) -> str:
        return str(v) if v else "max"

    return [
        (IO_MAX, dn, f"{dn} rbps={limit(io.read_bps)} wbps={limit(io.write_bps)} riops={limit(io.read_iops)} "
                     f"wiops={limit(io.write_iops)}"),
        (IO_WEIGHT, dn, f"{dn} {io_weight(_or(io.io_weight_percent, DEFAULT_WEIGHT_PERCENT))}"),
    ]


def device_removals(dn: str, version: int) -> list[Change]:
    """``getBlkIORemover``: the disk back to unlimited and the default weight."""
    if version == 1:
        return [(r, dn, f"{dn} {DEFAULT_WEIGHT_PERCENT if r == COST_WEIGHT else 0}") for r in V1_DEVICE_FILES]
    return [(IO_MAX, dn, f"{dn} rbps=max wbps=max riops=max wiops=max"), (IO_WEIGHT, dn, f"{dn} default")]


MODEL_FIELDS = (("rbps", "model_read_bps"), ("rseqiops", "model_read_seq_iops"),
                ("rrandiops", "model_read_rand_iops"), ("wbps", "model_write_bps"),
                ("wseqiops", "model_write_seq_iops"), ("wrandiops", "model_write_rand_iops"))


def disk_config_updates(io: IOCfg, dn: str) -> tuple[list[Change], str | None]:
    """``getDiskConfigUpdater``: the disk's iocost QoS and cost model; plus why the model was left out
    (a user model needs every model field >= 1: the kernel and the registry refuse 0)."""
    qos = (f"{dn} enable=1 ctrl=user rpct={_or(io.read_latency_percent, DEFAULT_LATENCY_PERCENT)} "
           f"rlat={_or(io.read_latency, DEFAULT_LATENCY_US)} "
           f"wpct={_or(io.write_latency_percent, DEFAULT_LATENCY_PERCENT)} "
           f"wlat={_or(io.write_latency, DEFAULT_LATENCY_US)}")
    changes: list[Change] = [(COST_QOS, dn, qos)]
    if not io.enable_user_model:
        changes.append((COST_MODEL, dn, f"{dn} ctrl=auto"))
        return changes, None
    values = {key: getattr(io, attr) or 0 for key, attr in MODEL_FIELDS}
    missing = [key for key, v in values.items() if v < 1]
    if missing:
        return changes, f"enableUserModel needs every model field; unset: {', '.join(missing)}"
    changes.append((COST_MODEL, dn, f"{dn} ctrl=user " + " ".join(f"{k}={v}" for k, v in values.items())))
    return changes, None


def disk_config_removals(dn: str) -> list[Change]:
    """``getDiskConfigRemover``: iocost off for the disk."""
    return [(COST_QOS, dn, f"{dn} enable=0")]


def recorded_devices(contents: Sequence[str | None]) -> list[str]:
    """Disk numbers at the start of a line of any of the files, first appearance first."""
    seen: dict[str, None] = {}
    for content in contents:
        for line in (content or "").splitlines():
            m = _DEVNO_AT_START.match(line.strip() + " ")
            if m:
                seen.setdefault(m.group(1), None)
    return list(seen)


def blocks_of(cfg: BlkIOQOSCfg) -> tuple[BlockCfg, ...]:
    """A class's blocks when it is enabled, none when it is not (every configured disk gets reset)."""
    return tuple(cfg.blocks) if cfg.enable else ()


# ---------------------------------------------------------------------------------------------
# the strategy
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Target:
    kind: str  # "be" | "root" | "pod"
    cgroup: str
    blocks: tuple[BlockCfg, ...]
    pod: PodMeta | None
    reason: str


@register
class BlkIOReconcile(Strategy):
    """Block-IO throttles and weights of the BE class, the root and annotated pods (module docstring)."""

    name = "blkioReconcile"
    gates = ("BlkIOReconcile",)
    interval_key = "reconcile"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self._support: dict[str, bool] = {}
        self._configured_pods: set[str] = set()  # pods whose disks this strategy configured
        self._annotated: tuple[int, list[PodMeta]] = (-1, [])
        # block devices and mounts, read at most once per tick and only when a block needs resolving
        self._storage: list[blockdev.StorageInfo | None] = []
        self._mounts: dict[str, str] | None = None
        self._warned: set[str] = set()
        self._invalid = InvalidAnnotations(self.name, ANNOTATION_BLKIO_QOS, "blkio files")
        # (resource, cgroup, disk) -> (value, when): entries the kernel refused as unsupported
        self._refused: dict[tuple[str, str, str], tuple[str, float]] = {}

    def tick(self, ctx: Context) -> list[Write]:
        strategy = ctx.nodeslo.resource_qos_strategy if ctx.nodeslo_present else None
        if strategy is None:
            return []
        # read again when needed (koordlet's storage collector runs every second)
        self._storage, self._mounts = [], None
        writes: list[Write] = []
        refused, self._refused = self._refused, {}
        for target in self._targets(ctx, strategy):
            changes = self._update(ctx, target)
            if changes is None:
                continue
            uid = target.pod.uid if target.pod is not None else None
            for res, dn, value in changes:
                was = refused.get((res, target.cgroup, dn))
                if was is not None and was[0] == value and 0 <= ctx.now - was[1] < REFUSED_RETRY_SECONDS:
                    self._refused[(res, target.cgroup, dn)] = was  # refused before: not sent again
                    continue
                writes.append(self.write(res, target.cgroup, value, target.reason, entry=dn, uid=uid))
            if uid is not None:
                if target.blocks:
                    self._configured_pods.add(uid)
                elif not changes:
                    self._configured_pods.discard(uid)
        self._configured_pods &= ctx.pods.keys()
        return writes

    def after_apply(self, ctx: Context, results: Sequence[WriteResult]) -> None:
        """Remember the entries the kernel refused as unsupported (the executor reported them)."""
        for r in results:
            if r.status == "failed" and r.error is not None and r.error.startswith(_UNSUPPORTED):
                w = r.write
                key = (w.resource, w.cgroup, w.entry)
                if key not in self._refused:
                    log.info("blkioReconcile: %s refuses %r (%s); not sent again until the wanted value "
                             "changes, or in %s s", r.target, w.value, r.error, REFUSED_RETRY_SECONDS)
                self._refused[key] = (w.value, ctx.now)

    # -- targets -------------------------------------------------------------------------------
    def _targets(self, ctx: Context, strategy: ResourceQOSStrategy) -> list[Target]:
        for attr, label in (("lsr_class", "LSR"), ("ls_class", "LS")):
            cfg = getattr(strategy, attr)
            bq = cfg.blkio_qos if cfg is not None else None
            if bq is not None and bq.enable and bq.blocks:
                self._warn(f"class:{label}", "blkioReconcile: blkioQOS of the %s class is not supported; "
                           "only the BE class, the cgroup root and pod annotations are", label)
        targets = []
        be = strategy.be_class
        if be is not None and be.blkio_qos is not None:
            targets.append(Target("be", ctx.qos_dir(KUBE_QOS_BESTEFFORT), blocks_of(be.blkio_qos), None,
                                  "blkioQOS of the BE class"))
        root = strategy.cgroup_root
        if root is not None and root.blkio_qos is not None:
            targets.append(Target("root", "", blocks_of(root.blkio_qos), None, "blkioQOS of the cgroup root"))
        for pod in self._annotated_pods(ctx):
            if pod.qos_raw == QOS_NONE or pod.phase != PHASE_RUNNING:
                continue
            if pod.blkio_qos is not None:
                blocks = tuple(pod.blkio_qos.blocks)
            elif pod.blkio_qos_invalid:
                self._invalid.skip(ctx, pod)  # koordlet too skips a pod whose annotation does not parse
                continue
            else:
                blocks = ()  # the annotation was removed: reset what we configured
            try:
                cgroup = ctx.pod_dir(pod)
            except ValueError as e:
                self._warn(f"pod:{pod.uid}", "blkioReconcile: pod %s skipped: %s", pod.key, e)
                continue
            targets.append(Target("pod", cgroup, blocks, pod, f"blkioQOS annotation of pod {pod.key}"))
        return targets

    def _annotated_pods(self, ctx: Context) -> list[PodMeta]:
        """Pods with the annotation (found once per pod change), and pods configured before that lost it."""
        gen, pods = self._annotated
        if gen != ctx.pods_generation:
            pods = [p for p in ctx.pods.values() if p.blkio_qos is not None or p.blkio_qos_invalid]
            self._annotated = (ctx.pods_generation, pods)
            self._invalid.forget_gone(ctx.pods)
        extra = [ctx.pods[u] for u in self._configured_pods if u in ctx.pods and ctx.pods[u].blkio_qos is None
                 and not ctx.pods[u].blkio_qos_invalid]
        return pods + extra if extra else pods

    # -- one target ----------------------------------------------------------------------------
    def _update(self, ctx: Context, target: Target) -> list[Change] | None:
        """``updateBlkIOConfig``: changes for the configured disks, resets for the disks only the files name;
        None when the target is left alone this tick."""
        version = ctx.cgroup_version
        if target.kind == "root":
            if version != 1:
                if target.blocks:
                    self._warn("root-v2", "blkioReconcile: cgroupRoot blkioQOS is not applied on cgroup v2 "
                               "(its io.cost.qos / io.cost.model are not in the resource registry)")
                return None
            recorder = [r for r in (COST_QOS,) if self._supported(ctx, r, "")]
            usable = {r for r in ROOT_FILES if self._supported(ctx, r, "")}
        else:
            files = V1_DEVICE_FILES if version == 1 else V2_DEVICE_FILES
            kubepods = ctx.layout.kubepods_dir()
            recorder = [r for r in files if self._supported(ctx, r, kubepods)]
            usable = set(recorder)
        if not usable:
            return None
        contents = [ctx.read(r, target.cgroup) for r in recorder]
        if all(c is None for c in contents) and not ctx.cgroup_exists("blkio", target.cgroup):
            return None  # the cgroup is not there (yet, or any more)
        stale = dict.fromkeys(recorded_devices(contents), True)
        changes: list[Change] = []
        for block in target.blocks:
            dn, why = self._disk_number(ctx, block, target.pod)
            if dn is None:
                self._warn(f"{target.reason}:{block.name}:{why}", "blkioReconcile: %s: block %r: %s; the "
                           "target is left as it is", target.reason, block.name, why)
                return None
            stale[dn] = False
            if target.kind == "root":
                updates, problem = disk_config_updates(block.io_cfg, dn)
                if problem:
                    self._warn(f"model:{dn}:{problem}", "blkioReconcile: %s: disk %s: %s; the cost model "
                               "is left as it is", target.reason, dn, problem)
                changes.extend(updates)
            else:
                changes.extend(device_updates(block.io_cfg, dn, version))
        for dn, is_stale in stale.items():
            if is_stale:
                changes.extend(disk_config_removals(dn) if target.kind == "root"
                               else device_removals(dn, version))
        return [c for c in changes if c[0] in usable]

    def _supported(self, ctx: Context, resource: str, where: str) -> bool:
        """Whether a blkio file exists on this host: checked once where koordlet checks (kubepods for the
        device files, the root for iocost), and only decided once that dir exists."""
        known = self._support.get(resource)
        if known is None:
            if not ctx.cgroup_exists("blkio", where):
                return False
            known = self._support[resource] = ctx.read(resource, where) is not None
            if not known:
                log.info("blkioReconcile: %s is not available on this kernel", resource)
        return known

    # -- disks ---------------------------------------------------------------------------------
    def _disk_number(self, ctx: Context, block: BlockCfg, pod: PodMeta | None) -> tuple[str | None, str]:
        """The ``MAJ:MIN`` of the disk a block names, or None and why not."""
        storage = self._storage_info(ctx)
        if storage is None:
            return None, "no block device information (sysfs has no block dir)"
        name = blockdev.device_path(block.name) if block.type == BLOCK_DEVICE else block.name
        disk: str | None
        if block.type == BLOCK_DEVICE:
            disk = name if name in storage.disk_numbers else storage.partition_disks.get(name)
        elif block.type == BLOCK_VOLUME_GROUP:
            disk = storage.vg_disks.get(name)
        elif block.type == BLOCK_POD_VOLUME:
            if pod is None:
                return None, "a podvolume block only applies to a pod"
            try:
                mount = blockdev.csi_volume_mount_path(pod.uid, name)
            except ValueError as e:
                return None, str(e)
            devno = self._mount_devices(ctx).get(mount)
            if devno is None:
                return None, (f"no CSI volume {name!r} is mounted for the pod (a volume from a claim is "
                              "mounted under its PersistentVolume's name, which this agent does not look up)")
            device = storage.devno_devices.get(devno)
            disk = storage.disk_of(device) if device is not None else None
        else:
            return None, f"unknown block type {block.type!r}"
        number = storage.disk_number(disk)
        if number is None:
            return None, "no such disk on this node"
        return number, ""

    def _storage_info(self, ctx: Context) -> blockdev.StorageInfo | None:
        if not self._storage:
            self._storage.append(blockdev.read_storage_info(ctx.layout.roots))
        return self._storage[0]

    def _mount_devices(self, ctx: Context) -> dict[str, str]:
        if self._mounts is None:
            self._mounts = blockdev.read_mount_devices(ctx.layout.roots)
        return self._mounts

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


__all__ = [
    "BlkIOReconcile",
    "device_removals",
    "device_updates",
    "disk_config_removals",
    "disk_config_updates",
    "io_weight",
    "recorded_devices",
]
