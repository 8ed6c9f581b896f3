"""systemConfigReconcile: node-wide memory and scheduler sysctls from the NodeSLO (koordlet-qos §4.7).

``systemStrategy`` fields and the files they set:

=========================  ==============================================  =======================  ========
field                      file                                            value                    range
=========================  ==============================================  =======================  ========
minFreeKbytesFactor        /proc/sys/vm/min_free_kbytes                    capacity KiB * f // 1e4  10240..
                                                                                                    10485760
watermarkScaleFactor       /proc/sys/vm/watermark_scale_factor             as is                    10..400
memcgReapBackGround        /sys/kernel/mm/memcg_reaper/reap_background     as is                    0..1
schedGroupIdentityEnabled  /proc/sys/kernel/sched_group_identity_enabled   as is                    0..1
schedIdleSaverWmark        /proc/sys/kernel/sched_idle_saver_wmark         as is                    any
pageCacheLimitEnabled      /sys/kernel/mm/pagecache_limit/enabled          as is                    0..1
schedFeatures (map)        /sys/kernel/debug/sched_features                "NAME" / "NO_NAME"       --
=========================  ==============================================  =======================  ========

A value outside its range is skipped (and logged once), as koordlet does; the last value written stays.
The Anolis files exist only on some kernels: where one is missing the executor skips it quietly.
Scheduler features are written first, before the other files (koordlet writes them directly, ahead
of its batch).

**Restoring.**  koordlet never resets a field that becomes unset.  This strategy does: the executor
records what a file (or a scheduler feature) held the first time this strategy changed it, and when the
field (or the feature) is no longer configured the strategy asks for that original back (a
:class:`~qosmanager.executor.executor.Restore`, which does nothing where nothing was changed).  The
record lives in memory; after a restart the "original" is whatever the file held then.  Without any
NodeSLO nothing is done (koordlet's rule), so a NodeSLO that disappears leaves the files as they are.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from qosmanager.api.nodeslo import SystemStrategy
from qosmanager.executor.executor import Request, Restore
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register

log = logging.getLogger(__name__)

SCHED_FEATURES = "sched_features"
MIN_FREE_KBYTES = "min_free_kbytes"
FEATURE_NAME = re.compile(r"[A-Z0-9_]+")


@dataclass(frozen=True, slots=True)
class Knob:
    """One ``systemStrategy`` integer field and the file it sets."""

    field: str  # SystemStrategy attribute
    json: str  # NodeSLO field name (for messages)
    resource: str  # registry resource
    lo: int | None  # valid range; None = unbounded
    hi: int | None


KNOBS = (
    Knob("min_free_kbytes_factor", "minFreeKbytesFactor", MIN_FREE_KBYTES, 10_240, 10_485_760),
    Knob("watermark_scale_factor", "watermarkScaleFactor", "watermark_scale_factor", 10, 400),
    Knob("memcg_reap_back_ground", "memcgReapBackGround", "memcg_reap_background", 0, 1),
    Knob("sched_group_identity_enabled", "schedGroupIdentityEnabled", "sched_group_identity_enabled", 0, 1),
    Knob("sched_idle_saver_wmark", "schedIdleSaverWmark", "sched_idle_saver_wmark", None, None),
    Knob("page_cache_limit_enabled", "pageCacheLimitEnabled", "pagecache_limit_enabled", 0, 1),
)


def min_free_kbytes(capacity_bytes: int, factor: int) -> int | None:
    """``(capacity // 1024) * factor // 10000``: ``factor`` is in units of 0.01 % of the node's memory.
    None when the capacity is below 1 KiB (koordlet then writes nothing at all)."""
    kib = capacity_bytes // 1024
    if kib <= 0:
        return None
    return kib * factor // 10000


def calculate_memory_config(ss: SystemStrategy, capacity_bytes: int) -> tuple[dict[str, tuple[int, Knob]],
                                                                               set[str]]:
    """``calculateMemoryConfig``: ``({resource: (value, knob)} to write, resources configured)``.

    Configured fields outside their valid range are configured but not written.
    """
    out: dict[str, tuple[int, Knob]] = {}
    configured: set[str] = set()
    for knob in KNOBS:
        raw = getattr(ss, knob.field)
        if raw is None:
            continue
        configured.add(knob.resource)
        value = min_free_kbytes(capacity_bytes, raw) if knob.resource == MIN_FREE_KBYTES else raw
        if value is None:
            continue
        if (knob.lo is not None and value < knob.lo) or (knob.hi is not None and value > knob.hi):
            continue
        out[knob.resource] = (value, knob)
    return out, configured


def feature_states(content: str) -> dict[str, bool]:
    """``sched_features`` content (``FOO NO_BAR ...``) -> ``{"FOO": True, "BAR": False}``."""
    states: dict[str, bool] = {}
    for token in content.split():
        if token.startswith("NO_"):
            states[token[3:]] = False
        else:
            states[token] = True
    return states


def feature_token(name: str, on: bool) -> str:
    return name if on else f"NO_{name}"


@register
class SystemConfigReconcile(Strategy):
    """Node sysctls and scheduler features (see the module docstring)."""

    name = "systemConfigReconcile"
    gates = ("SystemConfig",)
    interval_key = "reconcile"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self._warned: set[str] = set()

    def tick(self, ctx: Context) -> list[Request]:
        ss = ctx.nodeslo.system_strategy if ctx.nodeslo_present else None
        node = ctx.node
        if ss is None or node is None or node.memory_capacity <= 0:
            return []
        if node.memory_capacity // 1024 <= 0:
            return []  # koordlet aborts the whole update
        writes: list[Request] = []
        writes += self._sched_features(ctx, ss.sched_features or {})
        values, configured = calculate_memory_config(ss, node.memory_capacity)
        for knob in KNOBS:
            raw = getattr(ss, knob.field)
            if knob.resource in configured and knob.resource not in values:
                self._warn(f"{knob.resource}={raw}", "systemConfigReconcile: %s=%s gives a value outside "
                           "[%s, %s]; %s is left as it is", knob.json, raw, knob.lo, knob.hi, knob.resource)
        for resource, (value, knob) in values.items():
            writes.append(self.write(resource, "", value, f"systemStrategy.{knob.json} = "
                                     f"{getattr(ss, knob.field)}"))
        writes += [Restore(self.name, knob.resource, reason="restore the value found before systemStrategy "
                           "set it (the field is no longer set)")
                   for knob in KNOBS if knob.resource not in configured]
        return writes

    def _sched_features(self, ctx: Context, wanted: Mapping[str, bool]) -> list[Request]:
        """Writes for the scheduler features whose state differs from the NodeSLO's, and restores of the
        features no longer listed.  Nothing when the file cannot be read (koordlet's rule)."""
        restore = Restore(self.name, SCHED_FEATURES, entry=None, keep=frozenset(wanted),
                          reason="restore the scheduler feature found before systemStrategy set it")
        if not wanted:
            return [restore]
        content = ctx.read(SCHED_FEATURES)
        if content is None:
            self._warn("sched_features:read", "systemConfigReconcile: sched_features cannot be read; "
                       "scheduler features are left alone")
            return []
        current = feature_states(content)
        writes: list[Request] = []
        for name, on in wanted.items():
            if not FEATURE_NAME.fullmatch(name):
                self._warn(f"feature:{name}", "systemConfigReconcile: %r is not a scheduler feature name",
                           name)
                continue
            state = current.get(name)
            if state is None:
                # koordlet writes it anyway; the kernel refuses names it does not list (EINVAL), which would
                # fail every second, so we say so once instead
                self._warn(f"feature:{name}", "systemConfigReconcile: this kernel has no scheduler "
                           "feature %s", name)
                continue
            writes.append(self.write(SCHED_FEATURES, "", feature_token(name, on),
                                     f"systemStrategy.schedFeatures.{name} = {str(on).lower()}", entry=name))
        writes.append(restore)
        return writes

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


__all__ = ["KNOBS", "SystemConfigReconcile", "calculate_memory_config", "feature_states", "min_free_kbytes"]
