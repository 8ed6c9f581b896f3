"""The NodeSLO spec (``slo.koordinator.sh/v1alpha1``): schema, defaults, merge and validation.

A NodeSLO reaches the agent as JSON or YAML.  koordlet never uses it raw: it overlays the user's
spec onto its built-in defaults (koordlet-qos §2.4, koordlet-infra §5.3) and the strategies read
the merged result.  This module does the same:

1. **Decoding like Go's ``encoding/json``.**  A key of a JSON object fills the field of that name,
   or, when no field has exactly that name, the field whose name matches it case-insensitively
   (koordinator's own fixtures write ``iocfg`` for ``ioCfg``).  Several keys of one object that
   match the same field apply in document order: the later one wins, an object merges into the
   earlier one.  Unknown keys are ignored, as Go ignores them, and reported in
   :attr:`NodeSLOSpec.invalid_fields` (a misspelt key silently kept koordlet's default: the reader
   learns that the typo changed what applies; a key differing only in case is not unknown).  Keys of
   maps (``schedFeatures``, ``extensions``, ``hostApplications[].strategy``) match exactly.
2. :func:`merge_spec` -- a JSON overlay of the user spec onto :func:`default_spec_dict`, exactly
   what ``json.Unmarshal(json.Marshal(user), &defaults)`` does per section: nested objects merge
   field by field (keys matched as above), maps merge key-wise, lists replace, and an explicit
   ``null`` (or an empty string, which Go's ``omitempty`` drops before the overlay) keeps the
   default.  Then, for the LSR, LS and BE classes, a ``cpuQOS``/``resctrlQOS``/``memoryQOS`` with
   ``enable: false`` has its fields replaced by the "None" variant (the ``enable`` flag stays).
3. :func:`parse_nodeslo` builds typed, frozen dataclasses from the merged dict, checking types and
   the ranges of koordinator's validation tags **field by field**, as koordlet (which skips only
   the feature or the file a bad value belongs to) effectively does.  A value out of range or of
   the wrong type is dropped and reported in :attr:`NodeSLOSpec.invalid_fields` (its JSON path and
   why); every problem is reported, not only the first, and everything else applies.  The field
   falls back to what koordlet would do without a usable value:

   * most fields: koordlet's merged default, as if the field had not been written (for fields
     without a default, such as ``systemStrategy``'s knobs or the eviction thresholds: unset, so
     that knob is not touched and that eviction feature is skipped, as koordlet skips them);
   * a ``memoryQOS`` or ``resctrlQOS`` value, ``cpuBurstPercent``: left unset, so the strategy
     leaves those files as they are (koordlet's write validators skip the value it would derive);
     ``cfsQuotaBurstPercent``: unset, which allows no quota burst (koordlet's reading of a
     percentage below 100);
   * ``resourceUsedThresholdWithBE.enable`` (or the whole section): unset, so BE suppression and
     the evictions do nothing at all, not even their recovery, instead of switching off;
   * a class's ``cpuQOS``/``memoryQOS``/``blkioQOS``/``resctrlQOS``/``networkQOS`` with a bad
     ``enable``, or a bad value anywhere in one of its blkio ``blocks``: that feature of that class
     is left as it is (koordlet aborts a blkio target it cannot resolve); a whole class or
     ``resourceQOSStrategy`` of the wrong type: left as it is;
   * a bad value in a host application, a missing or duplicate name: that application is ignored.

   Enum-like strings follow koordlet: an unknown ``cpuSuppressPolicy`` means ``cpuset``, an
   unknown ``cpuEvictPolicy`` ``evictByRealLimit``, an unknown burst ``policy`` ``none``; koordlet's
   reading applies and the value is reported in :attr:`NodeSLOSpec.invalid_fields` like a dropped
   one (``cfsquota`` switched the node to cpuset suppression without a word).  Where koordlet takes
   any string (the runtime-hook policies, a host application's QoS) an unknown one is a warning.
   Cross-field rules (lower < upper, start < end) are left to the strategies' own
   config checks, which skip just that feature, as koordlet does.  Only a document that is not a
   NodeSLO at all (not an object, another ``apiVersion``/``kind``, a ``spec`` or ``metadata`` that
   is not an object) raises :class:`NodeSLOError`; the state store then keeps the last good spec.
4. :func:`from_dict` decodes the NodeSLO-shaped pod annotations with the same key matching, but
   strictly: the first bad value raises :class:`NodeSLOError` (the pod's feature is then skipped).

Dataclass attributes are the snake_case forms of the JSON names; inline Go structs are flattened
the same way the JSON is (``memoryQOS.enable`` and ``memoryQOS.wmarkRatio`` are both attributes of
:class:`MemoryQOSCfg`).  ``None`` means "unset" for every pointer field.

Map of the module and its rooms (import every name from here, the door):

* :mod:`qosmanager.api.nodeslo_schema` - the schema table: constants, field specs, one frozen
  dataclass per Go struct down to :class:`NodeSLOSpec`, koordlet's defaults
  (:func:`default_spec_dict`);
* :mod:`qosmanager.api.nodeslo_decode` - steps 1 to 4 above: key matching, :func:`merge_spec`,
  the typed build with its fallbacks, :func:`from_dict` and :func:`parse_nodeslo`.
"""

from __future__ import annotations

from qosmanager.api.nodeslo_decode import (  # noqa: F401  (the door: re-exported)
    _schema,
    default_memory_qos,
    from_dict,
    json_overlay,
    key_text,
    merge_spec,
    overlay_config,
    parse_nodeslo,
)
from qosmanager.api.nodeslo_schema import (  # noqa: F401  (the door: re-exported)
    _FEATURE_ROOTS,
    _INT64,
    API_VERSION,
    BLOCK_DEVICE,
    BLOCK_POD_VOLUME,
    BLOCK_VOLUME_GROUP,
    CFS_QUOTA_BURST_ONLY,
    CGROUP_BASE_KUBEPODS,
    CGROUP_BASE_KUBEPODS_BESTEFFORT,
    CGROUP_BASE_KUBEPODS_BURSTABLE,
    CGROUP_BASE_ROOT,
    CPU_BURST_AUTO,
    CPU_BURST_NONE,
    CPU_BURST_ONLY,
    CPU_EVICT_POLICY_ALLOCATABLE,
    CPU_EVICT_POLICY_REAL_LIMIT,
    CPU_SUPPRESS_POLICY_CFS_QUOTA,
    CPU_SUPPRESS_POLICY_CPUSET,
    CPUQOS,
    DEFAULT,
    EMPTY,
    FEATURE,
    KEEP,
    KIND,
    KOORDLET_ONLY_FIELDS,
    UNSET,
    BlkIOQOS,
    BlkIOQOSCfg,
    BlockCfg,
    CgroupPath,
    CPUBurstConfig,
    CPUBurstStrategy,
    CPUQOSCfg,
    HostApplicationSpec,
    IOCfg,
    MemoryQOS,
    MemoryQOSCfg,
    NetworkQOS,
    NetworkQOSCfg,
    NodeSLOError,
    NodeSLOSpec,
    PodMemoryQOSConfig,
    ResctrlQOS,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
    _SpecBody,
    default_spec_dict,
)
