"""Feature gates with koordlet's names and defaults (infra §6.3).

``--feature-gates Name=true,Other=false`` overrides them; ``AllAlpha`` / ``AllBeta`` switch
every alpha / beta gate.  An unknown gate name is an error (a typo must not silently leave
a strategy off).

Strategies from plugins (:mod:`qosmanager.framework.plugins`) bring a gate each, named by their entry
point; they are passed in as ``extra`` gates, off unless named, and ``AllAlpha`` / ``AllBeta`` leave
them alone (a plugin runs only when the operator names its gate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ALPHA, BETA = "alpha", "beta"

# gate -> (default, stage)
KNOWN: dict[str, tuple[bool, str]] = {
    "AuditEvents": (False, ALPHA),
    "AuditEventsHTTPHandler": (False, ALPHA),
    "BECPUSuppress": (True, BETA),
    "BECPUIdle": (False, ALPHA),  # qosmanager's own: the BE QoS dir in cpu.idle (framework.beidle)
    "BECPUManager": (False, ALPHA),
    "BECPUEvict": (False, ALPHA),
    "BEMemoryEvict": (False, ALPHA),
    "BEMemoryHigh": (False, ALPHA),  # qosmanager's own: level 1, BE capped by memory.high (strategies.memory_high)
    "BEMemoryReclaim": (False, ALPHA),  # qosmanager's own: level 2, memory.reclaim of BE (with BEMemoryHigh)
    "CPUEvict": (False, ALPHA),
    "MemoryEvict": (False, ALPHA),
    "CPUAllocatableEvict": (False, ALPHA),
    "MemoryAllocatableEvict": (False, ALPHA),
    "CPUBurst": (True, BETA),
    "SystemConfig": (False, ALPHA),
    "RdtResctrl": (True, BETA),
    "ResctrlCollector": (False, ALPHA),
    "CgroupReconcile": (False, ALPHA),
    "NodeTopologyReport": (True, BETA),
    "Accelerators": (False, ALPHA),
    "RDMADevices": (False, ALPHA),
    "CPICollector": (False, ALPHA),
    "Libpfm4": (False, ALPHA),
    "PSICollector": (False, ALPHA),
    "BlkIOReconcile": (False, ALPHA),
    "ColdPageCollector": (False, ALPHA),
    "HugePageReport": (False, ALPHA),
    "PodResourcesProxy": (False, ALPHA),
    "HamiCoreVGPUMonitor": (False, ALPHA),
    "PerCPUMetric": (False, ALPHA),
    "NodeMetricPromMetrics": (False, ALPHA),
    # runtime-hook gates share the gate object in koordlet
    "GroupIdentity": (True, BETA),
    "CPUSetAllocator": (True, BETA),
    "GPUEnvInject": (False, ALPHA),
    "RDMADeviceInject": (False, ALPHA),
    "BatchResource": (True, BETA),
    "CPUNormalization": (False, ALPHA),
    "CoreSched": (False, ALPHA),
    "TerwayQoS": (False, ALPHA),
    "TCNetworkQoS": (False, ALPHA),
    "Resctrl": (False, ALPHA),
    "OOMScoreAdj": (False, ALPHA),
}


# The gates this agent acts on: each strategy's own (qosmanager.strategies, ``Strategy.gates``),
# BECPUManager, which changes what cpuSuppress does, BECPUIdle and BEMemoryReclaim (qosmanager's own;
# the latter adds level 2 to memoryHigh).  Every other
# name is koordlet's, accepted so that koordlet's --feature-gates value can be passed as it is, and
# changes nothing here.
ACTED_ON: tuple[str, ...] = (
    "BECPUSuppress", "BECPUManager", "BECPUIdle", "CPUBurst", "BECPUEvict", "CPUEvict", "CPUAllocatableEvict",
    "BEMemoryEvict", "MemoryEvict", "MemoryAllocatableEvict", "BEMemoryHigh", "BEMemoryReclaim",
    "CgroupReconcile", "RdtResctrl", "SystemConfig", "BlkIOReconcile",
)
ACCEPTED_ONLY: tuple[str, ...] = tuple(sorted(set(KNOWN) - set(ACTED_ON)))
# qosmanager's own gates: koordlet has no such feature (never pass them to koordlet)
OWN: tuple[str, ...] = ("BECPUIdle", "BEMemoryHigh", "BEMemoryReclaim")


def describe(names: tuple[str, ...]) -> str:
    """``Name (on)`` / ``Name`` for each gate, with its default."""
    return ", ".join(f"{n} (on)" if KNOWN[n][0] else n for n in names)


class UnknownGateError(ValueError):
    pass


def did_you_mean(name: str, names: Iterable[str]) -> str | None:
    """The name ``name`` was most likely meant to be (a letter missing, doubled or swapped), if any."""
    import difflib  # only for a refused start: not in every agent's memory

    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.85)
    return by_lower[close[0]] if close else None


@dataclass(frozen=True)
class FeatureGates:
    values: Mapping[str, bool]

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, bool] | None = None,
                       extra: Mapping[str, bool] | None = None) -> FeatureGates:
        """``extra``: more gates (plugins') with their defaults, known besides :data:`KNOWN`."""
        values = {name: default for name, (default, _) in KNOWN.items()}
        plugin_gates = {name: default for name, default in (extra or {}).items() if name not in KNOWN}
        overrides = dict(overrides or {})
        for group, stage in (("AllAlpha", ALPHA), ("AllBeta", BETA)):
            if group in overrides:
                flag = overrides.pop(group)
                for name, (_, st) in KNOWN.items():
                    if st == stage:
                        values[name] = flag
        values.update(plugin_gates)
        unknown = sorted(set(overrides) - set(values))
        if unknown:
            hints = []
            names = (*values, "AllAlpha", "AllBeta")
            for name in unknown:
                close = [k for k in names if k.lower() == name.lower()]
                if close:
                    hints.append(f"{name}: did you mean {close[0]}? (names are case-sensitive)")
                elif near := did_you_mean(name, names):
                    hints.append(f"{name}: did you mean {near}?")
            plugins = f"; plugin gates: {', '.join(sorted(plugin_gates))}" if plugin_gates else ""
            raise UnknownGateError(
                f"unknown feature gate(s): {', '.join(unknown)}"
                + (f" ({'; '.join(hints)})" if hints else "")
                + f"; the gates this agent acts on: {describe(ACTED_ON)}{plugins}; also AllAlpha, AllBeta; "
                f"koordlet's other {len(ACCEPTED_ONLY)} gates are accepted and change nothing here "
                "(qosmanager run --help lists them)")
        values.update(overrides)
        return cls(values)

    def enabled(self, name: str) -> bool:
        try:
            return self.values[name]
        except KeyError:
            raise UnknownGateError(f"unknown feature gate {name}") from None

    def any(self, *names: str) -> bool:
        return any(self.enabled(n) for n in names)
