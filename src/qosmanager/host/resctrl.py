"""resctrl (Intel RDT / AMD PQoS): paths, schemata format and the CAT/MBA formulas.

The resctrl filesystem sits at ``<sys>/fs/resctrl``.  Its root and every group dir
(the agent uses ``LSR``, ``LS`` and ``BE``) hold ``schemata`` and ``tasks``; the root's
``info/L3/cbm_mask`` is the full cache-way bitmask.  A schemata file has one line per
resource; the kernel pads them to align, e.g.::

        L3:0=7ff;1=7ff
        MB:0=100;1=100

L3 masks are hex, MB values decimal (percent on Intel, absolute units on AMD, where
2048 means unlimited).  Lines of other resources (``L3CODE``, ``L2``, ARM MPAM) are
ignored.  Infra §2.9, QoS §4.6.
"""

from __future__ import annotations

import math
import os
from typing import Protocol

from qosmanager.host.roots import HostRoots

GROUPS = ("LSR", "LS", "BE")
AMD_VENDOR = "AuthenticAMD"
INTEL_VENDOR = "GenuineIntel"
AMD_MBA_UNLIMITED = 2048
# AMD MBA units: 1/8 GBps; koordlet takes 25 GBps * 8 * 0.8 as the "100 %" bandwidth.
AMD_MBA_FULL_UNITS = 160

Schemata = dict[str, dict[int, int]]
"""``{"L3": {cache_id: mask}, "MB": {cache_id: value}}``; both keys always present."""


# ---------------------------------------------------------------------------
# paths
# ---------------------------------------------------------------------------
def resctrl_root(roots: HostRoots) -> str:
    return roots.sys_path("fs/resctrl")


def group_dir(roots: HostRoots, group: str = "") -> str:
    """The root (``group=""``) or a control group's dir."""
    if "/" in group or group in (".", ".."):
        raise ValueError(f"bad resctrl group name {group!r}")
    root = resctrl_root(roots)
    return f"{root}/{group}" if group else root


def schemata_path(roots: HostRoots, group: str = "") -> str:
    return group_dir(roots, group) + "/schemata"


def tasks_path(roots: HostRoots, group: str = "") -> str:
    return group_dir(roots, group) + "/tasks"


def cbm_mask_path(roots: HostRoots) -> str:
    return resctrl_root(roots) + "/info/L3/cbm_mask"


def mon_data_dirs(roots: HostRoots, group: str = "") -> dict[int, str]:
    """L3 cache id -> ``<group>/mon_data/mon_L3_XX`` (``llc_occupancy``, ``mbm_*_bytes`` inside)."""
    base = group_dir(roots, group) + "/mon_data"
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    out: dict[int, str] = {}
    for name in names:
        if name.startswith("mon_L3_") and name[7:].isdigit():
            out[int(name[7:])] = f"{base}/{name}"
    return dict(sorted(out.items()))


def read_cbm_mask(roots: HostRoots) -> int | None:
    """The L3 capacity bitmask, or None when resctrl is not mounted or the file is garbled."""
    try:
        with open(cbm_mask_path(roots)) as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------
# schemata and tasks
# ---------------------------------------------------------------------------
def _parse_items(kind: str, body: str, base: int, text: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for item in body.split(";"):
        item = item.strip()
        if not item:
            continue
        cache_id, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(cache_id)] = int(value, base)
        except ValueError:
            raise ValueError(f"resctrl schemata: bad {kind} item {item!r} in {text!r}") from None
    return out


def parse_schemata(text: str) -> Schemata:
    """A schemata file -> ``{"L3": {id: mask}, "MB": {id: value}}``; other resources ignored."""
    out: Schemata = {"L3": {}, "MB": {}}
    for line in text.split("\n"):
        kind, sep, body = line.strip().partition(":")
        if not sep:
            continue
        if kind == "L3":
            out["L3"] = _parse_items(kind, body, 16, text)
        elif kind == "MB":
            out["MB"] = _parse_items(kind, body, 10, text)
    return out


def format_l3(masks: dict[int, int]) -> str:
    """``{0: 0x7ff, 1: 0x7ff}`` -> ``"L3:0=7ff;1=7ff;\\n"`` (sorted ids, lowercase hex)."""
    return "L3:" + "".join(f"{i}={masks[i]:x};" for i in sorted(masks)) + "\n"


def format_mb(values: dict[int, int]) -> str:
    """``{0: 100, 1: 100}`` -> ``"MB:0=100;1=100;\\n"``."""
    return "MB:" + "".join(f"{i}={values[i]};" for i in sorted(values)) + "\n"


def parse_tasks(text: str) -> list[int]:
    """A ``tasks`` file (one thread id per line) -> ids; lines that are not numbers are skipped."""
    return [int(t) for t in text.split() if t.isascii() and t.isdigit()]


# ---------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------
def cat_l3_mask(cbm: int, start_percent: int, end_percent: int) -> int:
    """The L3 way mask covering ``[start%, end%)`` of the cache (koordlet's CalculateCatL3MaskValue).

    ``cbm`` must be a contiguous low mask (2^k - 1).  With ``ways`` = its bit length,
    ``mask = (1 << ceil(ways*end/100)) - (1 << ceil(ways*start/100))``.
    """
    if cbm <= 0 or (cbm + 1) & cbm:
        raise ValueError(f"illegal cbm {cbm:#x}: must be 2^k - 1")
    if start_percent < 0 or end_percent > 100 or end_percent <= start_percent:
        raise ValueError(
            f"illegal l3 cat percent: start {start_percent}, end {end_percent} (need 0 <= start < end <= 100)"
        )
    ways = cbm.bit_length()
    start_way = math.ceil(ways * start_percent / 100)
    end_way = math.ceil(ways * end_percent / 100)
    return (1 << end_way) - (1 << start_way)


def mba_value(percent: int, vendor: str) -> int:
    """The MB schemata value for a bandwidth percentage.

    Intel takes percent in steps of 10: round up to the next multiple.  AMD takes
    absolute 1/8 GBps units: 100 % is 2048 (unlimited), otherwise ``int(160*pct/100)``.
    """
    if not 1 <= percent <= 100:
        raise ValueError(f"MBA percent must be within [1, 100], got {percent}")
    if vendor == AMD_VENDOR:
        return AMD_MBA_UNLIMITED if percent == 100 else int(AMD_MBA_FULL_UNITS * percent / 100)
    return percent if percent % 10 == 0 else percent // 10 * 10 + 10


class HasFlags(Protocol):
    """Anything carrying CPU flags: :class:`~qosmanager.host.procfs.CPUInfoSummary`,
    :class:`~qosmanager.host.sysfs.NodeCPUInfo`."""

    @property
    def flags(self) -> frozenset[str]: ...


def supports_resctrl(cpuinfo: HasFlags) -> bool:
    """Whether the CPU can partition L3 (``cat_l3``) and memory bandwidth (``mba``)."""
    return "cat_l3" in cpuinfo.flags and "mba" in cpuinfo.flags


def supports_resctrl_monitoring(cpuinfo: HasFlags) -> bool:
    """Whether LLC occupancy and memory-bandwidth counters exist (the resctrl collector's check)."""
    return {"cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"} <= cpuinfo.flags
